-- Where request ID stands, when a plain read found no record: the record
-- if one has appeared since (an enqueue landed), else nothing, after
-- leaving a mark that a 404 was answered for ID. An enqueue of ID still on
-- its way to Redis (its client was answered 503, outcome unknown, and told
-- that a 404 means not queued) finds the mark and queues nothing: the 404
-- stays true.
-- KEYS: 1 status hash
-- ARGV: 1 how long the mark lasts (ms)
-- Returns the record's fields and values, or an empty list.
local m = redis.call('HGETALL', KEYS[1])
if #m == 0 then
  redis.call('HSET', KEYS[1], 'state', 'not_found')
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
end
return m
