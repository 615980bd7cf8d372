-- main.lua: the entry point, appended after the algorithms. It decides
-- #KEYS requests. ARGV: mode ('one': decide and save, as sluice's Take
-- does even when it denies; 'take': decide, and commit every key if every
-- request is allowed, none otherwise; 'check': decide, commit nothing;
-- 'refund': give back what a take counted), 1 to use Redis' clock (TIME)
-- instead of each request's now, the expiry margin in ms; then per request
-- 9 values: algorithm, rate, burst, period (ticks), segments, tick (µs),
-- cost, now (µs since the epoch), mark (refund only).
-- It returns 7 integers per request: allowed (1/0), remaining, retry (-1:
-- never), reset, delay, idle (ticks), mark.
local mode = ARGV[1]
local margin = tonumber(ARGV[3])
local tnow
if ARGV[2] == '1' then
  local t = redis.call('TIME')
  tnow = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local objs, order, out, ok = {}, {}, {}, true
for i = 1, #KEYS do
  local a = 3 + (i - 1) * 9
  local alg = tonumber(ARGV[a + 1])
  local p = {
    rate = tonumber(ARGV[a + 2]), burst = tonumber(ARGV[a + 3]),
    period = tonumber(ARGV[a + 4]), segments = tonumber(ARGV[a + 5]),
    tick = tonumber(ARGV[a + 6]),
  }
  local cost = tonumber(ARGV[a + 7])
  local us = tnow or tonumber(ARGV[a + 8])
  local key = KEYS[i]
  local o = objs[key]
  if not o then
    o = load(key, alg == 5 and p.segments > 1)
    objs[key] = o
    order[#order + 1] = o
  end
  local now = fdiv(us, p.tick)
  if mode == 'refund' then
    REFUND[alg](o, p, now, cost, tonumber(ARGV[a + 9]))
    o.ttl = max(redis.call('PTTL', key), margin)
  else
    local r = STEP[alg](o, p, now, cost)
    if not r.allowed then ok = false end
    o.ttl = max(0, cdiv(r.idle * p.tick - us, 1000)) + margin
    local n = #out
    out[n + 1] = r.allowed and 1 or 0
    out[n + 2] = r.remaining
    out[n + 3] = r.retry
    out[n + 4] = r.reset
    out[n + 5] = r.delay
    out[n + 6] = r.idle
    out[n + 7] = r.mark
  end
end
if mode == 'one' or (mode == 'take' and ok) or mode == 'refund' then
  for _, o in ipairs(order) do save(o, o.ttl) end
end
return out
