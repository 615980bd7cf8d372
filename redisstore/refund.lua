-- refund.lua: REFUND[alg] gives back what a take counted, for TakeAll across
-- Cluster slots (see main.lua). Appended after every algorithm file.

-- A refund gives back the cost * Period token-ticks a request took, less
-- the refill past mark (the tick the debt before it would have refilled
-- by) up to the last refill, T: a request after mark found the bucket
-- refilled that much less for the refunded one, and without it the bucket
-- was full and that refill lost, so giving it back too would erase that
-- much of the later request. Exact when T did not pass mark; otherwise,
-- with one request in between, short by less than a tick's refill; with
-- more, short by up to what the earlier ones took after mark (counted as
-- refill lost); never over (TestRefundNeverOver).
-- Each REFUND[alg] returns whether it gave anything back (the key counts
-- less), for main.lua to publish the key only then.
REFUND[1] = function(o, rate, burst, period, segments, now, cost, mark)
  local back = cost * period
  if o.T > mark then back = max(0, back - (o.T - mark) * rate) end
  local n = max(0, o.N - back)
  local gave = n < o.N
  o.N = n
  return gave
end

-- GCRA's and the leaky bucket's refunds follow the token bucket's: both
-- keep a debt that drains at Rate (GCRA's debt; the leaky bucket's queue
-- beyond now, a spacing behind), and a request after mark (the tick the
-- debt before the refunded one would have drained by) found that much
-- more drained without it. M holds the latest tick at which a request
-- added to the state, so the refund gives back the request's cost less
-- Rate × (M - mark) when M passed mark: exact when no request, or one,
-- came between the take and the refund (short by less than a tick's
-- refill, mark being rounded down), or none after mark; with more, it may
-- be short (a second request, after a first refilled the debt, is counted
-- as if it had found it drained), never over. backAfter returns what is
-- left to give back (0: nothing).
local function backAfter(o, rate, period, cost, mark)
  local back = cost * period
  if o.M > mark then
    local late = o.M - mark
    if late >= cdiv(back, rate) then return 0 end
    back = back - late * rate
  end
  return back
end

-- A refund moves the queue's tail back by what is left to give back. A
-- tail a spacing or more behind now is an empty queue, as none is.
REFUND[2] = function(o, rate, burst, period, segments, now, cost, mark)
  if leakyStale(o, rate, burst, period, now) then return false end
  local back = backAfter(o, rate, period, cost, mark)
  if back == 0 then return false end
  local rel = (o.T - now) * rate + o.N - back
  local q = fdiv(rel, rate)
  o.T = now + q
  o.N = rel - q * rate
  return true
end

REFUND[3] = function(o, rate, burst, period, segments, now, cost, mark)
  if o.T ~= mark or o.N == 0 or cost <= 0 then return false end
  o.N = max(0, o.N - cost)
  return true
end

-- A refund removes up to cost units logged at mark, and shifts the counts of
-- any runs logged since.
REFUND[4] = function(o, rate, burst, period, segments, now, cost, mark)
  local i = firstRun(o, runT, mark - 1) -- the first run at or after mark
  if i >= o.N then return false end
  local t, e = runAt(o, i)
  if t ~= mark then return false end
  local before = o.M
  if i > 0 then
    local _, pe = runAt(o, i - 1)
    before = pe
  end
  local k = min(cost, e - before)
  if k <= 0 then return false end
  if k == e - before then
    -- the whole run goes: shift the later runs down by one
    for j = i + 1, o.N - 1 do
      local tj, ej = runAt(o, j)
      runSet(o, j - 1, tj, ej - k)
    end
    runDel(o, o.N - 1)
    o.N = o.N - 1
    if o.N == 0 then o.T, o.M = 0, 0 end
  else
    for j = i, o.N - 1 do
      local tj, ej = runAt(o, j)
      runSet(o, j, tj, ej - k)
    end
  end
  return true
end

REFUND[5] = function(o, rate, burst, period, s, now, cost, mark)
  if mark > o.T or mark < o.T - s then return false end
  local c = cget(o, s, mark)
  if c == 0 or cost <= 0 then return false end
  cput(o, s, mark, max(0, c - cost))
  return true
end

-- A refund moves the theoretical arrival time back by what is left to give
-- back.
REFUND[6] = function(o, rate, burst, period, segments, now, cost, mark)
  local debt = gcraDebt(o, rate, now)
  if debt == 0 then return false end
  local back = backAfter(o, rate, period, cost, mark)
  if back == 0 then return false end
  debt = max(0, debt - back)
  o.T = now + tdiv(debt, rate)
  o.N = debt % rate
  return true
end


-- GIVE[alg](o, rate, burst, period, segments, now, cost) is the twin of
-- sluice's giveBack (refund.go): it gives cost units back to o, which a
-- request of cost 0 at now has just brought to now (Store.Refund, the
-- 'give' mode of main.lua). Unlike REFUND it knows nothing of a
-- particular request: never more than the key has counted. It returns
-- whether it gave anything back (the key counts less), for main.lua to
-- publish the key only then.
local GIVE = {}

-- less is sluice's lessUnits: n less cost * unit, at least 0 (cost * unit
-- is formed only when it is below n, so exact).
local function less(n, cost, unit)
  if cost >= cdiv(n, unit) then return 0 end
  return n - cost * unit
end

-- withinCap is sluice's withinCap: now and ahead (o.T - now), counted from
-- the earliest instant at which the debt is within debtCap.
local function withinCap(o, rate, burst, period, now, ahead)
  local m = fdiv(debtCap(burst, period) - o.N, rate)
  if ahead > m then
    m = max(m, 0)
    return o.T - m, m
  end
  return now, ahead
end

GIVE[1] = function(o, rate, burst, period, segments, now, cost)
  local n = less(o.N, cost, period)
  local gave = n < o.N
  o.N = n
  return gave
end

GIVE[6] = function(o, rate, burst, period, segments, now, cost)
  local ahead = o.T - now
  if ahead < 0 or (ahead == 0 and o.N == 0) then return false end
  local t, n = o.T, o.N
  now, ahead = withinCap(o, rate, burst, period, now, ahead)
  local debt = less(ahead * rate + o.N, cost, period)
  o.T = now + tdiv(debt, rate)
  o.N = debt % rate
  return o.T ~= t or o.N ~= n
end

GIVE[2] = function(o, rate, burst, period, segments, now, cost)
  if leakyStale(o, rate, burst, period, now) then return false end
  local t, n = o.T, o.N
  local ahead
  now, ahead = withinCap(o, rate, burst, period, now, o.T - now)
  -- The next unit leaves a spacing after the last, which moves back to
  -- now at the earliest.
  local rel = ahead * rate + o.N
  if rel <= -period then return false end
  rel = less(rel + period, cost, period) - period
  local q = fdiv(rel, rate)
  o.T = now + q
  o.N = rel - q * rate
  return o.T ~= t or o.N ~= n
end

GIVE[3] = function(o, rate, burst, period, segments, now, cost)
  local n = less(o.N, cost, 1)
  local gave = n < o.N
  o.N = n
  return gave
end

-- The log drops up to cost of its newest units: the runs past the one
-- holding the last unit kept go, and that run is cut short.
GIVE[4] = function(o, rate, burst, period, segments, now, cost)
  local n = logUnits(o)
  if n == 0 or cost == 0 then return false end
  if cost >= n then
    -- Every unit goes: the zero state, which save deletes with the key.
    o.T, o.N, o.M = 0, 0, 0
    return true
  end
  local keep = o.M + n - cost
  local i = firstRun(o, runE, keep - 1) -- the run holding unit keep
  for j = i + 1, o.N - 1 do runDel(o, j) end
  o.N = i + 1
  runSet(o, i, runT(o, i), keep)
  return true
end

GIVE[5] = function(o, rate, burst, period, s, now, cost)
  local j, gave = o.T, false
  while cost > 0 and j >= o.T - s do
    local c = cget(o, s, j)
    local x = min(c, cost)
    if x > 0 then
      cput(o, s, j, c - x)
      cost = cost - x
      gave = true
    end
    j = j - 1
  end
  return gave
end
