-- sliding_window_log.lua: the twin of sluice's slidingLog. The Go log holds
-- one time per unit of cost; here equal times are kept as one run, so a
-- request of any cost is O(1) to log and the hash holds at most Rate runs.
-- Runs are a queue in the key's hash: T is the sequence number of the oldest
-- run, N the number of runs, M the number of units logged before the oldest
-- run; run i (oldest first) has its time in field "t"..(T+i) and, in field
-- "e"..(T+i), the number of units logged up to and including it (so unit
-- counts and positions are differences, found by binary search). mark is
-- the (clamped) time the request was logged at.

-- seq names run T+i (num: sequence numbers stay far below 10^14).
local seq = num

local function runAt(o, i)
  local s = seq(o.T + i)
  return fget(o, 't' .. s), fget(o, 'e' .. s)
end

-- runT and runE read one field of run i: a search needs only one.
local function runT(o, i)
  return fget(o, 't' .. seq(o.T + i))
end

local function runE(o, i)
  return fget(o, 'e' .. seq(o.T + i))
end

local function runSet(o, i, t, e)
  local s = seq(o.T + i)
  fset(o, 't' .. s, t)
  fset(o, 'e' .. s, e)
end

local function runDel(o, i)
  local s = seq(o.T + i)
  fset(o, 't' .. s, false)
  fset(o, 'e' .. s, false)
end

-- logUnits is the number of units in the log.
local function logUnits(o)
  if o.N == 0 then return 0 end
  return runE(o, o.N - 1) - o.M
end

-- firstRun returns the index of the first run whose field (runT or runE)
-- is above bound (N if none); the field grows along the runs.
local function firstRun(o, field, bound)
  local lo, hi = 0, o.N
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if field(o, mid) > bound then hi = mid else lo = mid + 1 end
  end
  return lo
end

-- unitTime is the time of unit u (0 is the oldest), as Go's Log[u]: the
-- time of the first run counting past M + u units.
local function unitTime(o, u)
  return runT(o, firstRun(o, runE, o.M + u))
end

-- logDrop removes the oldest k runs.
local function logDrop(o, k)
  if k == 0 then return end
  local e = runE(o, k - 1)
  for i = 0, k - 1 do runDel(o, i) end
  o.T, o.N, o.M = o.T + k, o.N - k, e
  if o.N == 0 then o.T, o.M = 0, 0 end
end

-- logAppend logs c units at now (n in the log, the last run at lastT
-- holding units up to lastE).
local function logAppend(o, now, lastT, lastE, n, c)
  if o.N > 0 and lastT == now then
    runSet(o, o.N - 1, now, lastE + c)
  else
    runSet(o, o.N, now, o.M + n + c)
    o.N = o.N + 1
  end
end

STEP[4] = function(o, rate, burst, period, segments, now, cost, force)
  -- now becomes the time the request is counted at; its waits are told
  -- from its own clock, asked.
  local asked = now
  local lastT, lastE
  if o.N > 0 then
    lastT, lastE = runAt(o, o.N - 1)
    if lastT > now then now = lastT end
  end
  local cut = now - period
  if o.N > 0 then
    if runT(o, 0) <= cut then
      -- Under steady traffic one run expires per request: look at the
      -- second run before searching.
      if o.N == 1 or runT(o, 1) > cut then
        logDrop(o, 1)
      else
        logDrop(o, firstRun(o, runT, cut))
      end
    end
  end
  local allowed, retry, reset = false, 0, 0
  local n = logUnits(o)
  if cost <= rate and n + cost <= rate then
    allowed = true
    if cost > 0 then
      logAppend(o, now, lastT, lastE, n, cost)
      n = n + cost
    end
  elseif force then
    -- At most Rate+1 units, and only the newest Rate+1 kept: they decide
    -- exactly as more would (sluice's slidingLog).
    local c = min(cost, rate + 1)
    if c > 0 then
      logAppend(o, now, lastT, lastE, n, c)
      n = n + c
    end
    if n > rate + 1 then
      local target = o.M + n - (rate + 1)
      logDrop(o, firstRun(o, runE, target))
      o.M = target
      n = rate + 1
    end
    retry = unitTime(o, n - rate) + period - asked -- for a cost of 1
  elseif cost > rate then
    retry = -1
  else
    retry = unitTime(o, n + cost - rate - 1) + period - asked
  end
  local idle = now
  if o.N > 0 then
    idle = runT(o, o.N - 1) + period
    reset = idle - asked
  end
  return allowed, max(0, rate - n), retry, reset, 0, idle, now
end
