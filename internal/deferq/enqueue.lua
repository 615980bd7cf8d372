-- Queue one deferred request, atomically with its status record and its
-- place in its key's order. Idempotent by request id: run again with the
-- same id (its first reply was lost), it queues nothing more.
-- KEYS: 1 stream, 2 status hash, 3 the key's list of ids
-- ARGV: 1 max queue, 2 id, 3 limiter key, 4 method, 5 uri, 6 headers (JSON),
--       7 body, 8 now (ms), 9 rule name, 10 status TTL while queued (ms)
-- Returns the stream entry id (the first run's, when ID is queued already),
-- or nil when the queue is full.
local sid = redis.call('HGET', KEYS[2], 'sid')
if sid then
  return sid
end
if redis.call('XLEN', KEYS[1]) >= tonumber(ARGV[1]) then
  return false
end
sid = redis.call('XADD', KEYS[1], '*', 'id', ARGV[2], 'key', ARGV[3], 'method', ARGV[4],
  'uri', ARGV[5], 'header', ARGV[6], 'body', ARGV[7], 'at', ARGV[8])
redis.call('HSET', KEYS[2], 'state', 'queued', 'rule', ARGV[9], 'sid', sid, 'at', ARGV[8],
  'updated', ARGV[8], 'attempts', 0)
redis.call('PEXPIRE', KEYS[2], ARGV[10])
redis.call('RPUSH', KEYS[3], ARGV[2])
return sid
