--[[
top_denied.lua: merge one instance's second of denials by subject into each tenant's summary of
the minute, exactly once, and keep every rule's summary within its capacity.

A summary is the frequent-items summary described in server/src/dashboard/top.rs: per rule, at
most `capacity` subjects with a count each, the denials seen and the error (how far below the
truth any count may be). Merging adds counts, denials and errors; a rule left holding more than
`capacity` subjects takes the (capacity + 1)-th largest count off every count, drops those at
zero or below, and adds that count to its error.

Why a script: the additions and the reduction must be one step for instances writing the same
minute at once, and a retry after a lost reply must add nothing. Each key gets the field
`w<US><instance><US><second>` the first time; a retry finds it and adds nothing.

KEYS[k]  sld:{fleet}:top:<tenant>:<unix minute>   a hash per tenant and minute:
           r<US><rule><US>n              denials seen
           r<US><rule><US>e              error
           r<US><rule><US>h              subjects held
           r<US><rule><US>p              the rule's name when last counted
           r<US><rule><US>s<US><subject> a subject's count (an empty subject: the rule's
                                         tenant-wide bucket)
ARGV[1]  the marker field    ARGV[2]  the keys' TTL in ms    ARGV[3]  capacity
then, for each key in order: the number of rules R, and R times:
         rule id, rule name, denials, error, number of subjects M, then M (subject, count)
         pairs.
<US> is the unit separator, byte 31.

Returns the number of keys added to (0 when this was a retry of a write already made).
]]

local capacity = tonumber(ARGV[3])

local function reduce(key, rule)
  local prefix = 'r\31' .. rule .. '\31s\31'
  local all = redis.call('HGETALL', key)
  local fields, values, sorted = {}, {}, {}
  for j = 1, #all, 2 do
    if string.sub(all[j], 1, #prefix) == prefix then
      local n = tonumber(all[j + 1])
      fields[#fields + 1] = all[j]
      values[#values + 1] = n
      sorted[#sorted + 1] = n
    end
  end
  if #sorted <= capacity then
    redis.call('HSET', key, 'r\31' .. rule .. '\31h', #sorted)
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
  redis.call('HSET', key, 'r\31' .. rule .. '\31h', kept)
  redis.call('HINCRBY', key, 'r\31' .. rule .. '\31e', cut)
end

local added = 0
local i = 4
for k = 1, #KEYS do
  local key = KEYS[k]
  local fresh = redis.call('HSETNX', key, ARGV[1], 1) == 1
  local rules = tonumber(ARGV[i])
  i = i + 1
  for _ = 1, rules do
    local rule, name, denials, err = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
    local m = tonumber(ARGV[i + 4])
    i = i + 5
    if fresh then
      local base = 'r\31' .. rule .. '\31'
      redis.call('HSET', key, base .. 'p', name)
      redis.call('HINCRBY', key, base .. 'n', denials)
      redis.call('HINCRBY', key, base .. 'e', err)
      local new = 0
      for j = i, i + 2 * m - 1, 2 do
        local count = tonumber(ARGV[j + 1])
        if redis.call('HINCRBY', key, base .. 's\31' .. ARGV[j], count) == count then
          new = new + 1
        end
      end
      if redis.call('HINCRBY', key, base .. 'h', new) > capacity then
        reduce(key, rule)
      end
    end
    i = i + 2 * m
  end
  redis.call('PEXPIRE', key, ARGV[2])
  if fresh then
    added = added + 1
  end
end
return added
