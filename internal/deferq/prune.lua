-- Delete the group's consumers that hold nothing and have been idle longer
-- than the bound, but this one: each process is a consumer of its own
-- (host-pid-random), so every restart adds one, and they would pile up.
-- Checked and deleted in one step, so no entry read meanwhile is lost with
-- its consumer (XGROUP DELCONSUMER drops a consumer's pending entries); a
-- live consumer deleted while it holds nothing is made again by its next
-- read.
-- KEYS: 1 stream
-- ARGV: 1 group, 2 this consumer, 3 the idle bound (ms)
-- Returns how many were deleted.
local n = 0
for _, c in ipairs(redis.call('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])) do
  local f = {}
  for i = 1, #c, 2 do f[c[i]] = c[i + 1] end
  if f['name'] ~= ARGV[2] and f['pending'] == 0 and f['idle'] > tonumber(ARGV[3]) then
    redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], f['name'])
    n = n + 1
  end
end
return n
