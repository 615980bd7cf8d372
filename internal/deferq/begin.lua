-- May this consumer send entry SID (request ID) now? Checks, atomically,
-- that no outcome is recorded yet, that ID is the oldest queued request of
-- its key, and that the entry is still pending with this consumer; then
-- claims it again, so its idle time restarts.
-- KEYS: 1 stream, 2 status hash, 3 the key's list of ids, 4 the stream-id
--       index (entry id -> request id)
-- ARGV: 1 group, 2 consumer, 3 entry id (SID), 4 request id (ID),
--       5 how long the record of a request still queued lasts (ms),
--       6 claim idle (ms)
-- Returns 'ok', 'wait' (an older request of the key goes first; 'wait:SID'
-- when another consumer holds it and has been silent for the claim idle
-- time, SID its entry, which this one claims), 'later:N'
-- (a failed request whose next attempt is N ms away: its back-off holds
-- for whoever holds it now), 'lost' (another consumer holds it) or 'final'
-- (already settled; cleaned up).
local state = redis.call('HGET', KEYS[2], 'state')
if state == 'not_found' then
  -- status.lua's mark: a 404 was answered for a record that had expired
  -- (the request was queued before, or its entry would not be here).
  state = false
end
if state and state ~= 'queued' and state ~= 'failed' then
  redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
  redis.call('XDEL', KEYS[1], ARGV[3])
  redis.call('LREM', KEYS[3], 1, ARGV[4])
  redis.call('HDEL', KEYS[4], ARGV[3])
  return 'final'
end
-- Nothing is written before this check (an error here, NOGROUP when Redis
-- lost its data, ends the script with nothing written): a record made for
-- a request that is gone would read "queued" for ever.
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1)
if #p == 0 and #redis.call('XRANGE', KEYS[1], ARGV[3], ARGV[3]) == 0 then
  -- Gone: trimmed or deleted from the stream, and no longer pending (a
  -- claim of another consumer dropped it from the group, as XAUTOCLAIM
  -- does with deleted entries). Nothing will send it: its id leaves its
  -- key's list, which has no expiry and may get no later request to drop
  -- it, and its record, which says it waits, goes (a 404's mark stays),
  -- as status.lua drops it: GET /v1/deferred/ID answers 404 for it.
  redis.call('LREM', KEYS[3], 1, ARGV[4])
  if state then
    redis.call('DEL', KEYS[2])
  end
  redis.call('HDEL', KEYS[4], ARGV[3])
  return 'lost'
end
if #p == 0 or p[1][2] ~= ARGV[2] then
  return 'lost'
end
local list = string.sub(KEYS[3], #KEYS[2] - #ARGV[4] + 1) -- H, as enqueue.lua writes it
if not state then
  -- The record expired while the request waited (a settled request is
  -- never left in the stream): it is still queued.
  redis.call('DEL', KEYS[2])
  redis.call('HSET', KEYS[2], 'state', 'queued', 'attempts', 0, 'sid', ARGV[3], 'list', list)
  state = 'queued'
else
  -- A record written before its key's list was named in it gets it.
  redis.call('HSETNX', KEYS[2], 'list', list)
end
-- And the request is indexed by its entry id, if it was queued before the
-- index: a claim round finding its entry trimmed away cleans it (read.lua).
redis.call('HSETNX', KEYS[4], ARGV[3], ARGV[4])
-- Each turn keeps the record of a request still queued: the head of a key
-- is turned at least once a back-off, so its record never expires while it
-- waits, and a missing record below means a request gone.
redis.call('PEXPIRE', KEYS[2], ARGV[5])
-- Order per key: ID goes when it heads its key's list. A head whose
-- request is gone (its record missing or settled, or its entry no longer
-- pending: deleted from the stream by hand, trimmed, evicted) would hold
-- the key for ever: it is dropped. Its record's key is built from ours
-- (the same hash tag, so the same slot).
local base = string.sub(KEYS[2], 1, #KEYS[2] - #ARGV[4])
local turn = false
for _ = 1, 100 do
  local head = redis.call('LINDEX', KEYS[3], 0)
  if not head or head == ARGV[4] then
    turn = true -- ours; or the list is gone, and with it the key's order
    break
  end
  local rec = redis.call('HMGET', base .. head, 'state', 'sid')
  local elsewhere
  local live = rec[1] == 'queued' or rec[1] == 'failed'
  if live and rec[2] then
    -- An entry older than ours was read before ours: if it is still in
    -- the stream, it is pending with some consumer.
    local p = redis.call('XPENDING', KEYS[1], ARGV[1], rec[2], rec[2], 1)
    live = #p == 1
    if live and p[1][2] ~= ARGV[2] and p[1][3] >= tonumber(ARGV[6]) then
      elsewhere = rec[2]
    end
  end
  if live then
    if redis.call('LPOS', KEYS[3], ARGV[4]) then
      if elsewhere then
        return 'wait:' .. elsewhere
      end
      return 'wait'
    end
    turn = true -- ID lost its place in the list: it goes unordered rather than never
    break
  end
  if rec[1] == 'queued' or rec[1] == 'failed' then
    -- Gone while its record says it waits (trimmed from the stream by
    -- hand before it was read): nothing will send it, and its record
    -- would say 'queued' until it expired.
    redis.call('DEL', base .. head)
  end
  if rec[2] then
    redis.call('HDEL', KEYS[4], rec[2])
  end
  redis.call('LPOP', KEYS[3])
end
if not turn then
  return 'wait' -- 100 heads gone: the next turn drops more
end
if state == 'failed' then
  -- next is on Redis's clock (finish.lua), and so is now: no instance's.
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local nx = tonumber(redis.call('HGET', KEYS[2], 'next'))
  if nx and nx > now then
    return 'later:' .. string.format('%d', nx - now)
  end
end
redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[3], 'JUSTID')
return 'ok'
