-- Keep this consumer's held entries claimed: claim each again, restarting
-- its idle time, if it is still pending with this consumer. An entry
-- another consumer has claimed meanwhile (this one was silent past the
-- claim time) stays with it; the next turn here finds it 'lost'.
-- KEYS: 1 stream
-- ARGV: 1 group, 2 consumer, 3... entry ids
for i = 3, #ARGV do
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1)
  if #p == 1 and p[1][2] == ARGV[2] then
    redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[i], 'JUSTID')
  end
end
return 0
