--[[
top_denied.lua: merge one instance's second of denials by subject into the minute's summaries of
each tenant's rules, exactly once, and keep every rule's summary within its capacity.

A summary is the frequent-items summary described in server/src/dashboard/top.rs: per rule, at
most `capacity` subjects with a count each, the denials seen and the error (how far below the
truth any count may be). Merging adds counts, denials and errors; a summary left holding more
than `capacity` subjects takes the (capacity + 1)-th largest count off every count, drops those
at zero or below, and adds that count to its error.

Why a script: the additions and the reduction must be one step for instances writing the same
minute at once, and a retry after a lost reply must add nothing: the minute's set of marks gets
`<instance><US><second>` the first time, and a retry finds it there and adds nothing.

KEYS[1]  sld:{fleet}:topw:<minute>                 set: the writes already made this minute
then, for each tenant in order:
         sld:{fleet}:top:<tenant>:<minute>         set: the ids of the rules it holds
         then one key per rule of the tenant in this write:
         sld:{fleet}:top:<tenant>:<minute>:<rule>  hash, the rule's summary:
           n  denials seen        e  error        h  subjects held
           p  the rule's name when last counted
           s<US><subject>  a subject's count (an empty subject: the rule's tenant-wide bucket)
ARGV[1]  the mark     ARGV[2]  every key's TTL in ms     ARGV[3]  capacity
then, for each tenant in order: the number of rules R, and R times:
         rule id, rule name, denials, error, number of subjects M, then M (subject, count) pairs.
<US> is the unit separator, byte 31.

Returns 1 when the second was merged, 0 when this instance had already merged it.
]]

local ttl, capacity = ARGV[2], tonumber(ARGV[3])

local function reduce(key)
  local all = redis.call('HGETALL', key)
  local fields, values, sorted = {}, {}, {}
  for j = 1, #all, 2 do
    if string.sub(all[j], 1, 2) == 's\31' then
      local n = tonumber(all[j + 1])
      fields[#fields + 1] = all[j]
      values[#values + 1] = n
      sorted[#sorted + 1] = n
    end
  end
  if #sorted <= capacity then
    redis.call('HSET', key, 'h', #sorted)
    return
  end
  table.sort(sorted, function(a, b) return a > b end)
  local cut = sorted[capacity + 1]
  local kept = 0
  for j = 1, #fields do
    local left = values[j] - cut
    if left > 0 then
      redis.call('HSET', key, fields[j], left)
      kept = kept + 1
    else
      redis.call('HDEL', key, fields[j])
    end
  end
  redis.call('HSET', key, 'h', kept)
  redis.call('HINCRBY', key, 'e', cut)
end

if redis.call('SADD', KEYS[1], ARGV[1]) == 0 then
  return 0
end
redis.call('PEXPIRE', KEYS[1], ttl)

local k, i = 2, 4
while k <= #KEYS do
  local index = KEYS[k]
  k = k + 1
  local rules = tonumber(ARGV[i])
  i = i + 1
  for _ = 1, rules do
    local key = KEYS[k]
    k = k + 1
    local rule, name, denials, err = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
    local m = tonumber(ARGV[i + 4])
    i = i + 5
    redis.call('SADD', index, rule)
    redis.call('HSET', key, 'p', name)
    redis.call('HINCRBY', key, 'n', denials)
    redis.call('HINCRBY', key, 'e', err)
    local new = 0
    for j = i, i + 2 * m - 1, 2 do
      local count = tonumber(ARGV[j + 1])
      if redis.call('HINCRBY', key, 's\31' .. ARGV[j], count) == count then
        new = new + 1
      end
    end
    if redis.call('HINCRBY', key, 'h', new) > capacity then
      reduce(key)
    end
    redis.call('PEXPIRE', key, ttl)
    i = i + 2 * m
  end
  redis.call('PEXPIRE', index, ttl)
end
return 1
