--[[
release.lua: release a lease of a concurrency rule (`POST /v1/release`): its slot in every
bucket it holds is freed in one step.

KEYS[1]      the lease `slc:{<tenant>}:<id>` that lua/check.lua wrote
KEYS[2..]    the buckets it holds, in its order: the caller read them from the record, and
             they are checked against it here (all carry the tenant's hash tag)

Reply: { 0 }  no such lease (never taken, or it has ended by itself)
       { 1 }  released now
       { 2 }  released before (nothing changed)
The record is kept until it would have expired, so that a repeated release is answered.
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
if #held ~= #KEYS - 1 then
  return redis.error_reply('release.lua: the lease holds ' .. #held .. ' buckets, ' .. (#KEYS - 1) .. ' were passed')
end
for i, h in ipairs(held) do
  if h.k ~= KEYS[i + 1] then
    return redis.error_reply('release.lua: bucket ' .. i .. ' is not one the lease holds')
  end
end
for i, h in ipairs(held) do
  redis.call('ZREM', KEYS[i + 1], h.m)
end
redis.call('HSET', record, 'x', '1')
return { 1 }
