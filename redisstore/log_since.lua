-- log_since.lua: how many units the sliding log of KEYS[1] (the hash of
-- sliding_window_log.lua: T the sequence number of the oldest run, N the
-- number of runs, M the units logged before the oldest run; run i has its
-- time in field "t"..(T+i) and the units logged up to and including it in
-- "e"..(T+i)) holds that were logged after an instant and are still in its
-- window. Read only.
--
-- ARGV[1] Period, ARGV[2] the tick (µs), both as the log's Limit has them;
-- ARGV[3] now (µs since the epoch), or '' for Redis' clock; ARGV[4] the
-- instant (µs), or '' for none: every unit still in the window. A unit
-- logged in the instant's own tick is not counted (its time cannot tell
-- it from one logged before). Returns {units, now}.
local key = KEYS[1]
local period, tick = ARGV[1] + 0, ARGV[2] + 0
local us
if ARGV[3] == '' then
  local t = redis.call('TIME')
  us = (t[1] + 0) * 1000000 + (t[2] + 0)
else
  us = ARGV[3] + 0
end
local function fdiv(a, b) return (a - a % b) / b end
-- A unit counts if its time (ticks) is above bound.
local bound = fdiv(us, tick) - period
if ARGV[4] ~= '' then
  local after = fdiv(ARGV[4] + 0, tick)
  if after > bound then bound = after end
end

local function nm(x)
  if x == 0 then return '0' end
  if x < 1e14 and x > -1e14 then return x .. '' end
  return string.format('%d', x)
end

local h = redis.call('HMGET', key, 'T', 'N', 'M')
local T, N, M = tonumber(h[1]) or 0, tonumber(h[2]) or 0, tonumber(h[3]) or 0
if N == 0 then return {0, us} end
-- The first run above bound: the runs' times grow.
local lo, hi = 0, N
while lo < hi do
  local mid = fdiv(lo + hi, 2)
  if (tonumber(redis.call('HGET', key, 't' .. nm(T + mid))) or 0) > bound then hi = mid else lo = mid + 1 end
end
if lo == N then return {0, us} end
local last = tonumber(redis.call('HGET', key, 'e' .. nm(T + N - 1))) or 0
local before = M
if lo > 0 then before = tonumber(redis.call('HGET', key, 'e' .. nm(T + lo - 1))) or 0 end
return {last - before, us}
