-- debt.lua: takeDebt, shared by the token bucket and GCRA (sluice's takeDebt).

-- takeDebt admits cost tokens against debt; it returns the new debt and the
-- outcome (allowed, remaining, retry, reset, delay, idle, mark).
local function takeDebt(rate, burst, period, now, debt, cost, force)
  local capacity = burst * period
  local allowed, retry = false, 0
  if cost <= burst and debt + cost * period <= capacity then
    allowed = true
    debt = debt + cost * period
  elseif force then
    debt = addCapped(debt, cost, period, debtCap(burst, period))
    retry = cdiv(debt + period - capacity, rate) -- for a cost of 1
  elseif cost > burst then
    retry = -1
  else
    retry = cdiv(debt + cost * period - capacity, rate)
  end
  local reset = cdiv(debt, rate)
  return debt, allowed, max(0, tdiv(capacity - debt, period)), retry, reset, 0, now + reset, 0
end

