-- Where request ID stands, when a plain read found no record, or one that
-- says it waits (queued, failed): the record, unless the request is gone;
-- else nothing, after leaving a mark that a 404 was answered for ID.
--
-- Gone: its entry is neither in the stream nor pending with a consumer
-- (deleted or trimmed by hand before an instance read it, evicted):
-- nothing will send it, and its record would say it waits until it
-- expired (7 days), the last of its key having no later request to find
-- it gone (begin.lua). One deleted while pending stays: its holder sends
-- it. Its record goes, as begin.lua drops it, and its id leaves its key's
-- list (named by the record's 'list': a record from before it has none,
-- and its id stays there until a later request of the key drops it).
--
-- An enqueue of ID still on its way to Redis (its client was answered
-- 503, outcome unknown, and told that a 404 means not queued) finds the
-- mark and queues nothing: the 404 stays true.
-- KEYS: 1 status hash, 2 stream, 3 the stream-id index (entry id ->
--       request id)
-- ARGV: 1 how long the mark lasts (ms), 2 group
-- Returns the record's fields and values, or an empty list.
local m = redis.call('HGETALL', KEYS[1])
if #m > 0 then
  local f = {}
  for i = 1, #m, 2 do f[m[i]] = m[i + 1] end
  if f['state'] ~= 'queued' and f['state'] ~= 'failed' or not f['sid'] then
    return m
  end
  if #redis.call('XRANGE', KEYS[2], f['sid'], f['sid']) == 1 then
    return m
  end
  -- pcall: no group (no instance ran yet) or no stream is no consumer.
  local p = redis.pcall('XPENDING', KEYS[2], ARGV[2], f['sid'], f['sid'], 1)
  if type(p) == 'table' and not p.err and #p == 1 then
    return m
  end
  if f['list'] then
    -- Its id leaves its key's list (KEYS[1] is ...}:s:ID, the list
    -- ...}:k:H, H the record's 'list'; the same hash tag, so the same
    -- slot): the list has no expiry, and the last request of a key has
    -- no later one whose turn would drop it (begin.lua).
    local base = string.match(KEYS[1], '^(.*}:)s:')
    if base then
      local listKey, id = base .. 'k:' .. f['list'], string.sub(KEYS[1], #base + 3)
      redis.call('LREM', listKey, 1, id)
    end
  end
  redis.call('HDEL', KEYS[3], f['sid'])
  redis.call('DEL', KEYS[1])
end
redis.call('HSET', KEYS[1], 'state', 'not_found')
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return {}
