-- take_sliding_window_counter.lua: Take's step of sluice's slidingCounter
-- with Segments 1 (T newest window, N its count, M the previous one's).
-- ARGV[4] Period; ARGV[5] room: the most estimate at which the request is
-- admitted, Rate - Cost (-1 if Cost > Rate); ARGV[6] Cost.
local l, room, cost = ARGV[4] + 0, ARGV[5] + 0, ARGV[6] + 0
local k = (now - now % l) / l
if k < T then
  k = T
  now = k * l
end
if k == T + 1 then
  M, N = N, 0
elseif k > T + 1 then
  M, N = 0, 0
end
T = k
local est = M * ((k + 1) * l - now)
est = (est - est % l) / l + N
if est <= room then N = N + cost end
idle = (k + 2) * l
