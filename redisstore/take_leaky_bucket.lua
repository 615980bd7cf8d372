-- take_leaky_bucket.lua: Take's step of sluice's leakyBucket (T leave time
-- of the last unit queued in ticks, N its fraction in 1/Rate tick, M
-- non-zero once set, see leaky_bucket.lua). ARGV[4] Rate; ARGV[5] Period; ARGV[6] the longest wait,
-- Burst*Period; ARGV[7] full, (Burst+1)*Period; ARGV[8] how many ticks
-- back a leave time is stale, ceil(full/Rate)+1; ARGV[9] Cost*Period, or -1
-- when the request queues nothing (Cost 0, or Cost > Burst+1).
local rate, period, maxWait = ARGV[4] + 0, ARGV[5] + 0, ARGV[6] + 0
local full, staleAfter, cp = ARGV[7] + 0, ARGV[8] + 0, ARGV[9] + 0
local stale = M == 0 or now - T > staleAfter
local rel = 0
if not stale then rel = (T - now) * rate + N end
if cp >= 0 then
  -- The request's last unit leaves (cost - 1) spacings after its first, at
  -- max(now, the last leave + a spacing).
  local leave = cp - period
  if not stale and rel + cp > leave then leave = rel + cp end
  if leave <= maxWait then
    rel, stale = leave, false
    N = leave % rate
    T = now + (leave - N) / rate
    -- M: the latest tick at which a request queued (see leaky_bucket.lua).
    if now > M then M = now end
    if M == 0 then M = 1 end
  end
end
idle = now
if not stale and rel + period > 0 then
  local x = rel + full
  if x > 0 then idle = now + (x + (-x) % rate) / rate end
end
