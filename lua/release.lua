--[[
release.lua: release a lease of a concurrency rule (`POST /v1/release`): its slot in every
bucket it holds is freed in one step.

KEYS[1]      the lease `slc:{<tenant>}:<id>` that lua/check.lua wrote
KEYS[2]      the tenant's live-key index `slb:{<tenant>}` (see lua/check.lua)
KEYS[3..]    the buckets it holds, in its order: the caller read them from the record, and
             they are checked against it here (all carry the tenant's hash tag)
ARGV[1]      how long to keep the released record at most, in ms, so that a repeated release
             is answered (a lease of a long period is not kept that long once released)
ARGV[2]      1 when the tenant has a quota of live keys: the record's entry in the index is
             moved to its new, earlier expiry

Reply: { 0 }  no such lease (never taken, or it has ended by itself)
       { 1 }  released now
       { 2 }  released before (nothing changed)
]]

if redis.replicate_commands then
  redis.replicate_commands()
end

local record = KEYS[1]
local raw = redis.call('HGET', record, 'r')
if not raw then
  return { 0 }
end
if redis.call('HGET', record, 'x') then
  return { 2 }
end
local held = cjson.decode(raw)
if #held ~= #KEYS - 2 then
  return redis.error_reply('release.lua: the lease holds ' .. #held .. ' buckets, ' .. (#KEYS - 2) .. ' were passed')
end
for i, h in ipairs(held) do
  if h.k ~= KEYS[i + 2] then
    return redis.error_reply('release.lua: bucket ' .. i .. ' is not one the lease holds')
  end
end
for i, h in ipairs(held) do
  redis.call('ZREM', KEYS[i + 2], h.m)
end
redis.call('HSET', record, 'x', '1')
local keep = tonumber(ARGV[1])
if redis.call('PTTL', record) > keep then
  redis.call('PEXPIRE', record, keep)
  if ARGV[2] == '1' then
    local t = redis.call('TIME')
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    redis.call('ZADD', KEYS[2], 'XX', now + keep, record)
  end
end
return { 1 }
