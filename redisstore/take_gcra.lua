-- take_gcra.lua: Take's step of sluice's gcra (T the theoretical arrival
-- time in ticks, N its fraction in 1/Rate tick). ARGV[4] Rate; ARGV[5]
-- room: the most debt at which the request is admitted, Burst*Period -
-- Cost*Period (-1 if Cost > Burst); ARGV[6] Cost*Period.
local rate, room, cp = ARGV[4] + 0, ARGV[5] + 0, ARGV[6] + 0
local d = 0
if T > now or (T == now and N > 0) then d = (T - now) * rate + N end
if d <= room then
  d = d + cp
  N = d % rate
  T = now + (d - N) / rate
  -- M: the latest tick at which a request added debt (see gcra.lua).
  if cp > 0 and now > M then M = now end
elseif d == 0 then
  T, N = now, 0
end
-- Refused with a debt, the state stays as it was: (T - now) * Rate + N
-- may pass 2^53 (a clock far behind), where d is no longer exact.
idle = T
if N > 0 then idle = T + 1 end
