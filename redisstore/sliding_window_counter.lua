-- sliding_window_counter.lua: the twin of sluice's slidingCounter. T is the
-- newest sub-window; with Segments 1, N and M are its count and the previous
-- one's; otherwise the Segments+1 counts are the fields named j mod
-- (Segments+1) of the key's hash (missing means 0). mark is the sub-window
-- the request was counted in.

local function cslot(o, s, j)
  if s == 1 then
    if j == o.T then return 'N' end
    return 'M'
  end
  return fmt(j % (s + 1))
end

local function cget(o, s, j)
  if j > o.T or j < o.T - s then return 0 end
  local name = cslot(o, s, j)
  if name == 'N' then return o.N elseif name == 'M' then return o.M end
  return fget(o, name)
end

local function cput(o, s, j, v)
  local name = cslot(o, s, j)
  if name == 'N' then o.N = v elseif name == 'M' then o.M = v
  elseif v == 0 then fset(o, name, false)
  else fset(o, name, v) end
end

local function cadvance(o, s, k)
  local j = o.T + 1
  while j <= k and j <= o.T + s + 1 do
    if s == 1 then
      o.M, o.N = o.N, 0
    else
      cput(o, s, j, 0)
    end
    j = j + 1
  end
  o.T = max(o.T, k)
end

local function counterWait(o, rate, s, l, k, now, n)
  local newer = 0
  for j = k - s + 1, k do newer = newer + cget(o, s, j) end
  for j = k, k + s + 1 do
    if j > k then newer = newer + cget(o, s, j) - cget(o, s, j - s) end
    local m = rate - n - newer
    if m >= 0 then
      local start = max(now, j * l)
      local oldest = cget(o, s, j - s)
      if oldest == 0 then return start - now end
      local xmax = cdiv((m + 1) * l, oldest) - 1
      if xmax >= 1 then
        local t = max(start, (j + 1) * l - xmax)
        if t < (j + 1) * l then return t - now end
      end
    end
  end
  return -1
end

STEP[5] = function(o, rate, burst, period, s, now, cost, force)
  local l = tdiv(period, s)
  local k = fdiv(now, l)
  -- Counted at the newest sub-window's start, its waits told from its own
  -- clock: behind.
  local behind = 0
  if k < o.T then
    k = o.T
    behind = k * l - now
    now = k * l
  end
  cadvance(o, s, k)
  local newer = 0
  for j = k - s + 1, k do newer = newer + cget(o, s, j) end
  local est = tdiv(cget(o, s, k - s) * ((k + 1) * l - now), l) + newer
  local allowed, retry, reset = false, 0, 0
  if cost <= rate and est + cost <= rate then
    allowed = true
    cput(o, s, k, cget(o, s, k) + cost)
    est = est + cost
  elseif force then
    local before = cget(o, s, k)
    local v = addCapped(before, cost, 1, max(rate + 1, fdiv(562949953421312, period)))
    cput(o, s, k, v)
    est = est + v - before
    retry = counterWait(o, rate, s, l, k, now, 1) -- for a cost of 1
  elseif cost > rate then
    retry = -1
  else
    retry = counterWait(o, rate, s, l, k, now, cost)
  end
  if est > 0 then reset = counterWait(o, rate, s, l, k, now, rate) + behind end
  if not allowed and retry >= 0 then retry = retry + behind end
  return allowed, max(0, rate - est), retry, reset, 0, (o.T + s + 1) * l, k
end
