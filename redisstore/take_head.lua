-- take_head.lua: the start of Take's flat scripts (take_*.lua), for the
-- algorithms whose state is the string "T N M" (the buckets, GCRA, the fixed
-- window, the one-segment counter). Each script is take_head.lua, one
-- take_<algorithm>.lua and take_tail.lua run straight through: no functions
-- and no tables are created (Redis runs a script's whole body on every
-- call), and the script only moves the key's state. It returns the state it
-- read, and the Go side derives the Decision from that state with
-- sluice.Algorithm.TakeMicro, the very state machine this script mirrors, so
-- the reply is exactly memstore's.
--
-- KEYS[1]: the key. ARGV[1]: now (µs since the epoch), or '' to use Redis'
-- clock (TIME); ARGV[2]: the tick (µs); ARGV[3]: the expiry margin (ms);
-- ARGV[4] on: the algorithm's numbers (see its file), precomputed by Go.
--
-- Exact arithmetic: every value is an integer below 2^53 (Limit.Ticks
-- guarantees the bounds). For such a and b > 0, Lua's a % b (a -
-- floor(a/b)*b) is exact: if a/b is not an integer it is at least 1/b from
-- one, while the rounding error of a/b is below |a|/b * 2^-53 < 1/b, so
-- floor sees the true quotient's integer part. Hence floor division is
-- (a - a % b) / b and ceiling division (a + (-a) % b) / b, both exact (the
-- numerator is a multiple of b), and no C function is called for them.
-- Strings become numbers by arithmetic (s + 0), which converts once inside
-- the VM, where tonumber is a C call that converts twice.
local key, us, tick = KEYS[1], ARGV[1], ARGV[2] + 0
local clock = us == ''
if clock then
  local t = redis.call('TIME')
  us = t[1] * 1000000 + t[2]
else
  us = us + 0
end
local now = (us - us % tick) / tick
local v = redis.call('GET', key)
local T, N, M = 0, 0, 0
if v then
  T, N, M = string.match(v, '^(%S+) (%S+) (%S+)$')
  T, N, M = T + 0, N + 0, M + 0
end
-- idle: the algorithm sets it to the instant (ticks) from which the new
-- state is at rest, as Go's outcome.idle.
local idle
