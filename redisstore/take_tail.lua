-- take_tail.lua: the end of Take's flat scripts (see take_head.lua). It
-- saves T, N, M (deletes the key in the zero State: a key never seen decides
-- the same), to expire the margin after idle, measured on the decision's
-- clock; it returns the state read (nil: none), and with Redis' clock the
-- time used.
if T == 0 and N == 0 and M == 0 then
  redis.call('DEL', key)
else
  local x = idle * tick - us
  local ms = ARGV[3] + 0
  if x > 0 then ms = ms + (x + (-x) % 1000) / 1000 end
  if ms < 1 then ms = 1 end
  redis.call('SET', key, string.format('%d %d %d', T, N, M), 'PX', ms)
end
if clock then return {v or '', us} end
return v
