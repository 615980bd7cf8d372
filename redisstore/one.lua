-- one.lua: the entry point of Take's scripts, appended after one algorithm.
-- It decides the request on KEYS[1] and saves its state, as sluice's Take
-- does even when it denies. ARGV is laid out as for main.lua with one
-- request (ARGV[1], the mode, is 'one'). It returns the 7 integers of
-- main.lua.
local us
if ARGV[2] == '1' then
  local t = redis.call('TIME')
  us = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  us = tonumber(ARGV[11])
end
local segments, tick = tonumber(ARGV[8]), tonumber(ARGV[9])
local alg = ARGV[4]
local many = alg == '5' and segments ~= 1
local o = load(KEYS[1], many or alg == '4', many)
local allowed, remaining, retry, reset, delay, idle, mark =
  STEP[tonumber(alg)](o, tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]), segments, fdiv(us, tick), tonumber(ARGV[10]))
save(o, max(0, cdiv(idle * tick - us, 1000)) + tonumber(ARGV[3]))
return {allowed and 1 or 0, remaining, retry, reset, delay, idle, mark}
