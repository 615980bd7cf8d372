-- Dead-letter an entry that is not a queued request (no id, or not an id of
-- this rule: written by hand, by another program, or damaged): it could
-- never take its turn, and would be held for ever. Copied to the
-- dead-letter stream with the error, acknowledged and deleted, at once.
-- An entry whose id is one of the rule's (its list of other keys cannot
-- be read) settles its request's record in the same step, as finish.lua
-- dead-letters one: state dead_lettered with the error, kept for the
-- status TTL, its id out of its key's list; else the record would read
-- "queued" until someone asked, then 404 as a request lost. A record of
-- another entry (the id reused) is left as it is, and so is a 404's mark;
-- a record gone (expired) is made again, as begin.lua makes it.
-- KEYS: 1 stream, 2 dead-letter stream, 3 the stream-id index (entry id
--       -> request id): the entry leaves it, as it leaves the group;
--       4 the request's record, 5 its key's list (the entry's key's, as
--       the enqueue names it): both only when the id is one of the rule's
-- ARGV: 1 group, 2 entry id (SID), 3 error, 4 max dead letters,
--       5 request id, 6 status TTL (ms), 7 rule name
-- Returns 1, or 0 when the entry was gone already.
local e = redis.call('XRANGE', KEYS[1], ARGV[2], ARGV[2])
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('HDEL', KEYS[3], ARGV[2])
if #e == 0 then
  return 0
end
local f = e[1][2]
if KEYS[4] then
  local r = redis.call('HMGET', KEYS[4], 'state', 'sid')
  if not r[1] or (r[1] == 'queued' or r[1] == 'failed') and r[2] == ARGV[2] then
    local at
    for i = 1, #f, 2 do
      if f[i] == 'at' then
        at = f[i + 1]
      end
    end
    local t = redis.call('TIME')
    local now = string.format('%d', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
    if not r[1] then
      redis.call('HSET', KEYS[4], 'rule', ARGV[7], 'sid', ARGV[2], 'attempts', 0, 'at', at or now)
    end
    redis.call('HSET', KEYS[4], 'state', 'dead_lettered', 'status', 0, 'error', ARGV[3], 'updated', now)
    redis.call('PEXPIRE', KEYS[4], ARGV[6])
    redis.call('LREM', KEYS[5], 1, ARGV[5])
  end
end
f[#f + 1] = 'error'
f[#f + 1] = ARGV[3]
f[#f + 1] = 'status'
f[#f + 1] = '0'
redis.call('XADD', KEYS[2], 'MAXLEN', ARGV[4], '*', unpack(f))
redis.call('XDEL', KEYS[1], ARGV[2])
return 1
