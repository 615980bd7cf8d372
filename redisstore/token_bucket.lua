-- token_bucket.lua: the twin of sluice's tokenBucket and takeDebt. T is the
-- last refill, N the debt in token-ticks (Burst - tokens) * Period.

STEP[1] = function(o, rate, burst, period, segments, now, cost, force)
  local debt = o.N
  if debt > 0 and now > o.T then
    local elapsed = now - o.T
    if elapsed >= cdiv(debt, rate) then
      debt = 0
    else
      debt = debt - elapsed * rate
    end
  end
  local d, allowed, remaining, retry, reset, delay, idle, mark = takeDebt(rate, burst, period, now, debt, cost, force)
  local ahead = o.T - now
  o.T = max(o.T, now)
  o.N = d
  -- At rest once refilled from the last refill, not from a request before
  -- it; that request's waits run from the last refill too, on its clock.
  idle = o.T + reset
  if ahead > 0 and d > 0 then
    reset = reset + ahead
    if not allowed and retry >= 0 then retry = retry + ahead end
  end
  -- For a refund (REFUND[1]): the tick the debt before this request would
  -- have refilled by, rounded down.
  mark = o.T + fdiv(debt, rate)
  return allowed, remaining, retry, reset, delay, idle, mark
end
