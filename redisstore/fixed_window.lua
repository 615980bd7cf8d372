-- fixed_window.lua: the twin of sluice's fixedWindow. T is the window
-- number, N its count. mark is the window the request was counted in.

STEP[3] = function(o, p, now, cost)
  local w = max(fdiv(now, p.period), o.T)
  if w ~= o.T then
    o.T, o.N = w, 0
  end
  local e = (w + 1) * p.period
  local r = outcome()
  if cost > p.rate then
    r.retry = -1
  elseif o.N + cost <= p.rate then
    r.allowed = true
    o.N = o.N + cost
  else
    r.retry = e - now
  end
  r.remaining = p.rate - o.N
  if o.N > 0 then r.reset = e - now end
  r.idle = e
  r.mark = w
  return r
end

REFUND[3] = function(o, p, now, cost, mark)
  if o.T == mark then o.N = max(0, o.N - cost) end
end
