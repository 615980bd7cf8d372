-- Name its key's list in the record of each request an earlier version
-- queued (scan.lua found them): status.lua, begin.lua and a claim round
-- finding it gone then take its id out of that list, which has no expiry,
-- as for a request this version queued. Only a record that still says
-- its request waits, for that entry, and names no list yet: one settled,
-- made again or named since is left as it is.
-- KEYS: the requests' records (the same hash tag: the same slot)
-- ARGV: for each, its entry id and its key's list's digest
for i, recKey in ipairs(KEYS) do
  local r = redis.call('HMGET', recKey, 'state', 'sid')
  if (r[1] == 'queued' or r[1] == 'failed') and r[2] == ARGV[2 * i - 1] then
    redis.call('HSETNX', recKey, 'list', ARGV[2 * i])
  end
end
return 0
