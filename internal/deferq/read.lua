-- Read entries of the stream for this consumer, bounded by their bodies:
-- new ones (XREADGROUP, mode 'new') or those idle with a silent consumer
-- (XAUTOCLAIM, mode 'claim'). An entry whose body is over the rule's
-- bound in force (max_body_bytes, lowered by a reload since it was queued)
-- comes back without its body, header and uri, marked 'over' with the
-- body's length, so that the instance never reads more than it may hold;
-- it dead-letters that entry (finish.lua), which is its now.
-- KEYS: 1 stream
-- ARGV: 1 group, 2 consumer, 3 mode ('new' or 'claim'), 4 count,
--       5 max body bytes, 6 claim: min idle (ms), 7 claim: start
-- Returns {cursor, entries}: cursor is XAUTOCLAIM's next start ('' for
-- 'new'), entries as XRANGE gives them.
local es, cursor
if ARGV[3] == 'claim' then
  local r = redis.call('XAUTOCLAIM', KEYS[1], ARGV[1], ARGV[2], ARGV[6], ARGV[7], 'COUNT', ARGV[4])
  cursor, es = r[1], r[2]
else
  local r = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', ARGV[4], 'STREAMS', KEYS[1], '>')
  cursor, es = '', {}
  if r then
    es = r[1][2]
  end
end
local bound = tonumber(ARGV[5])
local out = {}
for _, e in ipairs(es) do
  local f = e[2]
  if type(f) ~= 'table' then
    f = {} -- deleted from the stream while pending (Redis 6.2's XAUTOCLAIM): malformed
  end
  local body
  for i = 1, #f, 2 do
    if f[i] == 'body' then
      body = f[i + 1]
      break
    end
  end
  if body and #body > bound then
    local g = {'over', tostring(#body)}
    for i = 1, #f, 2 do
      if f[i] == 'id' or f[i] == 'key' or f[i] == 'also' then
        g[#g + 1] = f[i]
        g[#g + 1] = f[i + 1]
      end
    end
    f = g
  end
  out[#out + 1] = {e[1], f}
end
return {cursor, out}
