-- take_token_bucket.lua: Take's step of sluice's tokenBucket (T last refill,
-- N debt in token-ticks). ARGV[4] Rate; ARGV[5] room: the most debt at
-- which the request is admitted, Burst*Period - Cost*Period (-1 if Cost >
-- Burst); ARGV[6] Cost*Period.
local rate, room, cp = ARGV[4] + 0, ARGV[5] + 0, ARGV[6] + 0
if N > 0 and now > T then
  -- The refill; beyond 2^53 it is rounded, but still above any debt.
  local r = (now - T) * rate
  if r >= N then N = 0 else N = N - r end
end
if N <= room then N = N + cp end
if now > T then T = now end
idle = T + (N + (-N) % rate) / rate -- from the last refill, not from a request before it
