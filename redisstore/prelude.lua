-- prelude.lua: helpers shared by every Sluice script. The scripts are the
-- Lua twins of the Go state machines in the root package (bucket.go,
-- window.go). Lua numbers are IEEE doubles: every value here is an integer
-- below 2^53, sums and products stay below it (Limit.Ticks guarantees the
-- bounds), and division is only ever done in the exact forms below, never as
-- a plain a / b that could round.
if redis.replicate_commands then redis.replicate_commands() end

local fmod = math.fmod
local max, min = math.max, math.min

-- tdiv is Go's a / b (truncated); fmod has the sign of a, so a - r is an
-- exact multiple of b and the quotient is exact.
local function tdiv(a, b)
  return (a - fmod(a, b)) / b
end

-- fdiv is floor division, as sluice's floorDiv.
local function fdiv(a, b)
  local r = fmod(a, b)
  local q = (a - r) / b
  if r ~= 0 and ((r < 0) ~= (b < 0)) then q = q - 1 end
  return q
end

-- cdiv is ceiling division, as sluice's ceilDiv.
local function cdiv(a, b)
  return -fdiv(-a, b)
end

-- fmt formats an integer exactly (tostring would keep only 14 digits).
local function fmt(x)
  return string.format('%d', x)
end

local STEP, REFUND = {}, {}

-- A key's state: fields T, N, M as in sluice.State, plus named fields for
-- the sliding log's entries and the multi-segment counter's slots. Changes
-- are kept in o.f (false: delete) until save, so that a script can decide
-- several requests and then commit all or none.
local function load(key, full)
  local o = {key = key, f = {}}
  if full then
    local h = redis.call('HGETALL', key)
    o.all = {}
    for i = 1, #h, 2 do o.all[h[i]] = tonumber(h[i + 1]) end
    o.T, o.N, o.M = o.all.T or 0, o.all.N or 0, o.all.M or 0
  else
    local v = redis.call('HMGET', key, 'T', 'N', 'M')
    o.T, o.N, o.M = tonumber(v[1]) or 0, tonumber(v[2]) or 0, tonumber(v[3]) or 0
  end
  return o
end

local function fget(o, name)
  local v = o.f[name]
  if v ~= nil then
    if v == false then return 0 end
    return v
  end
  if o.all then return o.all[name] or 0 end
  return tonumber(redis.call('HGET', o.key, name)) or 0
end

local function fset(o, name, v)
  o.f[name] = v
end

local function chunked(cmd, key, list)
  local n = #list
  local i = 1
  while i <= n do
    local j = min(n, i + 999)
    redis.call(cmd, key, unpack(list, i, j))
    i = j + 1
  end
end

-- save writes o back, or deletes the key when o is the zero State (a key
-- never seen decides exactly the same), and sets its expiry to ttl ms.
local function save(o, ttl)
  local set, del, extra = {}, {}, false
  for name, v in pairs(o.f) do
    if v == false then
      del[#del + 1] = name
    else
      set[#set + 1] = name
      set[#set + 1] = fmt(v)
      if v ~= 0 then extra = true end
    end
  end
  if o.all and not extra then
    for name, v in pairs(o.all) do
      if v ~= 0 and o.f[name] == nil and name ~= 'T' and name ~= 'N' and name ~= 'M' then extra = true end
    end
  end
  if o.T == 0 and o.N == 0 and o.M == 0 and not extra then
    redis.call('DEL', o.key)
    return
  end
  set[#set + 1] = 'T'
  set[#set + 1] = fmt(o.T)
  set[#set + 1] = 'N'
  set[#set + 1] = fmt(o.N)
  set[#set + 1] = 'M'
  set[#set + 1] = fmt(o.M)
  chunked('HSET', o.key, set)
  chunked('HDEL', o.key, del)
  redis.call('PEXPIRE', o.key, ttl)
end

-- outcome is a decision in ticks, as the Go outcome.
local function outcome()
  return {allowed = false, remaining = 0, retry = 0, reset = 0, delay = 0, idle = 0, mark = 0}
end
