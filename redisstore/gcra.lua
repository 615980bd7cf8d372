-- gcra.lua: the twin of sluice's gcra. T is the theoretical arrival time in
-- whole ticks, N its fraction in 1/Rate of a tick. It shares takeDebt with
-- the token bucket (token_bucket.lua is always loaded before this file).

local function gcraDebt(o, p, now)
  if o.T > now or (o.T == now and o.N > 0) then
    return (o.T - now) * p.rate + o.N
  end
  return 0
end

STEP[6] = function(o, p, now, cost)
  local r, debt = takeDebt(p, now, gcraDebt(o, p, now), cost)
  o.T = now + tdiv(debt, p.rate)
  o.N = fmod(debt, p.rate)
  return r
end

-- A refund moves the theoretical arrival time back by what the request took.
REFUND[6] = function(o, p, now, cost, mark)
  local debt = gcraDebt(o, p, now)
  if debt == 0 then return end
  debt = max(0, debt - cost * p.period)
  o.T = now + tdiv(debt, p.rate)
  o.N = fmod(debt, p.rate)
end
