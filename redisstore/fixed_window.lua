-- fixed_window.lua: the twin of sluice's fixedWindow. T is the window
-- number, N its count. mark is the window the request was counted in.

STEP[3] = function(o, rate, burst, period, segments, now, cost, force)
  local w = max(fdiv(now, period), o.T)
  if w ~= o.T then
    o.T, o.N = w, 0
  end
  local e = (w + 1) * period
  local allowed, retry, reset = false, 0, 0
  if cost <= rate and o.N + cost <= rate then
    allowed = true
    o.N = o.N + cost
  elseif force then -- over the rate until the window ends
    o.N = addCapped(o.N, cost, 1, max(1125899906842624, rate + 1))
    retry = e - now
  elseif cost > rate then
    retry = -1
  else
    retry = e - now
  end
  if o.N > 0 then reset = e - now end
  return allowed, max(0, rate - o.N), retry, reset, 0, e, w
end
