-- gcra.lua: the twin of sluice's gcra. T is the theoretical arrival time in
-- whole ticks, N its fraction in 1/Rate of a tick; M the latest tick at
-- which a request added debt, for refunds (sluice's gcra keeps it so). It shares takeDebt
-- (debt.lua) with the token bucket.

local function gcraDebt(o, rate, now)
  if o.T > now or (o.T == now and o.N > 0) then
    return (o.T - now) * rate + o.N
  end
  return 0
end

STEP[6] = function(o, rate, burst, period, segments, now, cost, force)
  local ahead = o.T - now
  if ahead > 0 and ahead > fdiv(debtCap(burst, period) - o.N, rate) then
    -- So far behind T that the debt is past the cap: refused, nothing
    -- counted (sluice's gcra).
    local reset = ahead + cdiv(o.N, rate)
    return false, 0, farBehind(rate, period, ahead, o.N, burst * period, cost, cost <= burst, force), reset, 0, now + reset, 0
  end
  local before = gcraDebt(o, rate, now)
  local d, allowed, remaining, retry, reset, delay, idle = takeDebt(rate, burst, period, now, before, cost, force)
  o.T = now + tdiv(d, rate)
  o.N = d % rate
  -- M: the latest tick at which a request added debt (as sluice's gcra),
  -- for REFUND[6].
  if d > before and now > o.M then o.M = now end
  -- For a refund (REFUND[6]): the tick the debt before this request would
  -- have refilled by, rounded down.
  return allowed, remaining, retry, reset, delay, idle, now + fdiv(before, rate)
end
