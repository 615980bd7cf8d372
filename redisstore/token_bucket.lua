-- token_bucket.lua: the twin of sluice's tokenBucket and takeDebt. T is the
-- last refill, N the debt in token-ticks (Burst - tokens) * Period.

-- takeDebt admits cost tokens against debt; it returns the outcome and the
-- new debt.
local function takeDebt(p, now, debt, cost)
  local capacity = p.burst * p.period
  local r = outcome()
  if cost > p.burst then
    r.retry = -1
  elseif debt + cost * p.period <= capacity then
    r.allowed = true
    debt = debt + cost * p.period
  else
    r.retry = cdiv(debt + cost * p.period - capacity, p.rate)
  end
  r.remaining = max(0, tdiv(capacity - debt, p.period))
  r.reset = cdiv(debt, p.rate)
  r.idle = now + r.reset
  return r, debt
end

STEP[1] = function(o, p, now, cost)
  local debt = o.N
  if debt > 0 and now > o.T then
    local elapsed = now - o.T
    if elapsed >= cdiv(debt, p.rate) then
      debt = 0
    else
      debt = debt - elapsed * p.rate
    end
  end
  local r
  r, debt = takeDebt(p, now, debt, cost)
  o.T = max(o.T, now)
  o.N = debt
  return r
end

-- A refund gives back the cost * Period token-ticks a request took.
REFUND[1] = function(o, p, now, cost, mark)
  o.N = max(0, o.N - cost * p.period)
end
