-- Look at a slice of the stream-id index (HSCAN from ARGV[2]) for
-- requests gone that no claim will meet: an entry neither in the stream
-- nor pending in the group will never be sent, and nothing else finds
-- it: trimmed or deleted from the stream before any instance read it,
-- the last of its key (no later request's turn drops it); dropped from
-- the group by a claim of an instance of an earlier version, or settled
-- by one, which leave the index as it was. Each is forgotten
-- (forget.lua): its index entry goes, and its record and its place in
-- its key's list if the record says it waits. Run once per claim round,
-- so that the index, which has no expiry, holds only the requests that
-- may still be sent.
-- KEYS: 1 stream, 2 the stream-id index
-- ARGV: 1 group, 2 HSCAN cursor, 3 HSCAN count
-- Returns the next cursor ('0': the whole index looked at).
local r = redis.call('HSCAN', KEYS[2], ARGV[2], 'COUNT', ARGV[3])
local f = r[2]
for i = 1, #f, 2 do
  local sid = f[i]
  -- pcall: a field that is no entry id (written by hand) is left, and so
  -- is every entry while the group does not exist yet.
  local e = redis.pcall('XRANGE', KEYS[1], sid, sid)
  if type(e) == 'table' and not e.err and #e == 0 then
    local p = redis.pcall('XPENDING', KEYS[1], ARGV[1], sid, sid, 1)
    if type(p) == 'table' and not p.err and #p == 0 then
      forget(sid)
    end
  end
end
return r[1]
