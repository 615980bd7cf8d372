-- forget.lua: put before read.lua and sweep.lua (forgetting), whose
-- KEYS[1] is the rule's stream and KEYS[2] its stream-id index (a hash:
-- entry id -> request id).
-- The rule's keys start as the stream's (...}:q): the same hash tag, so
-- the same slot.
local base = string.sub(KEYS[1], 1, #KEYS[1] - 1)
-- forget cleans what request entry sid left, once sid is gone from the
-- stream and from the group: its index entry, and its record and its
-- place in its key's list while the record says it waits (a settled
-- record stays for its TTL; a 404's mark stays). A record from before
-- the list was named in it has no 'list': its id stays in the list, as
-- status.lua leaves it.
local function forget(sid)
  local id = redis.call('HGET', KEYS[2], sid)
  if not id then
    return -- queued before the index, or cleaned already
  end
  redis.call('HDEL', KEYS[2], sid)
  local recKey = base .. 's:' .. id
  local r = redis.call('HMGET', recKey, 'state', 'sid', 'list')
  if (r[1] == 'queued' or r[1] == 'failed') and r[2] == sid then
    redis.call('DEL', recKey)
    if r[3] then
      local listKey = base .. 'k:' .. r[3]
      redis.call('LREM', listKey, 1, id)
    end
  end
end
