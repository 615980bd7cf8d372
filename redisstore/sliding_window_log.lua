-- sliding_window_log.lua: the twin of sluice's slidingLog. The Go log holds
-- one time per unit of cost; here equal times are kept as one run, so a
-- request of any cost is O(1) to log and the hash holds at most Rate runs.
-- Runs are a queue in the key's hash: T is the sequence number of the oldest
-- run, N the number of runs, M the number of units logged before the oldest
-- run; run i (oldest first) has its time in field "t"..(T+i) and, in field
-- "e"..(T+i), the number of units logged up to and including it (so unit
-- counts and positions are differences, found by binary search). mark is
-- the (clamped) time the request was logged at.

local function runAt(o, i)
  local s = fmt(o.T + i)
  return fget(o, 't' .. s), fget(o, 'e' .. s)
end

local function runSet(o, i, t, e)
  local s = fmt(o.T + i)
  fset(o, 't' .. s, t)
  fset(o, 'e' .. s, e)
end

local function runDel(o, i)
  local s = fmt(o.T + i)
  fset(o, 't' .. s, false)
  fset(o, 'e' .. s, false)
end

-- logUnits is the number of units in the log.
local function logUnits(o)
  if o.N == 0 then return 0 end
  local _, e = runAt(o, o.N - 1)
  return e - o.M
end

-- firstRun returns the index of the first run for which pred(t, e) holds
-- (N if none); pred must be false then true along the runs.
local function firstRun(o, pred)
  local lo, hi = 0, o.N
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if pred(runAt(o, mid)) then hi = mid else lo = mid + 1 end
  end
  return lo
end

-- unitTime is the time of unit u (0 is the oldest), as Go's Log[u].
local function unitTime(o, u)
  local want = o.M + u + 1
  local i = firstRun(o, function(t, e) return e >= want end)
  local t = runAt(o, i)
  return t
end

-- logDrop removes the oldest k runs.
local function logDrop(o, k)
  if k == 0 then return end
  local _, e = runAt(o, k - 1)
  for i = 0, k - 1 do runDel(o, i) end
  o.T, o.N, o.M = o.T + k, o.N - k, e
  if o.N == 0 then o.T, o.M = 0, 0 end
end

STEP[4] = function(o, rate, burst, period, segments, now, cost)
  local lastT, lastE
  if o.N > 0 then
    lastT, lastE = runAt(o, o.N - 1)
    if lastT > now then now = lastT end
  end
  local cut = now - period
  if o.N > 0 then
    local t0 = runAt(o, 0)
    if t0 <= cut then logDrop(o, firstRun(o, function(t) return t > cut end)) end
  end
  local allowed, retry, reset = false, 0, 0
  local n = logUnits(o)
  if cost > rate then
    retry = -1
  elseif n + cost <= rate then
    allowed = true
    if cost > 0 then
      if o.N > 0 and lastT == now then
        runSet(o, o.N - 1, now, lastE + cost)
      else
        runSet(o, o.N, now, o.M + n + cost)
        o.N = o.N + 1
      end
      n = n + cost
    end
  else
    retry = unitTime(o, n + cost - rate - 1) + period - now
  end
  local idle = now
  if o.N > 0 then
    local t = runAt(o, o.N - 1)
    idle = t + period
    reset = idle - now
  end
  return allowed, rate - n, retry, reset, 0, idle, now
end
