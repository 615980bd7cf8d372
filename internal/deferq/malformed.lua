-- Dead-letter an entry that is not a queued request (no id, or not an id of
-- this rule: written by hand, by another program, or damaged): it could
-- never take its turn, and would be held for ever. Copied to the
-- dead-letter stream with the error, acknowledged and deleted, at once.
-- KEYS: 1 stream, 2 dead-letter stream, 3 the stream-id index (entry id
--       -> request id): the entry leaves it, as it leaves the group
-- ARGV: 1 group, 2 entry id (SID), 3 error, 4 max dead letters
-- Returns 1, or 0 when the entry was gone already.
local e = redis.call('XRANGE', KEYS[1], ARGV[2], ARGV[2])
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('HDEL', KEYS[3], ARGV[2])
if #e == 0 then
  return 0
end
local f = e[1][2]
f[#f + 1] = 'error'
f[#f + 1] = ARGV[3]
f[#f + 1] = 'status'
f[#f + 1] = '0'
redis.call('XADD', KEYS[2], 'MAXLEN', ARGV[4], '*', unpack(f))
redis.call('XDEL', KEYS[1], ARGV[2])
return 1
