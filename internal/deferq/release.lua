-- Let go of what this consumer holds, at its shutdown: each entry still
-- pending with it is claimed again for it with its idle time set to the
-- claim time, so that the next claim round of another instance takes it
-- (XAUTOCLAIM), rather than one claim_idle later, as for a consumer that
-- died. With ARGV[4], that entry alone (a held request let go to stay
-- within the bound), if it is still pending with this consumer.
-- Returns how many entries were let go.
-- KEYS: 1 stream
-- ARGV: 1 group, 2 consumer, 3 claim time (ms), 4 one entry (optional)
if ARGV[4] then
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[4], ARGV[4], 1)
  if #p == 1 and p[1][2] == ARGV[2] then
    redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[4], 'IDLE', ARGV[3], 'JUSTID')
    return 1
  end
  return 0
end
local start, n = '-', 0
while true do
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], start, '+', 100, ARGV[2])
  if #p == 0 then
    return n
  end
  for _, e in ipairs(p) do
    redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, e[1], 'IDLE', ARGV[3], 'JUSTID')
  end
  n = n + #p
  start = '(' .. p[#p][1]
end
