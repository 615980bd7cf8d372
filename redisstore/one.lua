-- one.lua: the entry point of Take's scripts, appended after one algorithm.
-- It decides the request on KEYS[1] and saves its state, as sluice's Take
-- does even when it denies. ARGV is laid out as for main.lua with one
-- request (ARGV[1], the mode, is 'one'). It returns the 7 integers of
-- main.lua.
local us
if ARGV[2] == '1' then
  local t = redis.call('TIME')
  us = (t[1] + 0) * 1000000 + (t[2] + 0)
else
  us = ARGV[11] + 0
end
local segments, tick = ARGV[8] + 0, ARGV[9] + 0
local alg = ARGV[4]
local many = alg == '5' and segments ~= 1
local o = load(KEYS[1], many or alg == '4', many)
local allowed, remaining, retry, reset, delay, idle, mark =
  STEP[alg + 0](o, (ARGV[5] + 0), (ARGV[6] + 0), (ARGV[7] + 0), segments, fdiv(us, tick), (ARGV[10] + 0), ARGV[12] == '1')
save(o, max(0, cdiv(idle * tick - us, 1000)) + (ARGV[3] + 0))
return {allowed and 1 or 0, remaining, retry, reset, delay, idle, mark}
