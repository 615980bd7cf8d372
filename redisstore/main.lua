-- main.lua: the entry point, appended after the algorithms. It decides
-- #KEYS requests. ARGV: mode ('one': Take's mode, see one.lua; 'take': decide, and commit every
-- key if every request is allowed, none otherwise; 'check': decide, commit
-- nothing; 'refund': give back what a take counted; 'give': give cost units
-- back, sluice's Algorithm.Refund), 1 to use Redis' clock
-- (TIME) instead of each request's now, the expiry margin in ms; then per
-- request 9 values: algorithm, rate, burst, period (ticks), segments, tick
-- (µs), cost, now (µs since the epoch), mark (refund; in the other modes
-- 1 forces the charge, sluice's Request.Force).
-- After the requests' values, a give or a refund may carry a channel and
-- a message per key: the script then PUBLISHes each key's message on the
-- channel (once per key) when the refund is saved (redisstore's
-- Options.PublishRefunds), only for the keys it gave anything back to.
-- It returns 7 integers per request: allowed (1/0), remaining, retry (-1:
-- never), reset, delay, idle (ticks), mark; nothing for a refund; for a
-- give, those of a request of cost 0 right after it.
local mode = ARGV[1]
local margin = ARGV[3] + 0
local tnow
if ARGV[2] == '1' then
  local t = redis.call('TIME')
  tnow = (t[1] + 0) * 1000000 + (t[2] + 0)
end

-- decide runs request i (its arguments start after ARGV[a]) on o and
-- appends its outcome to out; it returns whether it was allowed.
-- A forced request never fails the others: decide returns true for it.
-- With give, it runs sluice's Algorithm.Refund instead: a request of cost
-- 0, GIVE, and a request of cost 0 again, whose outcome it appends; it
-- returns then, second, whether GIVE gave anything back.
local function decide(o, a, out, give)
  local force = ARGV[a + 9] == '1'
  local alg, segments, tick = (ARGV[a + 1] + 0), (ARGV[a + 5] + 0), (ARGV[a + 6] + 0)
  local rate, burst, period = (ARGV[a + 2] + 0), (ARGV[a + 3] + 0), (ARGV[a + 4] + 0)
  local us = tnow or (ARGV[a + 8] + 0)
  local now, cost = fdiv(us, tick), (ARGV[a + 7] + 0)
  local gave = false
  if give then
    STEP[alg](o, rate, burst, period, segments, now, 0, false)
    gave = GIVE[alg](o, rate, burst, period, segments, now, cost)
    cost, force = 0, false
  end
  local allowed, remaining, retry, reset, delay, idle, mark =
    STEP[alg](o, rate, burst, period, segments, now, cost, force)
  o.ttl = max(0, cdiv(idle * tick - us, 1000)) + margin
  local n = #out
  out[n + 1] = allowed and 1 or 0
  out[n + 2] = remaining
  out[n + 3] = retry
  out[n + 4] = reset
  out[n + 5] = delay
  out[n + 6] = idle
  out[n + 7] = mark
  return allowed or force, gave
end

local function loadFor(key, a)
  local alg = ARGV[a + 1]
  local many = alg == '5' and ARGV[a + 5] ~= '1'
  return load(key, many or alg == '4', many)
end

local objs, order, out, ok = {}, {}, {}, true
local gave = {} -- a refund's or a give's requests that gave anything back
for i = 1, #KEYS do
  local a = 3 + (i - 1) * 9
  local key = KEYS[i]
  local o = objs[key]
  if not o then
    o = loadFor(key, a)
    objs[key] = o
    order[#order + 1] = o
  end
  if mode == 'refund' then
    local tick = ARGV[a + 6] + 0
    gave[i] = REFUND[(ARGV[a + 1] + 0)](o, (ARGV[a + 2] + 0), (ARGV[a + 3] + 0), (ARGV[a + 4] + 0),
      (ARGV[a + 5] + 0), fdiv(tnow or (ARGV[a + 8] + 0), tick), (ARGV[a + 7] + 0), (ARGV[a + 9] + 0))
    o.ttl = max(redis.call('PTTL', key), margin)
  else
    local allowed
    allowed, gave[i] = decide(o, a, out, mode == 'give')
    if not allowed then ok = false end
  end
end
if (mode == 'take' and ok) or mode == 'refund' or mode == 'give' then
  for _, o in ipairs(order) do save(o, o.ttl) end
end
local pub = 3 + #KEYS * 9
if (mode == 'give' or mode == 'refund') and ARGV[pub + 1] then
  local sent = {}
  for i = 1, #KEYS do
    local m = ARGV[pub + 1 + i]
    if not sent[m] and gave[i] then
      sent[m] = true
      redis.call('PUBLISH', ARGV[pub + 1], m)
    end
  end
end
return out
