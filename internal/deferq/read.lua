-- Read entries of the stream for this consumer, bounded by their bodies:
-- new ones (XREADGROUP, mode 'new'), those idle with a silent consumer
-- (XAUTOCLAIM, mode 'claim') or one of them, entry ARGV[7] (XCLAIM, mode
-- 'one': the oldest request of a key whose later one this consumer
-- holds). An entry whose body is over the rule's bound in force
-- (max_body_bytes, lowered by a reload since it was queued) comes back
-- without its body, header and uri, marked 'over' with the
-- body's length, so that the instance never reads more than it may hold;
-- it dead-letters that entry (finish.lua), which is its now.
-- A read that returns entries records their ids under its token (KEYS[2],
-- for the claim idle time): asked again under the same token (its reply
-- was lost: the connection was cut after it ran), it reads nothing new
-- and returns those entries again, those still pending with this
-- consumer, claimed again for it, rather than leave them pending with it
-- and held by nobody until the claim idle time.
-- The reader's next read deletes that record (KEYS[4]): its reply came.
-- An entry a claim finds deleted from the stream (trimmed, or deleted by
-- hand) while pending, which XAUTOCLAIM and XCLAIM drop from the group
-- (Redis 7), is a request nothing will send: its record and its place in
-- its key's list go too (forget, forget.lua), found by the stream-id index, so that
-- they do not wait for a GET /v1/deferred/ID to find them gone (the last
-- request of its key has no later one whose turn would).
-- KEYS: 1 stream, 2 the stream-id index (entry id -> request id), 3 the
--       read's record (the token's), 4 the record of the read before, to
--       delete (optional)
-- ARGV: 1 group, 2 consumer, 3 mode ('new', 'claim' or 'one'), 4 count,
--       5 max body bytes, 6 claim idle (ms): claim, one: the min idle;
--       the record's life, 7 claim: start; one: the entry, 8 one: a held
--       entry to let go if it was claimed (optional)
-- Returns {cursor, entries}: cursor is XAUTOCLAIM's next start ('' for
-- 'new' and 'one'), entries as XRANGE gives them.
if KEYS[4] then
  redis.call('DEL', KEYS[4])
end
local es, cursor
local rec = redis.call('LRANGE', KEYS[3], 0, -1)
if #rec > 0 then
  cursor, es = rec[1], {}
  for i = 2, #rec do
    local p = redis.call('XPENDING', KEYS[1], ARGV[1], rec[i], rec[i], 1)
    if #p == 1 and p[1][2] == ARGV[2] then
      local n = #es
      for _, e in ipairs(redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, rec[i])) do
        if type(e) == 'table' then
          es[#es + 1] = e
        end
      end
      if #es == n and #redis.call('XPENDING', KEYS[1], ARGV[1], rec[i], rec[i], 1) == 0 then
        forget(rec[i]) -- deleted meanwhile, and dropped from the group by the XCLAIM
      end
    end
  end
elseif ARGV[3] == 'claim' then
  local r = redis.call('XAUTOCLAIM', KEYS[1], ARGV[1], ARGV[2], ARGV[6], ARGV[7], 'COUNT', ARGV[4])
  cursor, es = r[1], r[2]
  -- Redis 7: the entries it met deleted from the stream, which it
  -- dropped from the group, whoever held them.
  for _, sid in ipairs(r[3] or {}) do
    forget(sid)
  end
elseif ARGV[3] == 'one' then
  cursor, es = '', {}
  local deleted = #redis.call('XRANGE', KEYS[1], ARGV[7], ARGV[7]) == 0
  for _, e in ipairs(redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], ARGV[6], ARGV[7])) do
    if type(e) == 'table' then -- not one deleted while pending (Redis 6.2)
      es[#es + 1] = e
    end
  end
  if deleted and #redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[7], ARGV[7], 1) == 0 then
    forget(ARGV[7]) -- dropped from the group by the XCLAIM (Redis 7)
  end
  if #es > 0 and ARGV[8] then
    -- Room for it made in the same step: the held entry ARGV[8] is let
    -- go (release.lua) for a later claim, here or elsewhere.
    local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[8], ARGV[8], 1)
    if #p == 1 and p[1][2] == ARGV[2] then
      redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[8], 'IDLE', ARGV[6], 'JUSTID')
    end
  end
else
  local r = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', ARGV[4], 'STREAMS', KEYS[1], '>')
  cursor, es = '', {}
  if r then
    es = r[1][2]
  end
end
if #rec == 0 and #es > 0 then
  local ids = {cursor}
  for _, e in ipairs(es) do
    ids[#ids + 1] = e[1]
  end
  redis.call('RPUSH', KEYS[3], unpack(ids))
  redis.call('PEXPIRE', KEYS[3], ARGV[6])
end
local bound = tonumber(ARGV[5])
local out = {}
for _, e in ipairs(es) do
  local f = e[2]
  if type(f) ~= 'table' then
    f = {} -- deleted from the stream while pending (Redis 6.2's XAUTOCLAIM): malformed
    forget(e[1])
  end
  local body
  for i = 1, #f, 2 do
    if f[i] == 'body' then
      body = f[i + 1]
      break
    end
  end
  if body and #body > bound then
    local g = {'over', tostring(#body)}
    for i = 1, #f, 2 do
      if f[i] == 'id' or f[i] == 'key' or f[i] == 'also' then
        g[#g + 1] = f[i]
        g[#g + 1] = f[i + 1]
      end
    end
    f = g
  end
  out[#out + 1] = {e[1], f}
end
return {cursor, out}
