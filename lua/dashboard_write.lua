--[[
dashboard_write.lua: add one instance's second to the fleet's per-second and per-minute series,
exactly once, and record the instance's heartbeat.

Why a script: an instance retries a second it could not write (Redis down, a reply lost to a
timeout). Without a record of what was already added, a retry after a lost reply would count
the second twice. The second's hash gets a field `w<US><instance>` the first time; a retry finds
it and adds nothing. The check and the additions run as one step.

KEYS[1]  sld:{fleet}:s:<unix second>   the second's hash (every instance adds into it)
KEYS[2]  sld:{fleet}:m:<unix minute>   the minute's hash
KEYS[3]  sld:{fleet}:alive             sorted set: instance id -> last heartbeat (ms)
KEYS[4]  sld:{fleet}:beat:<instance>   the instance's heartbeat (JSON)
ARGV[1]  the second's TTL in ms         ARGV[2]  the minute's TTL in ms
ARGV[3]  the instance id                ARGV[4]  the heartbeat time (Unix ms)
ARGV[5]  the heartbeat JSON             ARGV[6]  the heartbeat's TTL in ms
ARGV[7]  heartbeats older than this (Unix ms) leave the alive set
ARGV[8..] field, value pairs. A field starting with `rx<US>` or `dx<US>` is a per-instance
          maximum (set on the second only); every other field is added to both hashes.
          <US> is the unit separator, byte 31.

Returns 1 when the second was added, 0 when this instance had already added it.
]]

local added = 0
if #ARGV >= 8 then
  if redis.call('HSETNX', KEYS[1], 'w\31' .. ARGV[3], 1) == 1 then
    for i = 8, #ARGV - 1, 2 do
      local field, value = ARGV[i], ARGV[i + 1]
      local kind = string.sub(field, 1, 3)
      if kind == 'rx\31' or kind == 'dx\31' then
        redis.call('HSET', KEYS[1], field, value)
      else
        redis.call('HINCRBY', KEYS[1], field, value)
        redis.call('HINCRBY', KEYS[2], field, value)
      end
    end
    redis.call('PEXPIRE', KEYS[1], ARGV[1])
    redis.call('PEXPIRE', KEYS[2], ARGV[2])
    added = 1
  end
end
redis.call('SET', KEYS[4], ARGV[5], 'PX', ARGV[6])
redis.call('ZADD', KEYS[3], ARGV[4], ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', ARGV[7])
return added
