-- log_take.lua: Take for the sliding log, flat. The same state as
-- sliding_window_log.lua (a hash: T the sequence number of the oldest run,
-- N the number of runs, M the units logged before the oldest run; run i has
-- its time in field "t"..(T+i) and the units logged up to and including it
-- in "e"..(T+i)), the same ARGV and the same 7-integer reply as one.lua, so
-- TakeAll and refunds (main.lua) read what it writes. What it leaves out is
-- the general scripts' machinery: no functions defined per call beyond one,
-- no state table, one HMGET for the state and the runs every request needs,
-- a search only when more than one run expires or a refusal needs the
-- retry time. Exact integer arithmetic as in prelude.lua (the % operator;
-- every value below 2^53).

local key = KEYS[1]
local us
if ARGV[2] == '1' then
  local t = redis.call('TIME')
  us = (t[1] + 0) * 1000000 + (t[2] + 0)
else
  us = ARGV[11] + 0
end
local rate, period, tick, cost = ARGV[5] + 0, ARGV[7] + 0, ARGV[9] + 0, ARGV[10] + 0
local now = (us - us % tick) / tick
-- now becomes the time the request is counted at (the log's newest, if
-- later); its waits are told from its own clock, asked.
local asked = now

-- nm formats an integer exactly: Lua prints those below 10^14 by itself,
-- string.format the larger (times in ticks).
local function nm(x)
  if x == 0 then return '0' end
  if x < 1e14 and x > -1e14 then return x .. '' end
  return string.format('%d', x)
end

local h = redis.call('HMGET', key, 'T', 'N', 'M')
local T, N, M = tonumber(h[1]) or 0, tonumber(h[2]) or 0, tonumber(h[3]) or 0
local lastT, lastE, t0 = 0, 0, 0
if N > 0 then
  local s, f = nm(T + N - 1), nm(T)
  local v = redis.call('HMGET', key, 't' .. s, 'e' .. s, 't' .. f)
  lastT, lastE, t0 = tonumber(v[1]) or 0, tonumber(v[2]) or 0, tonumber(v[3]) or 0
  if lastT > now then now = lastT end
end
local cut = now - period

-- Drop the runs at or before cut: one under steady traffic (run 1 is
-- newer), else found by binary search.
local dels
if N > 0 and t0 <= cut then
  local k = 1
  if N > 1 and (tonumber(redis.call('HGET', key, 't' .. nm(T + 1))) or 0) <= cut then
    local lo, hi = 2, N
    while lo < hi do
      local mid = (lo + hi - (lo + hi) % 2) / 2
      if (tonumber(redis.call('HGET', key, 't' .. nm(T + mid))) or 0) > cut then hi = mid else lo = mid + 1 end
    end
    k = lo
  end
  local ek = lastE
  if k < N then ek = tonumber(redis.call('HGET', key, 'e' .. nm(T + k - 1))) or 0 end
  dels = {}
  for i = 0, k - 1 do
    local s = nm(T + i)
    dels[#dels + 1] = 't' .. s
    dels[#dels + 1] = 'e' .. s
  end
  T, N, M = T + k, N - k, ek
  if N == 0 then T, M = 0, 0 end
end

local n = 0
if N > 0 then n = lastE - M end
local allowed, retry, sets = 0, 0, nil
if cost > rate then
  retry = -1
elseif n + cost <= rate then
  allowed = 1
  if cost > 0 then
    if N > 0 and lastT == now then
      lastE = lastE + cost
      sets = {'e' .. nm(T + N - 1), nm(lastE)}
    else
      local s = nm(T + N)
      lastT, lastE = now, M + n + cost
      sets = {'t' .. s, nm(now), 'e' .. s, nm(lastE)}
      N = N + 1
    end
    n = n + cost
  end
else
  -- The time of unit u = n + cost - rate - 1 (0 the oldest): the first run
  -- counting past M + u units; the log then holds room at its time + period.
  local bound = M + n + cost - rate - 1
  local lo, hi = 0, N - 1 -- the last run counts them all
  while lo < hi do
    local mid = (lo + hi - (lo + hi) % 2) / 2
    if (tonumber(redis.call('HGET', key, 'e' .. nm(T + mid))) or 0) > bound then hi = mid else lo = mid + 1 end
  end
  local t = lastT
  if lo < N - 1 then t = tonumber(redis.call('HGET', key, 't' .. nm(T + lo))) or 0 end
  retry = t + period - asked
end

local idle, reset = now, 0
if N > 0 then
  idle = lastT + period
  reset = idle - asked
end

if dels then
  local i = 1
  while i <= #dels do
    local j = math.min(#dels, i + 999)
    redis.call('HDEL', key, unpack(dels, i, j))
    i = j + 1
  end
end
if N == 0 then
  -- The zero State decides as a key never seen: none is kept.
  if h[1] or h[2] or h[3] then redis.call('DEL', key) end
elseif sets or dels then
  -- Expire a margin after the state is at rest, as one.lua does (a
  -- refusal changes neither, so it writes nothing).
  local ttl = idle * tick - us
  ttl = math.max(1, math.max(0, (ttl + (-ttl) % 1000) / 1000) + (ARGV[3] + 0))
  sets = sets or {}
  sets[#sets + 1] = 'T'
  sets[#sets + 1] = nm(T)
  sets[#sets + 1] = 'N'
  sets[#sets + 1] = nm(N)
  sets[#sets + 1] = 'M'
  sets[#sets + 1] = nm(M)
  redis.call('HSET', key, unpack(sets))
  redis.call('PEXPIRE', key, ttl)
end
return {allowed, math.max(0, rate - n), retry, reset, 0, idle, now}
