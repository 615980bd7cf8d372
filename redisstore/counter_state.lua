-- counter_state.lua: the state of the counter KEYS[1] (of any algorithm but
-- the sliding window log), as sluice keeps it, and the clock. Read only.
--
-- ARGV[1] Segments (1 but for a segmented sliding window counter); ARGV[2]
-- now (µs since the epoch), or '' for Redis' clock. With one segment the
-- state is the string "T N M" (prelude.lua's load); with more, a
-- hash holding T and the Segments+1 sub-window counts in the fields named
-- j mod (Segments+1) (sliding_window_counter.lua). Returns {now, T, N, M}
-- for one segment, {now, T, count 0, …, count Segments} for more; a key
-- never used (or at rest, deleted) reads as zeros.
local key, segs = KEYS[1], ARGV[1] + 0
local us
if ARGV[2] == '' then
  local t = redis.call('TIME')
  us = (t[1] + 0) * 1000000 + (t[2] + 0)
else
  us = ARGV[2] + 0
end
if segs <= 1 then
  local v = redis.call('GET', key)
  if not v then return {us, 0, 0, 0} end
  local T, N, M = string.match(v, '^(%S+) (%S+) (%S+)$')
  return {us, T + 0, N + 0, M + 0}
end
local names = {'T'}
for m = 0, segs do names[#names + 1] = string.format('%d', m) end
local h = redis.call('HMGET', key, unpack(names))
local out = {us}
for i = 1, #h do out[#out + 1] = tonumber(h[i]) or 0 end
return out
