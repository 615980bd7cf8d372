-- leaky_bucket.lua: the twin of sluice's leakyBucket. T is the leave time of
-- the last admitted request in whole ticks, N its fraction in 1/Rate of a
-- tick, M 1 once set. Times relative to now are in parts of 1/Rate tick.

local function leakyStale(o, p, now)
  return o.M == 0 or now - o.T > cdiv((p.burst + 1) * p.period, p.rate) + 1
end

STEP[2] = function(o, p, now, cost)
  local maxWait = p.burst * p.period
  local full = (p.burst + 1) * p.period
  local r = outcome()
  local stale = leakyStale(o, p, now)
  local rel = 0
  if not stale then rel = (o.T - now) * p.rate + o.N end
  if cost > p.burst + 1 then
    r.retry = -1
  else
    local leave = 0
    if not stale then leave = max(0, rel + cost * p.period) end
    if leave <= maxWait then
      r.allowed = true
      r.delay = cdiv(leave, p.rate)
      if cost > 0 then
        rel, stale = leave, false
        o.T = now + tdiv(leave, p.rate)
        o.N = fmod(leave, p.rate)
        o.M = 1
      end
    else
      r.retry = cdiv(leave - maxWait, p.rate)
    end
  end
  if stale or rel + p.period <= 0 then
    r.remaining = p.burst + 1
    r.idle = now
    return r
  end
  r.remaining = max(0, min(p.burst + 1, fdiv(maxWait - rel, p.period)))
  r.reset = cdiv(rel + p.period, p.rate)
  r.idle = now + max(0, cdiv(rel + full, p.rate))
  return r
end

-- A refund moves the last leave time back by the request's cost * Period/Rate.
REFUND[2] = function(o, p, now, cost, mark)
  if leakyStale(o, p, now) then return end
  local rel = (o.T - now) * p.rate + o.N - cost * p.period
  local q = fdiv(rel, p.rate)
  o.T = now + q
  o.N = rel - q * p.rate
end
