-- fleet.lua: the scripts of the fleet decorators (package fleet) for the
-- algorithms whose state is the string "T N M" and that a fleet can share
-- by counting: token_bucket (1), fixed_window (3), sliding_window_counter
-- with one segment (5) and gcra (6). Every step mirrors the Go functions in
-- sync.go and lease.go, which mirror the root package's state machines.
--
-- KEYS[1]: the key. ARGV[1] the mode: 'sync', 'grant' or 'return';
-- ARGV[2] the algorithm; ARGV[3] Rate, ARGV[4] Burst, ARGV[5] Period, all
-- in ticks; ARGV[6] the tick (µs); ARGV[7] the expiry margin (ms); ARGV[8]
-- now (µs since the epoch), or '' for Redis' clock; the rest per mode:
--   sync:   ARGV[9] the writer ('' for none), ARGV[10] the op's number;
--           then hits counted elsewhere, added without a check, in order: for a
--           window pairs (at µs, cost in requests); for a bucket quads
--           (at µs, cost, from µs, floor), the debt at at becoming the debt
--           at from plus cost (token-ticks, net of the refill over the
--           span; a plain hit has from = at), at least floor (redisstore.Hit
--           says more); now is the latest hit's time (the hits'
--           clock), which the expiry is measured from. With a writer, the
--           hits are added only if the op's number is greater than the
--           last one added for that writer on this key (KEYS[2], a hash
--           writer -> number, in the key's slot, expiring with it): an op
--           whose reply was lost is sent again as it was and counts once.
--           Returns {state read-after ('' if none), now}.
--   grant:  ARGV[9] want: reserve up to want units at now; ARGV[10],
--           ARGV[11]: units of an expired lease and their window, given
--           back first (as return does); ARGV[12], ARGV[13], if present:
--           a channel and a message, PUBLISHed if that gave any unit
--           back (redisstore's Options.PublishRefunds). Returns
--           {granted, state after, now}.
--   return: ARGV[9] units, ARGV[10] the window (T) they were granted in:
--           give back units not spent; ARGV[11], ARGV[12], if present,
--           as grant's ARGV[12], ARGV[13]. Returns {1 if that gave any
--           unit back else 0, state after, now}.
--   take:   ARGV[9] cost: Take's step, exactly (the request is counted if
--           it fits). Returns {state read ('' if none), state after, now};
--           the caller derives the Decision from the state read.
-- Exact arithmetic as in take_head.lua: integers below 2^53, floor
-- division as (a - a % b) / b.
local key, mode, alg = KEYS[1], ARGV[1], ARGV[2] + 0
local rate, burst, period, tick, margin = ARGV[3] + 0, ARGV[4] + 0, ARGV[5] + 0, ARGV[6] + 0, ARGV[7] + 0
local us = ARGV[8]
if us == '' then
  local t = redis.call('TIME')
  us = t[1] * 1000000 + t[2]
else
  us = us + 0
end
local function fdiv(a, b) return (a - a % b) / b end
local function cdiv(a, b) return (a + (-a) % b) / b end
local v = redis.call('GET', key)
local T, N, M = 0, 0, 0
if v then
  T, N, M = string.match(v, '^(%S+) (%S+) (%S+)$')
  T, N, M = T + 0, N + 0, M + 0
end

-- debt is the token bucket's debt (token-ticks) at now; setDebt stores it
-- back.
local function debt(now)
  if N > 0 and now > T then
    local r = (now - T) * rate
    if r >= N then return 0 end
    return N - r
  end
  return N
end
local function setDebt(now, d)
  N = d
  if now > T then T = now end
end
-- GCRA's debt at now is q * rate + r (0 <= r < rate), kept in its two
-- parts: at a now long before T (a batch late by hours, a clock behind)
-- it can pass 2^53, past which a double is not exact; each part stays
-- small. debt2 returns them; addDebt2 adds d (token-ticks, exact, of
-- either sign) to them, and lessDebt2 compares two debts part by part.
local function debt2(now)
  if T > now or (T == now and N > 0) then return T - now + fdiv(N, rate), N % rate end
  return 0, 0
end
local function addDebt2(q, r, d)
  local s = r + d
  return q + fdiv(s, rate), s % rate
end
local function lessDebt2(aq, ar, bq, br)
  return aq < bq or (aq == bq and ar < br)
end
-- advance moves a window algorithm to window (sub-window) w at least.
local function advance(w)
  if w <= T then return end
  if alg == 5 and w == T + 1 then M = N else M = 0 end
  T, N = w, 0
end

-- capAt is the most a forced charge leaves in the state, as sluice's
-- Charge caps it (a bucket's debt in token-ticks, a window's count);
-- addCapped adds up to it, as Charge does, so that hits added here leave
-- exactly what the charges that made them left (an n already past the cap,
-- merged from several instances, stays).
local capAt
if alg == 1 or alg == 6 then
  capAt = (burst + 1) * period
  if capAt < 1125899906842624 then capAt = 1125899906842624 end
elseif alg == 3 then
  capAt = rate + 1
  if capAt < 1125899906842624 then capAt = 1125899906842624 end
else
  capAt = fdiv(562949953421312, period)
  if capAt < rate + 1 then capAt = rate + 1 end
end
local function addCapped(n, cost, unit, limit)
  if cost > fdiv(limit - n, unit) then
    if n > limit then return n end
    return limit
  end
  return n + cost * unit
end

local now = fdiv(us, tick)
local out = 0
-- giveBack returns units not spent, granted in window w; it reports
-- whether that left the key counting less at now (so admitting sooner).
local function giveBack(units, w)
  if units <= 0 then return false end
  local had
  if alg == 6 then
    local q, r = debt2(now)
    had = q > 0 or r > 0
    local uq, ur = fdiv(units * period, rate), (units * period) % rate
    q, r = addDebt2(q - uq, r, -ur)
    if q < 0 then q, r = 0, 0 end
    N, T = r, now + q
  elseif alg == 1 then
    local d = debt(now)
    had = d > 0
    d = d - units * period
    if d < 0 then d = 0 end
    setDebt(now, d)
  else
    -- A window's units count while it is now's, the counter's in the
    -- next one too (grant's now: never before T).
    local cw = fdiv(now, period)
    if cw < T then cw = T end
    if w == T then
      had = N > 0 and (w == cw or (alg == 5 and w == cw - 1))
      N = N - units
      if N < 0 then N = 0 end
    elseif alg == 5 and w == T - 1 then
      had = M > 0 and T == cw
      M = M - units
      if M < 0 then M = 0 end
    end
  end
  return had or false
end
-- gave is whether a give-back gave units back; pub the argument after
-- the mode's, where its channel and message start.
local gave, pub = false, 0
local seen -- the op's number, to record for its writer
if mode == 'sync' then
  if #ARGV == 10 then return {v or '', us} end
  if ARGV[9] ~= '' then
    local last = redis.call('HGET', KEYS[2], ARGV[9])
    if last and tonumber(last) >= tonumber(ARGV[10]) then return {v or '', us} end
    seen = ARGV[10]
  end
  local step = 2
  if alg == 1 or alg == 6 then step = 4 end
  for i = 11, #ARGV, step do
    local at, cost = fdiv(ARGV[i] + 0, tick), ARGV[i + 1] + 0
    if alg == 6 then
      -- The same steps as for the token bucket, below, on the debt's
      -- two parts (see debt2): the from of a hit can be long before T.
      local q, r = debt2(fdiv(ARGV[i + 2] + 0, tick))
      local vq, vr = addDebt2(q, r, cost)
      local floor = ARGV[i + 3] + 0
      local fq, fr = fdiv(floor, rate), floor % rate
      if lessDebt2(vq, vr, fq, fr) then vq, vr = fq, fr end
      local cq, cr = fdiv(capAt, rate), capAt % rate
      if lessDebt2(cq, cr, vq, vr) then
        if lessDebt2(cq, cr, q, r) then vq, vr = q, r else vq, vr = cq, cr end
      end
      N, T = vr, at + vq
      -- M: the latest debt added (gcra.lua), by any hit: a folded hit's
      -- cost (fleet's fold) may be net of the refill.
      if at > M then M = at end
    elseif alg == 1 then
      local d = debt(fdiv(ARGV[i + 2] + 0, tick))
      local v, floor = d + cost, ARGV[i + 3] + 0
      if v < floor then v = floor end
      if v > capAt then
        if d > capAt then v = d else v = capAt end
      end
      setDebt(at, v)
    else
      local w = fdiv(at, period)
      advance(w)
      if w == T then N = addCapped(N, cost, 1, capAt) elseif alg == 5 and w == T - 1 then M = addCapped(M, cost, 1, capAt) end
    end
  end
elseif mode == 'grant' then
  local want = ARGV[9] + 0
  gave, pub = giveBack(ARGV[10] + 0, ARGV[11] + 0), 12
  local avail
  if alg == 6 then
    -- What the burst leaves free of the debt, when the debt is under it
    -- (then both are exact); none past it.
    local q, r = debt2(now)
    local bq, br = fdiv(burst * period, rate), (burst * period) % rate
    avail = 0
    if q <= bq then avail = fdiv((bq - q) * rate + br - r, period) end
    if avail < 0 then avail = 0 end
    if avail > want then avail = want end
    q, r = addDebt2(q, r, avail * period)
    N, T = r, now + q
    if avail > 0 and now > M then M = now end
  elseif alg == 1 then
    local d = debt(now)
    avail = fdiv(burst * period - d, period)
    if avail < 0 then avail = 0 end
    if avail > want then avail = want end
    setDebt(now, d + avail * period)
  else
    local w = fdiv(now, period)
    if w < T then
      w = T
      now = T * period
    end
    advance(w)
    local est = N
    if alg == 5 then est = fdiv(M * ((w + 1) * period - now), period) + N end
    avail = rate - est
    if avail < 0 then avail = 0 end
    if avail > want then avail = want end
    N = N + avail
  end
  out = avail
elseif mode == 'take' then
  local cost = ARGV[9] + 0
  if alg == 6 then
    local q, r = debt2(now)
    local bq, br = fdiv(burst * period, rate), (burst * period) % rate
    if cost <= burst and q <= bq and (bq - q) * rate + br - r >= cost * period then
      q, r = addDebt2(q, r, cost * period)
      if cost > 0 and now > M then M = now end
    end
    N, T = r, now + q
  elseif alg == 1 then
    local d = debt(now)
    if cost <= burst and d + cost * period <= burst * period then d = d + cost * period end
    setDebt(now, d)
  else
    local w = fdiv(now, period)
    if w < T then
      w = T
      now = T * period
    end
    advance(w)
    local est = N
    if alg == 5 then est = fdiv(M * ((w + 1) * period - now), period) + N end
    if cost <= rate and est + cost <= rate then N = N + cost end
  end
else -- return
  gave, pub = giveBack(ARGV[9] + 0, ARGV[10] + 0), 11
  if gave then out = 1 end
end
-- Save, to expire the margin after the state is at rest.
local idle
if alg == 1 then
  idle = T + cdiv(N, rate)
elseif alg == 6 then
  idle = T
  if N > 0 then idle = T + 1 end
elseif alg == 3 then
  idle = (T + 1) * period
else
  idle = (T + 2) * period
end
local s = string.format('%d %d %d', T, N, M)
local x = idle * tick - us
local ms = margin
if x > 0 then ms = ms + cdiv(x, 1000) end
if ms < 1 then ms = 1 end
if T == 0 and N == 0 and M == 0 then
  redis.call('DEL', key)
  s = ''
else
  redis.call('SET', key, s, 'PX', ms)
end
if seen then
  -- Past the key's expiry its state is at rest: hits sent again then
  -- would leave it at rest too.
  redis.call('HSET', KEYS[2], ARGV[9], seen)
  redis.call('PEXPIRE', KEYS[2], ms)
end
if gave and ARGV[pub + 1] then
  -- The key admits again: the fleet's over-limit caches forget it.
  redis.call('PUBLISH', ARGV[pub], ARGV[pub + 1])
end
if mode == 'sync' then return {s, us} end
if mode == 'take' then return {v or '', s, us} end
return {out, s, us}
