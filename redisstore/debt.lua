-- debt.lua: takeDebt, shared by the token bucket and GCRA (sluice's takeDebt).

-- takeDebt admits cost tokens against debt; it returns the new debt and the
-- outcome (allowed, remaining, retry, reset, delay, idle, mark).
local function takeDebt(rate, burst, period, now, debt, cost)
  local capacity = burst * period
  local allowed, retry = false, 0
  if cost > burst then
    retry = -1
  elseif debt + cost * period <= capacity then
    allowed = true
    debt = debt + cost * period
  else
    retry = cdiv(debt + cost * period - capacity, rate)
  end
  local reset = cdiv(debt, rate)
  return debt, allowed, max(0, tdiv(capacity - debt, period)), retry, reset, 0, now + reset, 0
end

