-- fields.lua: named fields beyond T, N, M (the sliding log's runs, the
-- multi-segment counter's slots), for the scripts that need them.

local function fget(o, name)
  local f = o.f
  if f then
    local v = f[name]
    if v ~= nil then
      if v == false then return 0 end
      return v
    end
  end
  if o.all then return o.all[name] or 0 end
  -- Read each field from Redis once per request: the log's binary
  -- searches and its last run come back to the same fields.
  local r = o.r
  if r then
    local v = r[name]
    if v ~= nil then return v end
  else
    r = {}
    o.r = r
  end
  local v = tonumber(redis.call('HGET', o.key, name)) or 0
  r[name] = v
  return v
end

local function fset(o, name, v)
  local f = o.f
  if not f then
    f = {}
    o.f = f
  end
  f[name] = v
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

saveFields = function(o, ttl)
  local key = o.key
  local set, del, extra = {}, {}, false
  for name, v in pairs(o.f or {}) do
    if v == false then
      del[#del + 1] = name
    else
      set[#set + 1] = name
      set[#set + 1] = num(v)
      if v ~= 0 then extra = true end
    end
  end
  if o.all and not extra then
    for name, v in pairs(o.all) do
      if v ~= 0 and (not o.f or o.f[name] == nil) and name ~= 'T' and name ~= 'N' and name ~= 'M' then extra = true end
    end
  end
  if o.T == 0 and o.N == 0 and o.M == 0 and not extra then
    redis.call('DEL', key)
    return
  end
  set[#set + 1] = 'T'
  set[#set + 1] = num(o.T)
  set[#set + 1] = 'N'
  set[#set + 1] = num(o.N)
  set[#set + 1] = 'M'
  set[#set + 1] = num(o.M)
  chunked('HSET', key, set)
  chunked('HDEL', key, del)
  redis.call('PEXPIRE', key, ttl)
end
