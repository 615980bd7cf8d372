-- Queue one deferred request, atomically with its status record and its
-- place in its key's order. Idempotent by request id: run again with the
-- same id (its first reply was lost), it queues nothing more.
-- KEYS: 1 stream, 2 status hash, 3 the key's list of ids, 4 the stream-id
--       index (a hash: entry id -> request id)
-- ARGV: 1 max queue, 2 id, 3 limiter key, 4 method, 5 uri, 6 headers (JSON),
--       7 body, 8 now (ms), 9 rule name, 10 status TTL while queued (ms),
--       11 the request's other keys of the rule (a JSON array; '': none)
-- Returns the stream entry id (the first run's, when ID is queued already),
-- nil when the queue is full, or 0 when a 404 was answered for ID before
-- this ran (status.lua's mark): the client was told it is not queued, and
-- it is not.
local rec = redis.call('HMGET', KEYS[2], 'sid', 'state')
if rec[1] then
  return rec[1]
end
if rec[2] == 'not_found' then
  return 0
end
if redis.call('XLEN', KEYS[1]) >= tonumber(ARGV[1]) then
  return false
end
local f = {'id', ARGV[2], 'key', ARGV[3], 'method', ARGV[4], 'uri', ARGV[5], 'header', ARGV[6],
  'body', ARGV[7], 'at', ARGV[8]}
if ARGV[11] and ARGV[11] ~= '' then
  f[#f + 1] = 'also'
  f[#f + 1] = ARGV[11]
end
local sid = redis.call('XADD', KEYS[1], '*', unpack(f))
-- 'list' is the key's list's digest H (KEYS[3] is ...}:k:H, KEYS[2]
-- ...}:s:ID): status.lua, finding the request gone, takes its id out of
-- the list, which has no expiry and may get no later request to do it.
local list = string.sub(KEYS[3], #KEYS[2] - #ARGV[2] + 1)
redis.call('HSET', KEYS[2], 'state', 'queued', 'rule', ARGV[9], 'sid', sid, 'at', ARGV[8],
  'updated', ARGV[8], 'attempts', 0, 'list', list)
redis.call('PEXPIRE', KEYS[2], ARGV[10])
redis.call('RPUSH', KEYS[3], ARGV[2])
-- The index finds the record by the entry's id: a claim round that finds
-- the entry trimmed away while a silent consumer held it (read.lua)
-- cleans the record and the list by it, unasked.
redis.call('HSET', KEYS[4], sid, ARGV[2])
return sid
