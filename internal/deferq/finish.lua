-- Record the outcome of one send, atomically with XACK/XDEL when it is
-- final, so that no instance ever sends a settled request again.
-- KEYS: 1 stream, 2 status hash, 3 the key's list of ids, 4 dead-letter stream,
--       5 the stream-id index (entry id -> request id)
-- ARGV: 1 group, 2 entry id (SID), 3 request id (ID), 4 outcome
--       ('delivered', 'failed', or 'dead': dead-letter it unsent, counting
--       no attempt, as a body over the bound in force is), 5 upstream status (0: none), 6 error,
--       7 max attempts, 8 TTL of a settled record (ms),
--       9 back-off after a first failed attempt (ms), 10 max dead letters,
--       11 the send's token (unique per send), 12 max back-off (ms),
--       13 the upstream's wait (ms, 0: none)
-- Returns the state recorded: 'delivered', 'failed:N' (retry in N ms),
-- 'dead_lettered', 'lost' (the entry is no longer pending: nothing
-- recorded), or the state already there if it was settled or this
-- send's outcome was recorded already (a reply lost on its way back, the
-- worker records it again: the attempt counts once, and the answer is the
-- first one's).
--
-- The back-off follows the attempts counted here, whichever instances made
-- them (one that takes a request over goes on where the sequence was): it
-- doubles from ARGV[9] with each failed attempt, up to ARGV[12], and is
-- at least the upstream's wait (itself at most ARGV[12]). Times are
-- Redis's (TIME), so that the next attempt falls when it should whichever
-- instance's clock reads it (begin.lua reads Redis's too).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local state = redis.call('HGET', KEYS[2], 'state')
if state == 'delivered' or state == 'dead_lettered' then
  return state
end
if ARGV[11] ~= '' and redis.call('HGET', KEYS[2], 'send') == ARGV[11] then
  if state == 'failed' then
    return 'failed:' .. (redis.call('HGET', KEYS[2], 'wait') or '0')
  end
  return state
end
-- A request no longer pending in the group is gone (Redis lost its data,
-- or the group was deleted): nothing will try it again, and nothing is
-- written for it, so that no record says it will be, for ever (a record
-- made anew here would have no expiry). pcall: the group may be gone too.
local p = redis.pcall('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)
if type(p) ~= 'table' or p.err or #p == 0 then
  if type(p) == 'table' and not p.err and #redis.call('XRANGE', KEYS[1], ARGV[2], ARGV[2]) == 0 then
    -- Gone from the stream as well (trimmed, and dropped from the group
    -- by another consumer's claim): its id leaves its key's list, which
    -- would otherwise keep it for ever if no later request of the key
    -- came to drop it, and its record goes if it says it waits, as
    -- status.lua would drop it (GET /v1/deferred/ID answers 404).
    redis.call('LREM', KEYS[3], 1, ARGV[3])
    if state == 'queued' or state == 'failed' then
      redis.call('DEL', KEYS[2])
    end
    redis.call('HDEL', KEYS[5], ARGV[2])
  end
  return 'lost'
end
local outcome = ARGV[4]
local attempts
if outcome == 'dead' then
  attempts = tonumber(redis.call('HGET', KEYS[2], 'attempts') or '0')
else
  attempts = redis.call('HINCRBY', KEYS[2], 'attempts', 1)
end
if outcome == 'dead' or outcome == 'failed' and attempts >= tonumber(ARGV[7]) then
  outcome = 'dead_lettered'
  local e = redis.call('XRANGE', KEYS[1], ARGV[2], ARGV[2])
  if #e == 1 then
    local f = e[1][2]
    f[#f + 1] = 'error'
    f[#f + 1] = ARGV[6]
    f[#f + 1] = 'status'
    f[#f + 1] = ARGV[5]
    redis.call('XADD', KEYS[4], 'MAXLEN', ARGV[10], '*', unpack(f))
  end
end
redis.call('HSET', KEYS[2], 'state', outcome, 'status', ARGV[5], 'error', ARGV[6],
  'updated', string.format('%d', now), 'send', ARGV[11])
if outcome == 'failed' then
  local most = tonumber(ARGV[12])
  local wait = math.min(tonumber(ARGV[9]) * 2 ^ math.min(attempts - 1, 40), most)
  wait = string.format('%d', math.max(wait, math.min(tonumber(ARGV[13]), most)))
  redis.call('HSET', KEYS[2], 'next', string.format('%d', now + tonumber(wait)), 'wait', wait)
  return 'failed:' .. wait
end
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[2])
redis.call('LREM', KEYS[3], 1, ARGV[3])
redis.call('HDEL', KEYS[5], ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[8])
return outcome
