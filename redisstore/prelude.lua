-- prelude.lua: helpers shared by every Sluice script. The scripts are the
-- Lua twins of the Go state machines in the root package (bucket.go,
-- window.go). Lua numbers are IEEE doubles: every value here is an integer
-- below 2^53, sums and products stay below it (Limit.Ticks guarantees the
-- bounds), and division is only ever done in the exact forms below, never as
-- a plain a / b that could round: for such a and b > 0 (every divisor here
-- is positive), Lua's a % b (a - floor(a/b)*b) is exact, because if a/b is
-- not an integer it is at least 1/b from one while its rounding error is
-- below |a|/b * 2^-53 < 1/b; so (a - a % b) / b divides exactly. The %
-- operator runs inside the VM, where math.fmod was a C call.
-- Strings become numbers by arithmetic (s + 0): one conversion inside the
-- VM, where tonumber is a C call that converts twice.
--
-- The scripts allocate as little as they can (no tables per decision beyond
-- the key's state and the reply): Redis runs them on its single thread, and
-- the Lua garbage collector is part of every call's cost. They need Redis 5
-- or later (scripts replicate their effects, so TIME may precede writes).

local max, min = math.max, math.min

-- tdiv is Go's a / b (truncated towards zero), b > 0.
local function tdiv(a, b)
  if a < 0 then
    a = -a
    return -((a - a % b) / b)
  end
  return (a - a % b) / b
end

-- fdiv is floor division, as sluice's floorDiv, b > 0.
local function fdiv(a, b)
  return (a - a % b) / b
end

-- cdiv is ceiling division, as sluice's ceilDiv, b > 0.
local function cdiv(a, b)
  return (a + (-a) % b) / b
end

-- debtCap is sluice's debtCap: the most debt a forced charge leaves in a
-- bucket (token-ticks, or the leaky bucket's parts); 2^50 as a literal.
local function debtCap(burst, period)
  return max(1125899906842624, (burst + 1) * period)
end

-- addCapped is sluice's addCapped: n + cost * unit, at most limit (n is
-- never above limit, so the floor division is Go's truncated one).
local function addCapped(n, cost, unit, limit)
  if cost > fdiv(limit - n, unit) then return max(n, limit) end
  return n + cost * unit
end

-- farBehind is sluice's farBehind: the retry of a request whose debt (or
-- the leaky bucket's queue in parts), ahead * rate + n, is past debtCap, a
-- refusal that counts nothing; split as ahead whole ticks plus the rest,
-- because the product may pass 2^53.
local function farBehind(rate, period, ahead, n, room, cost, fits, force)
  if force then return ahead + cdiv(n + period - room, rate) end -- for a cost of 1
  if not fits then return -1 end
  return ahead + cdiv(n + cost * period - room, rate)
end

-- fmt formats an integer exactly (tostring would keep only 14 digits).
local function fmt(x)
  return string.format('%d', x)
end

-- num is fmt, cheaper for the many integers below 10^14 in magnitude,
-- which Lua prints exactly by itself.
local function num(x)
  if x == 0 then return '0' end -- never "-0"
  if x < 1e14 and x > -1e14 then return x .. '' end
  return string.format('%d', x)
end

-- STEP[alg](o, rate, burst, period, segments, now, cost, force) runs one
-- step of the algorithm (with force, sluice's Charge) on the state o and returns the outcome in ticks, as Go's
-- outcome: allowed (boolean), remaining, retry (-1: never), reset, delay,
-- idle, and a mark that lets REFUND[alg](o, rate, burst, period, segments,
-- now, cost, mark) give back what the step counted.
local STEP, REFUND = {}, {}

-- A key's state: T, N, M as in sluice.State. The bucket and window
-- algorithms keep just these, as one string "T N M" (GET, SET PX: the
-- fewest commands). The sliding log and the multi-segment counter keep a
-- hash: fields T, N, M plus named fields for the log's runs or the counter's
-- slots (fields.lua); with full, every field is read up front (HGETALL).
-- Changes to named fields are kept in o.f (false: delete) until save, so
-- that a script can decide several requests and then commit all or none.
local function load(key, hash, full)
  local o = {key = key, hash = hash}
  if full then
    local h = redis.call('HGETALL', key)
    local all = {}
    for i = 1, #h, 2 do all[h[i]] = tonumber(h[i + 1]) end
    o.all = all
    o.T, o.N, o.M = all.T or 0, all.N or 0, all.M or 0
  elseif hash then
    local v = redis.call('HMGET', key, 'T', 'N', 'M')
    o.T, o.N, o.M = tonumber(v[1]) or 0, tonumber(v[2]) or 0, tonumber(v[3]) or 0
  else
    local v = redis.call('GET', key)
    if v then
      local t, n, m = string.match(v, '^(%S+) (%S+) (%S+)$')
      o.T, o.N, o.M = t + 0, n + 0, m + 0
    else
      o.T, o.N, o.M = 0, 0, 0
    end
  end
  return o
end

-- saveFields (fields.lua) is save for states with named fields; only
-- the scripts of algorithms that use them define it.
local saveFields

-- save writes o back, or deletes the key when o is the zero State (a key
-- never seen decides exactly the same), and sets its expiry to ttl ms.
local function save(o, ttl)
  local key = o.key
  ttl = max(1, ttl)
  if not o.hash then
    if o.T == 0 and o.N == 0 and o.M == 0 then
      redis.call('DEL', key)
    else
      redis.call('SET', key, string.format('%d %d %d', o.T, o.N, o.M), 'PX', ttl)
    end
    return
  end
  return saveFields(o, ttl)
end
