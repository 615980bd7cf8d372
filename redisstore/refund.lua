-- refund.lua: REFUND[alg] gives back what a take counted, for TakeAll across
-- Cluster slots (see main.lua). Appended after every algorithm file.

-- A refund gives back the cost * Period token-ticks a request took, less
-- the refill past mark (the tick the debt before it would have refilled
-- by) up to the last refill, T: a request after mark found the bucket
-- refilled that much less for the refunded one, and without it the bucket
-- was full and that refill lost, so giving it back too would erase that
-- much of the later request. Exact when T did not pass mark; otherwise
-- short by less than a tick's refill, never over.
REFUND[1] = function(o, rate, burst, period, segments, now, cost, mark)
  local back = cost * period
  if o.T > mark then back = max(0, back - (o.T - mark) * rate) end
  o.N = max(0, o.N - back)
end

-- (The leaky bucket's and GCRA's refunds give back too much when the
-- queue would have emptied, or the bucket refilled, before another request
-- came between the take and the refund: that request then loses what
-- leaked or refilled in between, up to the refunded cost. Their state
-- keeps no time of the last request, as the token bucket's T is, to tell.)

-- A refund moves the queue's tail back by the request's cost * Period/Rate,
-- and, when nothing queued behind the request (the tail is its last unit,
-- its first not ahead of now), restores the tail exactly as it was: none, or
-- as far below now as the take had clamped its first unit (mark, see
-- leaky_bucket.lua).
REFUND[2] = function(o, rate, burst, period, segments, now, cost, mark)
  if leakyStale(o, rate, burst, period, now) then return end
  local rel = (o.T - now) * rate + o.N
  local behind = rel > (cost - 1) * period
  if not behind and mark == 1 then
    o.T, o.N, o.M = 0, 0, 0
    return
  end
  rel = rel - cost * period
  if not behind and mark < 0 then rel = rel + mark end
  local q = fdiv(rel, rate)
  o.T = now + q
  o.N = rel - q * rate
end

REFUND[3] = function(o, rate, burst, period, segments, now, cost, mark)
  if o.T == mark then o.N = max(0, o.N - cost) end
end

-- A refund removes up to cost units logged at mark, and shifts the counts of
-- any runs logged since.
REFUND[4] = function(o, rate, burst, period, segments, now, cost, mark)
  local i = firstRun(o, runT, mark - 1) -- the first run at or after mark
  if i >= o.N then return end
  local t, e = runAt(o, i)
  if t ~= mark then return end
  local before = o.M
  if i > 0 then
    local _, pe = runAt(o, i - 1)
    before = pe
  end
  local k = min(cost, e - before)
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
end

REFUND[5] = function(o, rate, burst, period, s, now, cost, mark)
  if mark <= o.T and mark >= o.T - s then
    cput(o, s, mark, max(0, cget(o, s, mark) - cost))
  end
end

-- A refund moves the theoretical arrival time back by what the request took.
REFUND[6] = function(o, rate, burst, period, segments, now, cost, mark)
  local debt = gcraDebt(o, rate, now)
  if debt == 0 then return end
  debt = max(0, debt - cost * period)
  o.T = now + tdiv(debt, rate)
  o.N = debt % rate
end

