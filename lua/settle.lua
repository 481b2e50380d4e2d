--[[
settle.lua: settle a reservation (`POST /v1/settle`), in one step on every rule it charged:
what its estimate charged beyond the final cost is given back, what the final cost passes it
is charged (a bucket may go into debt). Every bucket is read and settled before any is
written, as lua/check.lua decides every rule before committing any: a bucket that cannot be
read (a key of another type, a packed string of another length) fails the settle with
nothing written, so a settle repeated once it is mended refunds each bucket once.

The arithmetic is the reference model's `settle` (app/src/rules/model.rs), operation for
operation; the differential test holds the two to identical answers. What a refund means
for each algorithm is in docs/ALGORITHMS.md, "Reserve and settle".

KEYS[1]      the reservation `slv:{<tenant>}:<id>` that lua/check.lua wrote
KEYS[2]      the tenant's live-key index `slb:{<tenant>}` (see lua/check.lua)
KEYS[3..]    the buckets it charged, in its order: the caller read them from the record, and
             they are checked against it here (every key carries the tenant's hash tag, so on
             a Cluster they share the record's slot)
ARGV[1]      the final cost
ARGV[2]      now in ms, or "" to use Redis TIME
ARGV[3]      how long to keep the settled record, in ms, so that a repeated settle is answered
ARGV[4]      1 when the tenant has a quota of live keys: a bucket an overrun creates (its
             state had expired) is entered in the index, as a check would enter it, and the
             record's entry moves to its new expiry. A settle is never refused by the quota:
             it adds at most the buckets its check had.
ARGV[5]      the layout buckets are written in: `hash`, or packed (anything else); both are
             read (lua/check.lua's header, "State")

Reply: { 0 }                        no such reservation (never made, or expired)
       { 1, estimate }              settled now
       { 2, estimate, first cost }  settled before, at that cost (nothing changed)
]]

if redis.replicate_commands then
  redis.replicate_commands()
end

local MARGIN = 1000

local record = KEYS[1]
local raw = redis.call('HGET', record, 'r')
if not raw then
  return { 0 }
end
local estimate = redis.call('HGET', record, 'e')
local first = redis.call('HGET', record, 's')
if first then
  return { 2, estimate, first }
end

local final = tonumber(ARGV[1])
local now
if ARGV[2] ~= '' then
  now = tonumber(ARGV[2])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function fmt(x)
  return string.format('%.17g', x)
end

local function whole_ms(x)
  if x < 0 then
    x = 0
  end
  return math.ceil(x)
end

local packed = ARGV[5] ~= 'hash'

-- The struct format of a packed state of n numbers: little-endian doubles.
local function packing(n)
  return n == 2 and '<dd' or n == 3 and '<ddd' or '<dddd'
end

-- A bucket's state as numbers, in the order of its fields' names, from either layout (the
-- one written tried first); nil when the key is absent. A packed string of another length
-- than its numbers' is refused, as lua/check.lua refuses it.
local function read_state(key, names)
  local raw
  if packed then
    raw = redis.pcall('GET', key)
    if raw == false then
      return nil
    end
  end
  if not packed or type(raw) == 'table' then
    local values = redis.pcall('HMGET', key, unpack(names))
    if not values.err then
      -- Every write sets all of a state's fields, so a missing first field is a missing key.
      if values[1] == false then
        return nil
      end
      for i = 1, #values do
        values[i] = tonumber(values[i])
      end
      return values
    end
    -- A packed string, under the hash layout.
    raw = redis.call('GET', key)
  end
  if #raw ~= 8 * #names then
    error('bucket ' .. key .. ' holds ' .. #raw .. ' bytes, not the ' .. 8 * #names .. ' of its ' .. #names .. ' numbers')
  end
  return { struct.unpack(packing(#names), raw) }
end

-- Enters a bucket this settle creates in the quota's index.
local function created(key, ttl)
  if ARGV[4] == '1' then
    redis.call('ZADD', KEYS[2], now + ttl, key)
  end
end

-- Writes a bucket's state (its numbers, in the order of its fields' names) in this call's
-- layout, over whichever it was in.
local function write(key, names, values, ttl)
  if redis.call('EXISTS', key) == 0 then
    created(key, ttl)
  end
  if packed then
    redis.call('SET', key, struct.pack(packing(#values), unpack(values)), 'PX', ttl)
    return
  end
  local fields = {}
  for i = 1, #values do
    fields[2 * i - 1] = names[i]
    fields[2 * i] = fmt(values[i])
  end
  local reply = redis.pcall('HSET', key, unpack(fields))
  if type(reply) == 'table' then
    -- A packed string, under the hash layout, is written over; any other error is the
    -- settle's.
    if not string.find(reply.err, 'WRONGTYPE', 1, true) then
      error(reply.err)
    end
    redis.call('DEL', key)
    redis.call('HSET', key, unpack(fields))
  end
  redis.call('PEXPIRE', key, ttl)
end

-- Each settles one rule: L, P, B its parameters, c what it was charged, m where, f the final
-- cost. Called only when f ~= c. Each only reads, and returns what it would write (a function),
-- or nil when the bucket is left as it is: a refund to a state that has expired, or to a window
-- or log entry that has passed, and any concurrency rule (its lease's release frees it).

local function token_bucket(key, L, P, B, c, m, f)
  local s = read_state(key, { 'v', 't' })
  if s == nil and f < c then
    return nil
  end
  s = s or { B, now }
  local tokens, ts = s[1], s[2]
  local t = math.max(now, ts)
  tokens = math.min(B, tokens + (t - ts) * L / P)
  if f < c then
    tokens = math.min(B, tokens + (c - f))
  else
    tokens = tokens - (f - c)
  end
  return function()
    write(key, { 'v', 't' }, { tokens, t }, whole_ms((B - math.min(0, tokens)) * P / L + MARGIN))
  end
end

local function gcra(key, L, P, B, c, m, f)
  local per = P / L
  local tau = B * per
  local s = read_state(key, { 'v', 't' })
  if s == nil and f < c then
    return nil
  end
  s = s or { 0, now }
  local backlog, ts = s[1], s[2]
  local t = math.max(now, ts)
  backlog = math.max(0, backlog - (t - ts))
  if f < c then
    backlog = math.max(0, backlog - (c - f) * per)
  else
    backlog = backlog + (f - c) * per
  end
  return function()
    write(key, { 'v', 't' }, { backlog, t }, whole_ms(math.max(tau, backlog) + MARGIN))
  end
end

local function leaky_bucket(key, L, P, B, c, m, f)
  local s = read_state(key, { 'v', 't' })
  if s == nil and f < c then
    return nil
  end
  s = s or { 0, now }
  local level, ts = s[1], s[2]
  local t = math.max(now, ts)
  level = math.max(0, level - (t - ts) * L / P)
  if f < c then
    level = math.max(0, level - (c - f))
  else
    level = level + (f - c)
  end
  return function()
    write(key, { 'v', 't' }, { level, t }, whole_ms(math.max(B, level) * P / L + MARGIN))
  end
end

local function fixed_window(key, L, P, B, c, m, f)
  local s = read_state(key, { 'v', 'w', 't' })
  if s == nil and f < c then
    return nil
  end
  s = s or { 0, math.floor(now / P), now }
  local count, window, ts = s[1], s[2], s[3]
  local t = math.max(now, ts)
  local w = math.floor(t / P)
  if w ~= window then
    count, window = 0, w
  end
  if f < c then
    if m ~= window then
      return nil
    end
    count = math.max(0, count - (c - f))
  else
    count = count + (f - c)
  end
  return function()
    write(key, { 'v', 'w', 't' }, { count, window, t }, whole_ms((window + 1) * P - t + MARGIN))
  end
end

local function sliding_window(key, L, P, B, c, m, f)
  local s = read_state(key, { 'p', 'v', 'w', 't' })
  if s == nil and f < c then
    return nil
  end
  s = s or { 0, 0, math.floor(now / P), now }
  local prev, cur, window, ts = s[1], s[2], s[3], s[4]
  local t = math.max(now, ts)
  local w = math.floor(t / P)
  if w == window + 1 then
    prev, cur = cur, 0
  elseif w > window + 1 then
    prev, cur = 0, 0
  end
  if f < c then
    if m == w then
      cur = math.max(0, cur - (c - f))
    elseif m == w - 1 then
      prev = math.max(0, prev - (c - f))
    else
      return nil
    end
  else
    cur = cur + (f - c)
  end
  return function()
    write(key, { 'p', 'v', 'w', 't' }, { prev, cur, w, t }, whole_ms(P - (t - w * P) + P + MARGIN))
  end
end

local function sliding_log(key, L, P, B, c, m, f)
  local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if newest[2] == nil and f < c then
    return nil
  end
  local t = now
  if newest[2] then
    t = math.max(now, tonumber(newest[2]))
  end
  local found = nil
  if m > t - P then
    for _, member in ipairs(redis.call('ZRANGEBYSCORE', key, fmt(m), fmt(m))) do
      if tonumber(string.match(member, ':([^:]+)$')) == c then
        found = member
        break
      end
    end
  end
  if not found and f < c then
    return nil
  end
  return function()
    redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt(t - P))
    if found then
      -- The entry keeps its time and its place among equal times; only its cost changes.
      redis.call('ZREM', key, found)
      redis.call('ZADD', key, fmt(m), string.match(found, '^(.*):[^:]+$') .. ':' .. fmt(f))
    else
      if newest[2] == nil then
        created(key, whole_ms(P + MARGIN))
      end
      local k = redis.call('ZCOUNT', key, fmt(t), fmt(t))
      redis.call('ZADD', key, fmt(t), fmt(t) .. ':' .. k .. ':' .. fmt(f - c))
    end
    redis.call('PEXPIRE', key, whole_ms(P + MARGIN))
  end
end

-- A lease is freed by its release (lua/release.lua), whatever it cost: nothing to settle.
local function concurrency()
  return nil
end

local ALGORITHMS = { token_bucket, gcra, leaky_bucket, fixed_window, sliding_window, sliding_log,
                     concurrency }

local charged = cjson.decode(raw)
if #charged ~= #KEYS - 2 then
  return redis.error_reply('settle.lua: the reservation charged ' .. #charged .. ' buckets, ' .. (#KEYS - 2) .. ' were passed')
end
for i, r in ipairs(charged) do
  if r.k ~= KEYS[i + 2] then
    return redis.error_reply('settle.lua: bucket ' .. i .. ' is not the one the reservation charged')
  end
end
-- Every bucket read and settled first; written only once all of them could be.
local writes = {}
for i, r in ipairs(charged) do
  local c = tonumber(r.c)
  if final ~= c then
    writes[#writes + 1] = ALGORITHMS[tonumber(r.a)](KEYS[i + 2], tonumber(r.l), tonumber(r.p),
                                                    tonumber(r.b), c, tonumber(r.m), final)
  end
end
for _, commit in ipairs(writes) do
  commit()
end
redis.call('HSET', record, 's', ARGV[1])
redis.call('PEXPIRE', record, ARGV[3])
-- Its entry in the quota's index moves to the new expiry, so it stops counting with it.
if ARGV[4] == '1' then
  redis.call('ZADD', KEYS[2], 'XX', now + tonumber(ARGV[3]), record)
end
return { 1, estimate }
