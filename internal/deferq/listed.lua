-- The second half of a scan step (scan.lua): index each request an
-- earlier version queued that scan.lua found, and name its key's list in
-- its record, together, so that a claim round or a sweep finding it gone
-- takes its id out of that list, which has no expiry, as for a request
-- this version queued (status.lua and begin.lua use the list too). Only
-- a record that still says its request waits, for that entry: one
-- settled, made again or forgotten since is left as it is (a record
-- named since keeps its list: HSETNX). Then the scan's state moves on,
-- from where scan.lua found it to where it stopped, unless another step
-- moved it meanwhile (its own step covered the same slice, or a later
-- one).
-- KEYS: 1 the stream-id index, 2 the scan's state, 3... the requests'
--       records (the same hash tag: the same slot)
-- ARGV: 1 the state scan.lua started from ('' none), 2 the state to
--       move to ('done' at the end, '' none), 3 its TTL (ms), then for
--       each record: its request's id, its entry id, its key's list's
--       digest
-- Returns 1 when the state reads 'done' (the scan is over), else 0.
for i = 3, #KEYS do
  local recKey, a = KEYS[i], 3 * (i - 3) + 4
  local r = redis.call('HMGET', recKey, 'state', 'sid')
  if (r[1] == 'queued' or r[1] == 'failed') and r[2] == ARGV[a + 1] then
    redis.call('HSETNX', recKey, 'list', ARGV[a + 2])
    redis.call('HSETNX', KEYS[1], ARGV[a + 1], ARGV[a])
  end
end
local at = redis.call('GET', KEYS[2])
if (at or '') == ARGV[1] and ARGV[2] ~= '' then
  redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
  at = ARGV[2]
end
if at == 'done' then
  return 1
end
return 0
