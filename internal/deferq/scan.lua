-- Index the requests an earlier version queued, which have no entry in
-- the stream-id index (and whose record may not name its key's list): a
-- claim round that meets one trimmed away, or a sweep that finds it gone,
-- cleans it then as it cleans one this version queued, rather than leave
-- its record reading "queued" until someone asks, or for 7 days. Run at
-- each claim round of every instance until the stream, as it was when
-- the scan began, has been looked at once: each run goes on from where
-- the last stopped, whichever instance ran it (KEYS[3] holds the
-- stream's last entry id when the scan began, a space and the last entry
-- id looked at, then 'done' for good), so several instances share one
-- scan, and a restart resumes it. The scan ends at that last entry: on a
-- stream fed faster than it looks (several hundred requests a second
-- and more per instance) it chased the stream's end for as long as the
-- stream grew. A request queued after it began is indexed at its turn
-- (begin.lua), or, trimmed before, its record is met by the pass over
-- the records (records.lua). A run looks at ARGV[2] entries at most, and stops once
-- those it looked at hold ARGV[3] bytes: it reads them one at a time, so
-- that what it reads is bounded whatever the bodies queued.
-- An entry whose id is one of the rule's is indexed (HSETNX: an entry
-- there is left as is, as begin.lua leaves it), unless its record says it
-- waits and names no key's list: that one is returned, for listed.lua to
-- index with its list named, in one step (indexed here, a sweep finding
-- it trimmed before listed.lua ran would forget it with no list to take
-- its id out of). An entry of no request of the rule is left to the
-- reader, which dead-letters it.
-- A run that returns requests leaves the state as it was: listed.lua
-- moves it on, once their lists are named, so that a step whose second
-- half never ran (its reply lost, listed.lua failing) is made again.
-- The state lasts ARGV[4] ms from its last step (the life of a queued
-- request's record: past it, no record of an earlier version is left to
-- index), so a rule dropped from the config leaves no key behind; if it
-- lapses while the rule lives, the instances scan once more, which
-- changes nothing (HSETNX) and costs as the first scan did.
-- KEYS: 1 stream, 2 the stream-id index, 3 the scan's state
-- ARGV: 1 the rule's tag, 2 most entries, 3 most bytes, 4 the state's TTL in ms
-- Returns {looked, done (1 or 0), from, to, id, entry id, key, ...}: how
-- many entries this run looked at, whether it reached the scan's end,
-- and the requests whose record says they wait and names no key's list,
-- with their limiter key, whose digest names it (the caller adds it: no
-- SHA-256 here); with them, the state this run started from ('' none)
-- and the one to move it to ('done' at the end), for listed.lua.
local state = redis.call('GET', KEYS[3])
if state == 'done' then
  return {0, 1, '', ''}
end
local last, at = nil, state
if state then
  local l, a = string.match(state, '^(%S+) (%S+)$')
  if l then
    last, at = l, a
  end -- else the state of a scan begun unbounded: it goes on, bounded now
end
if not last then
  local e = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
  if #e > 0 then
    last = e[1][1]
  end
end
local start = '-'
if at then
  start = '(' .. at
end
-- The rule's keys start as the stream's (...}:q): the same hash tag, so
-- the same slot.
local base = string.sub(KEYS[1], 1, #KEYS[1] - 1)
local pattern = '^' .. ARGV[1] .. '%-' .. string.rep('[0-9a-f]', 20) .. '$'
local most, mostBytes = tonumber(ARGV[2]), tonumber(ARGV[3])
local from = state or ''
local out = {0, 0, '', ''}
local looked, bytes = 0, 0
if not last then
  out[2] = 1 -- an empty stream
end
while out[2] == 0 and looked < most and bytes < mostBytes do
  local es = redis.call('XRANGE', KEYS[1], start, last, 'COUNT', 1)
  if #es == 0 then
    out[2] = 1
    break
  end
  local sid, f = es[1][1], es[1][2]
  looked = looked + 1
  local id, key
  for i = 1, #f, 2 do
    bytes = bytes + #f[i] + #f[i + 1]
    if f[i] == 'id' then
      id = f[i + 1]
    elseif f[i] == 'key' then
      key = f[i + 1]
    end
  end
  if id and string.find(id, pattern) then
    local recKey = base .. 's:' .. id
    local r = redis.call('HMGET', recKey, 'state', 'sid', 'list')
    if (r[1] == 'queued' or r[1] == 'failed') and r[2] == sid and not r[3] and key then
      out[#out + 1] = id
      out[#out + 1] = sid
      out[#out + 1] = key
    else
      redis.call('HSETNX', KEYS[2], sid, id)
    end
  end
  start = '(' .. sid
  at = sid
  if sid == last then
    out[2] = 1
  end
end
local to
if out[2] == 1 then
  to = 'done'
elseif at then
  to = last .. ' ' .. at
end
if #out > 4 then
  out[3], out[4] = from, to or ''
elseif to then
  redis.call('SET', KEYS[3], to, 'PX', ARGV[4])
end
out[1] = looked
return out
