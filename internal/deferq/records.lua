-- Pass over the rule's records (the keys ...}:s:ID, by SCAN), a slice a
-- run, for those of requests gone that nothing else finds: a record that
-- says its request waits (queued, failed) while its entry is neither in
-- the stream nor pending in the group. Nothing will send that request,
-- and no other step meets its record when it is not in the stream-id
-- index: a request an earlier version queued (it had no index) and that
-- was trimmed or deleted from the stream before the scan of the stream
-- (scan.lua) reached it, or queued by an instance of that version after
-- the scan was over and trimmed before any instance of this one tried
-- it. Its record goes, its place in its key's list if the record names
-- it, and its index entry if it has one, as forget.lua drops them; else
-- it read "queued" until someone asked about it (status.lua), or for 7
-- days. A record being made is never met half done: enqueue.lua writes
-- the entry and the record in one step.
-- Each run goes on from where the last stopped, whichever instance ran it
-- (KEYS[3] holds SCAN's cursor), and a pass over, the next begins: a
-- record is met within two passes of the key space (SCAN returns every
-- key there from the start of a pass to its end), a pass taking the
-- node's keys / ARGV[3] runs. The cursor lasts ARGV[4] ms from its last
-- run, so a rule dropped from the config leaves no key behind.
-- The fleet takes one step at most every ARGV[5] ms, whichever instance
-- asks: the cursor's TTL, set to ARGV[4] at each step, tells how long
-- ago the last one was. So the pass's load on Redis does not grow with
-- the number of instances.
-- The records of the rule are named by ARGV[2], a MATCH pattern with the
-- rule's hash tag: one slot, the stream's.
-- KEYS: 1 stream, 2 the stream-id index, 3 the pass's cursor
-- ARGV: 1 group, 2 the records' MATCH pattern, 3 SCAN's COUNT, 4 the
--       cursor's TTL in ms, 5 the least time between two steps in ms
-- Returns {the next cursor ('0': a pass is over), records cleaned}.
local base = string.sub(KEYS[1], 1, #KEYS[1] - 1)
local cursor = redis.call('GET', KEYS[3]) or '0'
local gap = tonumber(ARGV[5])
-- Only a cursor with an expiry tells when the last step was: PTTL -2
-- (none) or -1 (none set, by hand or by a build that set none) steps,
-- whatever the gap (one past the cursor's life read them as a step just
-- made, and the pass never stepped again).
local pttl = redis.call('PTTL', KEYS[3])
if gap > 0 and pttl > 0 and pttl > tonumber(ARGV[4]) - gap then
  return {cursor, 0} -- a step ran less than gap ago
end
-- pcall: a cursor that is none (written by hand) starts a pass again.
local r = redis.pcall('SCAN', cursor, 'MATCH', ARGV[2], 'COUNT', ARGV[3], 'TYPE', 'hash')
if type(r) ~= 'table' or r.err then
  r = redis.call('SCAN', '0', 'MATCH', ARGV[2], 'COUNT', ARGV[3], 'TYPE', 'hash')
end
local cleaned = 0
for _, recKey in ipairs(r[2]) do
  local f = redis.call('HMGET', recKey, 'state', 'sid', 'list')
  -- A sid that is no entry id (written by hand) is left: XRANGE and
  -- XPENDING would read '-', '+' or '(ID' (ID's own entry excluded) as a
  -- range with no entry in it, and the record of a request still held
  -- would go. pcall: and so is every record while the group does not
  -- exist yet.
  if (f[1] == 'queued' or f[1] == 'failed') and f[2] and string.find(f[2], '^%d+%-%d+$') then
    local e = redis.pcall('XRANGE', KEYS[1], f[2], f[2])
    if type(e) == 'table' and not e.err and #e == 0 then
      local p = redis.pcall('XPENDING', KEYS[1], ARGV[1], f[2], f[2], 1)
      if type(p) == 'table' and not p.err and #p == 0 then
        local id = string.sub(recKey, #base + 3)
        redis.call('DEL', recKey)
        if f[3] then
          local listKey = base .. 'k:' .. f[3]
          redis.call('LREM', listKey, 1, id)
        end
        if redis.call('HGET', KEYS[2], f[2]) == id then
          redis.call('HDEL', KEYS[2], f[2])
        end
        cleaned = cleaned + 1
      end
    end
  end
end
redis.call('SET', KEYS[3], r[1], 'PX', ARGV[4])
return {r[1], cleaned}
