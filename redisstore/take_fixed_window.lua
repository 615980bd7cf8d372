-- take_fixed_window.lua: Take's step of sluice's fixedWindow (T window
-- number, N its count). ARGV[4] Period; ARGV[5] room: the most count at
-- which the request is admitted, Rate - Cost (-1 if Cost > Rate); ARGV[6]
-- Cost.
local period, room, cost = ARGV[4] + 0, ARGV[5] + 0, ARGV[6] + 0
local w = (now - now % period) / period
if T > w then w = T end
if w ~= T then T, N = w, 0 end
if N <= room then N = N + cost end
idle = (w + 1) * period
