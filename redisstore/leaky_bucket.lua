-- leaky_bucket.lua: the twin of sluice's leakyBucket. T is the leave time of
-- the last unit queued in whole ticks, N its fraction in 1/Rate of a tick, M
-- non-zero once set: the latest tick at which a request queued (at least 1),
-- for refunds (as sluice's leakyBucket). Times relative to now are in parts of 1/Rate tick. A request
-- of cost n is n units a spacing apart, the first leaving at max(now, the
-- last leave + a spacing); the request leaves (its delay) with the last.

local function leakyStale(o, rate, burst, period, now)
  return o.M == 0 or now - o.T > cdiv((burst + 1) * period, rate) + 1
end

STEP[2] = function(o, rate, burst, period, segments, now, cost, force)
  local maxWait = burst * period
  local full = (burst + 1) * period
  local allowed, retry, delay, mark = false, 0, 0, 0
  local stale = leakyStale(o, rate, burst, period, now)
  local ahead = o.T - now
  if not stale and ahead > 0 and ahead > fdiv(debtCap(burst, period) - o.N, rate) then
    -- So far behind that the queue is past the cap: refused, nothing
    -- counted (sluice's leakyBucket).
    return false, 0, farBehind(rate, period, ahead, o.N, maxWait, cost, cost <= burst + 1, force),
      ahead + cdiv(o.N + period, rate), 0, now + ahead + cdiv(o.N + full, rate), 0
  end
  local rel = 0
  if not stale then rel = (o.T - now) * rate + o.N end
  -- mark, for a refund (REFUND[2]): the tick at which the queue before
  -- this request would have emptied, its last unit a spacing behind
  -- (where this request's first unit leaves), rounded down.
  mark = now
  if not stale and rel + period > 0 then mark = now + fdiv(rel + period, rate) end
  local fits = cost <= burst + 1
  -- first: when the request's first unit leaves; leave: when its last unit,
  -- and so the request, does (cost 0: both the queue's last leave).
  local first, leave = 0, 0
  if fits and cost == 0 then
    if not stale then first = max(0, rel) end
    leave = first
  elseif fits then
    if not stale then first = max(0, rel + period) end
    leave = first + (cost - 1) * period
  end
  if fits and leave <= maxWait then
    allowed = true
    delay = cdiv(leave, rate)
    if cost > 0 then
      rel, stale = leave, false
      o.T = now + tdiv(leave, rate)
      o.N = leave % rate
      o.M = max(o.M, now, 1)
    end
  elseif force then
    -- Charged past the queue: the cost joins the queue's end.
    leave = 0
    if not stale then leave = max(0, rel) end
    leave = addCapped(leave, cost, period, debtCap(burst, period))
    rel, stale = leave, false
    o.T = now + tdiv(leave, rate)
    o.N = leave % rate
    o.M = max(o.M, now, 1)
    retry = cdiv(leave + period - maxWait, rate) -- for a cost of 1
  elseif not fits then
    retry = -1
  else
    retry = cdiv(leave - maxWait, rate)
  end
  if stale or rel + period <= 0 then
    return allowed, burst + 1, retry, 0, delay, now, mark
  end
  return allowed, max(0, min(burst + 1, fdiv(maxWait - rel, period))), retry,
    cdiv(rel + period, rate), delay, now + max(0, cdiv(rel + full, rate)), mark
end
