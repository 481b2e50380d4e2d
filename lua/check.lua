--[[
check.lua: decide one request against up to 8 rate-limit rules, atomically.

Why one script: the read of every rule's state, the decision and the write must be a single
step. Two instances that each read "one token left" and then both write would admit two
requests; a request that passes its route rule but fails its tenant-wide rule must not
consume the route rule. Redis runs a script without interleaving any other command, so all
rules are read, decided and (only if every enforced rule admits) committed as one unit.
All keys carry the tenant's hash tag `{tenant}`, so on a Redis Cluster they share one slot
and one node can run the script.

The arithmetic is the reference model's (app/src/rules/model.rs), operation for operation,
in IEEE doubles; differential tests hold the two to identical answers. State is stored
exactly: as the doubles themselves, or in decimal with %.17g (State, below).

The script is always called with a batch (below), which carries each check's keys and
arguments as follows; a call laid out as one check alone is refused.

KEYS[1..n]   the bucket of each rule, `sl:{<tenant>}:<rule>:<subject>`
KEYS[n+1]    the caller's request_id record `slr:{<tenant>}:<hash>`, so that a retry with the
             same id returns the first decision (always passed; used only when ARGV[2] > 0);
             kept in JSON, which any instance, of any version, may read
KEYS[n+2]    the tenant's active-key HyperLogLog for this minute, `slk:{<tenant>}:<minute>`:
             every bucket checked is added to it (not in a dry run; by each instance once a
             minute, ARGV[6+7n]), so the dashboards can count active keys with PFCOUNT and
             no KEYS or SCAN
KEYS[n+3]    the tenant's live-key index `slb:{<tenant>}`: a sorted set of the buckets and
             request_id records it holds, scored by the time each expires at the earliest
             (used only when ARGV[5+7n] >= 0)
ARGV[1]      now in ms, or "" to use Redis TIME (tests pass an explicit clock)
ARGV[2]      idempotency TTL in ms (> 0: look the record up first, write it after deciding);
             0 = no record; -1 = dry run: decide, write nothing
ARGV[3]      n, the number of rules (1..8)
ARGV[4+7i..] per rule i: algorithm code (1 token_bucket, 2 gcra, 3 leaky_bucket,
             4 fixed_window, 5 sliding_window, 6 sliding_log, 7 concurrency), limit, period_ms, capacity
             (burst, or limit), cost, penalty (0/1), shadow (0/1)
ARGV[4+7n]   1 when the check keeps a record of its own (ARGV[2] > 0: the caller's
             request_id's, which counts against the quota), 0 otherwise; a check whose ARGV[2]
             asks for a record without it fails
ARGV[5+7n]   the tenant's quota of live keys, or -1 for none
ARGV[6+7n]   one character per rule: '0' when this instance has already added the rule's
             bucket to this minute's active-key HyperLogLog, '1' (or absent) to add it
ARGV[7+7n]   a reservation's TTL in ms (`/v1/reserve`), or 0 or absent for none: when the
             request is admitted, KEYS[n+4] records what each rule was charged, for
             lua/settle.lua
KEYS[n+4]    the reservation `slv:{<tenant>}:<id>` (only with ARGV[7+7n] > 0): a hash whose
             field r is a JSON list, per rule written, of { k = key, a = algorithm, l, p,
             b, c = cost, m = where the charge went (the window, or the log entry's time) },
             and e the cost; it lives ARGV[7+7n] ms and counts against the quota
ARGV[8+7n]   the lease id, when a rule is `concurrency` (or absent): an admitted request
             holds a lease `<id>:<expiry>:<slots>` in each concurrency bucket, and the lease record
             (the next key after the ones above) lists them for lua/release.lua
KEYS[last]   the lease `slc:{<tenant>}:<id>` (only with ARGV[8+7n]): a hash whose field r is
             a JSON list of { k = bucket, m = member }; it lives as long as the longest of
             its leases and counts against the quota

Reply: { deduplicated (0/1), now, allowed (0/1),
         then per rule: verdict (1 allow, 0 deny, -1 never fits: cost above capacity),
         remaining (string, %.17g), reset_after_ms, retry_after_ms }
or, when the call would create keys past the quota and so did nothing:
       { 2, now, live keys, ms until the earliest of them expires }

A batch: the checks of one tenant that queued while the instance's last call for it ran, sent
as one call so that a script run, its record and its round trip are paid once for all of them
(server/src/limiter/redis_backend.rs). They are decided one after the other, in order, as
separate calls would be, at one Redis time.
KEYS[1]      the batch's idempotency record, so that a resend after a lost reply returns every
             check's first decision: the hash `slq:{<tenant>}:<slot>:<ttl>` that every call
             of the tenant in one quarter second that keeps its record <ttl> ms shares, the
             reply in field ARGV[2] in MessagePack (one key a slot rather than one a call:
             Redis's expiry cycle stalled on a key a check); every hash of that name is kept
             the same ARGV[3] ms (it is in the name), so each write sets that TTL with one
             PEXPIRE, which only ever pushes the expiry later; a record written in JSON by an
             earlier version of this script is read too
KEYS[2..]    each check's keys as above, one check after the other
ARGV[1]      the word `batch` for the call's first send, which skips looking for its record
             (nothing can have written it yet), or `resend` for a send after a lost
             connection, which returns the record when an earlier send ran
ARGV[2]      the batch's field in KEYS[1] (32 hex digits)
ARGV[3]      the record's TTL in ms
ARGV[4]      how many keys each check has, in order: a MessagePack array of m integers
ARGV[5]      each check's arguments as above, in order: a MessagePack array of m arrays, whose
             numbers are MessagePack integers and whose words (ARGV[1] when empty, the flags,
             ARGV[4+7n], the marks, the lease id) are strings. A check's own record is off
             (ARGV[2] 0) unless it carries the caller's request_id or is a dry run. Packed, a
             check's twenty-odd arguments cost Redis one argument and the script no `tonumber`
             of a string: each separate argument cost Redis about a thousand instructions and
             each `tonumber` of one about 1,300 more (docs/BENCHMARKS.md, "A check's
             arguments, packed")
ARGV[6]      the layout the buckets are written in (State, below): `hash`, or packed (`packed`,
             or absent)
Reply: one string, the list of the checks' replies in order packed in MessagePack (the bytes
       the batch's record keeps): a reply of nested arrays costs the server's Redis client
       about a thousand instructions a value to parse, one string a few a byte
       (server/src/limiter/batch_reply.rs); a check that raised an error (a key of another
       type, a packed bucket of another length) replies { 3, the error }; the others are decided as usual.
The buckets the batch's checks add to an active-key HyperLogLog are gathered and added once
per HyperLogLog at the batch's end (one PFADD, not one a check).

The quota: a call that would create a bucket or keep a caller's request_id checks the index
first. It drops (or, when the key lives on, re-scores) up to PRUNE entries whose time has
passed (one EXISTS asks whether any of their keys lives on; only then is each asked its PTTL,
one call a key), then refuses if the live keys plus the new ones would pass the quota, and otherwise
counts the new ones in. The checks of a call share what the first learnt: the index's size
and, when its prune found fewer than PRUNE entries due, that nothing is due at that time, so
a later check of the same time neither prunes nor counts again. The new entries of all of a
call's checks go into the index in one ZADD when the call ends; until then each counts as new,
and before the index is pruned again or a check is refused, the ZADD is made at once and its
count of new members corrects the size, so the quota is exact. Checks of existing buckets
never touch the index. The index
has no TTL of its own: a bucket written again outlives the time it was first scored with, so
the index must outlive it too; it holds at most the quota's entries and Redis drops it with
its last one.

State, per algorithm (every key gets a TTL covering a full refill). The first five keep a few
numbers, in one of two layouts, which the batch's ARGV[6] chooses for what this call writes:
packed, a string of the numbers as little-endian doubles (struct format '<dd', '<ddd' or
'<dddd'), in the order below, written with one SET ... PX; or hash, the fields named below
with each number in decimal (%.17g, which round-trips a double exactly), written with HSET
and PEXPIRE, the only layout that builds before packed buckets read. Both layouts are read
whichever is written (the one written is tried first, the other only when the key is of the
other type), so a fleet of this build may switch layouts at any time:
  token_bucket  v = tokens, t = last time      gcra           v = TAT - t (backlog), t = last time
  leaky_bucket  v = level,  t = last time      fixed_window   v = count, w = window, t
  sliding_window p = previous count, v = current count, w = window index, t
  sliding_log   a sorted set: score = time, member = "<time>:<k>:<cost>" (k makes equal
                times unique); the newest score is the last time seen
  concurrency   a sorted set of leases: score = expiry time,
                member = "<lease id>:<expiry time>:<slots>"
                (time is not clamped: an earlier time only counts more leases as live)
A denial writes nothing unless the rule has penalty; a check's request_id record is written
for every decision when ARGV[2] > 0, and a batch's record for every batch.
]]

if redis.replicate_commands then
  redis.replicate_commands()
end

-- The chunk runs again on every call, and Lua makes each function it defines anew, with an
-- upvalue for every local of the chunk the function uses. So the constants live in the
-- functions that use them (a local constant costs one load a call of its function, an upvalue
-- a few hundred instructions a script call), and the seven algorithms are the branches of one
-- function rather than seven (each function defined costs a call over a thousand
-- instructions, used or not): docs/BENCHMARKS.md, "The functions a call of the script makes".

-- The first item of a batched check's reply when the check failed (its error follows).
local FAILED = 3

-- The state of the check being decided, which the helpers below read: its clock, its lease
-- id (or nil), and the buckets it found absent (so writing them creates them), for the quota.
local now, lease_id, absent

-- Whether this call writes buckets as packed strings (the batch's ARGV[6] is not `hash`).
local packed

-- The digits of each number this call has written, by value. A batch's checks write the same
-- few numbers again and again (the batch's one time, the tokens left in new buckets): a
-- string.format cost about 2,000 instructions, a lookup here a few dozen, and a number met
-- the first time pays the lookup and its entry besides (docs/BENCHMARKS.md, "Each number
-- printed once a call"). Zero and NaN are not kept: a table holds 0 and -0 as one key, and
-- cannot hold NaN.
local written = {}

-- A whole number below 2^53 prints the same digits with %d, which skips the slow
-- multi-precision path %.17g takes for the 13 digits of a time in ms. Zero is written as
-- %.17g writes it, its sign included.
local function fmt(x)
  if x == 0 then
    return 1 / x < 0 and '-0' or '0'
  end
  local text = written[x]
  if text then
    return text
  end
  local WHOLE = 2 ^ 53
  if x % 1 == 0 and x < WHOLE and x > -WHOLE then
    text = string.format('%d', x)
  else
    text = string.format('%.17g', x)
  end
  if x == x then
    written[x] = text
  end
  return text
end

-- A batch's record (a field in its tenant's hash) holds its replies in MessagePack, about four
-- times cheaper to write than JSON (numbers are stored in binary, not printed): only the
-- instance that made the call resends it. A request_id's record stays JSON,
-- because any instance may be asked again with that id, one of an earlier version (which reads
-- only JSON) during a rolling upgrade. A record that starts with '[' is JSON.
local function encode_record(reply)
  return cmsgpack.pack(reply)
end
local function decode_record(raw)
  if string.byte(raw, 1) == 91 then
    return cjson.decode(raw)
  end
  return cmsgpack.unpack(raw)
end

-- The live-key index of each tenant as this call last saw it, so that the checks of a batch
-- read it once: { [index key] = { at = the time it was pruned at, clean = nothing more was
-- due then, live = its size with the entries waiting, waiting = { score, member, ... } } }.
-- The entries of the keys a call's checks create wait here and go into the index in one ZADD
-- when the call ends (`add_waiting`), or sooner when the count matters: before the index is
-- pruned again, and before a check is refused for the quota. Each is counted new while it
-- waits; the ZADD's reply (the members that were) corrects `live`.
local indexes = {}

-- Adds the entries waiting for `index` to it, in one ZADD.
local function add_waiting(index)
  local seen = indexes[index]
  if seen and #seen.waiting > 0 then
    local counted = #seen.waiting / 2
    seen.live = seen.live - counted + redis.call('ZADD', index, unpack(seen.waiting))
    seen.waiting = {}
  end
end

local function add_all_waiting()
  for index in pairs(indexes) do
    add_waiting(index)
  end
end

-- The active-key marks a batch gathers, to add once per HyperLogLog when it ends: a table
-- { order = {active keys in first-seen order}, [active key] = {bucket keys} }.
local gathered = nil

-- Adds bucket keys to a minute's active-key HyperLogLog (about 12 KB at most, standard error
-- 0.81%). It gets its expiry when this call created it; a minute's key is written only in
-- that minute, so the expiry is never pushed back.
local function mark_active(active_key, members)
  -- How long a minute's active-key HyperLogLog lives: the 5-minute window plus a margin.
  local ACTIVE_TTL_MS = 7 * 60 * 1000
  local fresh = redis.call('EXISTS', active_key) == 0
  redis.call('PFADD', active_key, unpack(members))
  if fresh then
    redis.call('PEXPIRE', active_key, ACTIVE_TTL_MS)
  end
end

local function whole_ms(x)
  if x < 0 then
    x = 0
  end
  return math.ceil(x)
end

-- A decision: verdict, remaining, reset_after_ms, retry_after_ms.
local function decision(v, remaining, reset, retry)
  local DENY = 0
  local r = 0
  if v == DENY then
    r = math.max(whole_ms(retry), 1)
  end
  return { v = v, rem = remaining, reset = whole_ms(reset), retry = r }
end

-- The struct format of a packed state of n numbers: little-endian doubles.
local function packing(n)
  return n == 2 and '<dd' or n == 3 and '<ddd' or '<dddd'
end

-- A bucket's state: its numbers in the order of its fields' names (...), read in either
-- layout (the header's "State"), whichever this call writes; an absent key reads as no
-- numbers. Each layout is tried first where it is the one written, so a call pays a second
-- command only for a bucket last written in the other layout. A packed string of another
-- length than its numbers' was not written by this algorithm (a bucket's key names its
-- algorithm: server/src/redis_client/keys.rs), and is refused rather than read in part: the
-- check fails, as on a key of another type.
local function read_state(key, ...)
  local raw
  if packed then
    raw = redis.pcall('GET', key)
    if raw == false then
      absent[key] = true
      return {}
    end
  end
  if not packed or type(raw) == 'table' then
    local values = redis.pcall('HMGET', key, ...)
    if not values.err then
      -- Every write sets all of a state's fields, so a missing first field is a missing key.
      absent[key] = values[1] == false
      for i = 1, #values do
        values[i] = tonumber(values[i])
      end
      return values
    end
    -- A packed string, under the hash layout.
    raw = redis.call('GET', key)
  end
  absent[key] = false
  local n = select('#', ...)
  if #raw ~= 8 * n then
    error('bucket ' .. key .. ' holds ' .. #raw .. ' bytes, not the ' .. 8 * n .. ' of its ' .. n .. ' numbers')
  end
  return { struct.unpack(packing(n), raw) }
end

-- When a sliding window would hold nothing: after the next window ends if the current one
-- holds `count`, after this one if only the previous one holds some.
local function window_reset(count, prev, left_in_window, P)
  if count > 0 then
    return left_in_window + P
  elseif prev > 0 then
    return left_in_window
  end
  return 0
end

-- Decides one rule by its algorithm (the codes of ARGV[4+7i]), writing nothing. Returns the
-- decision, the state to write if admitted, the state to write on a penalised denial, and the
-- bucket's TTL. A state is the list of its numbers in the header's order (State), or for the
-- log a table { entry = {time, cost} }, for a lease { lease = {expiry, slots} }.
local function decide_rule(algorithm, key, L, P, B, c, now, penalty)
  -- Verdicts, as the reply gives them.
  local ALLOW, DENY, NEVER = 1, 0, -1
  -- Every bucket's TTL covers a full refill, and a second more.
  local MARGIN = 1000
  -- Slack for doubles that refilled to exactly the cost but read a few ulps short (model.rs).
  local EPSILON = 1e-9
  if algorithm == 1 then -- token bucket
    local s = read_state(key, 'v', 't')
    local tokens, ts = s[1], s[2]
    if tokens == nil or ts == nil then
      tokens, ts = B, now
    end
    now = math.max(now, ts)
    tokens = math.min(B, tokens + (now - ts) * L / P)
    local ttl = whole_ms((B - math.min(0, tokens)) * P / L + MARGIN)
    if c > B then
      return decision(NEVER, tokens, (B - tokens) * P / L, 0), nil, nil, ttl
    end
    if tokens + EPSILON >= c then
      local left = math.max(0, tokens - c)
      return decision(ALLOW, left, (B - left) * P / L, 0), { left, now }, nil, ttl
    end
    if penalty then
      tokens = math.min(tokens, math.max(0, tokens - c))
    end
    local d = decision(DENY, tokens, (B - tokens) * P / L, (c - tokens) * P / L)
    return d, nil, penalty and { tokens, now } or nil, ttl
  elseif algorithm == 2 then -- gcra
    local t = P / L
    local tau = B * t
    local s = read_state(key, 'v', 't')
    local backlog, ts = s[1], s[2]
    if backlog == nil or ts == nil then
      backlog, ts = 0, now
    end
    now = math.max(now, ts)
    backlog = math.max(0, backlog - (now - ts))
    local ttl = whole_ms(math.max(tau, backlog) + MARGIN)
    if c > B then
      return decision(NEVER, math.max(0, (tau - backlog) / t), backlog, 0), nil, nil, ttl
    end
    local after = backlog + c * t
    if after <= tau + EPSILON * t then
      local d = decision(ALLOW, math.max(0, (tau - after) / t), after, 0)
      return d, { after, now }, nil, ttl
    end
    if penalty then
      backlog = math.max(backlog, math.min(after, tau))
    end
    local d = decision(DENY, math.max(0, (tau - backlog) / t), backlog, backlog + c * t - tau)
    return d, nil, penalty and { backlog, now } or nil, ttl
  elseif algorithm == 3 then -- leaky bucket
    local s = read_state(key, 'v', 't')
    local level, ts = s[1], s[2]
    if level == nil or ts == nil then
      level, ts = 0, now
    end
    now = math.max(now, ts)
    level = math.max(0, level - (now - ts) * L / P)
    local ttl = whole_ms(math.max(B, level) * P / L + MARGIN)
    if c > B then
      return decision(NEVER, B - level, level * P / L, 0), nil, nil, ttl
    end
    if level + c <= B + EPSILON then
      local filled = math.min(B, level + c)
      return decision(ALLOW, B - filled, filled * P / L, 0), { filled, now }, nil, ttl
    end
    if penalty then
      level = math.max(level, math.min(B, level + c))
    end
    local d = decision(DENY, B - level, level * P / L, (level + c - B) * P / L)
    return d, nil, penalty and { level, now } or nil, ttl
  elseif algorithm == 4 then -- fixed window
    local s = read_state(key, 'v', 'w', 't')
    local count, window, ts = s[1], s[2], s[3]
    if count == nil or window == nil or ts == nil then
      count, window, ts = 0, math.floor(now / P), now
    end
    now = math.max(now, ts)
    local w = math.floor(now / P)
    if w ~= window then
      count, window = 0, w
    end
    local ends_in = (window + 1) * P - now
    local ttl = whole_ms(ends_in + MARGIN)
    if c > L then
      return decision(NEVER, L - count, ends_in, 0), nil, nil, ttl
    end
    if count + c <= L then
      local d = decision(ALLOW, L - (count + c), ends_in, 0)
      return d, { count + c, window, now }, nil, ttl
    end
    if penalty then
      count = math.max(count, math.min(L, count + c))
    end
    local d = decision(DENY, L - count, ends_in, ends_in)
    return d, nil, penalty and { count, window, now } or nil, ttl
  elseif algorithm == 5 then -- sliding window
    local s = read_state(key, 'p', 'v', 'w', 't')
    local prev, cur, window, ts = s[1], s[2], s[3], s[4]
    if prev == nil or cur == nil or window == nil or ts == nil then
      prev, cur, window, ts = 0, 0, math.floor(now / P), now
    end
    now = math.max(now, ts)
    local w = math.floor(now / P)
    if w == window + 1 then
      prev, cur = cur, 0
    elseif w > window + 1 then
      prev, cur = 0, 0
    end
    window = w
    local into = now - w * P
    local left_in_window = P - into
    local estimate = prev * (left_in_window / P) + cur
    local ttl = whole_ms(left_in_window + P + MARGIN)
    if c > L then
      local empty = window_reset(cur, prev, left_in_window, P)
      return decision(NEVER, math.max(0, L - estimate), empty, 0), nil, nil, ttl
    end
    if estimate + c <= L + EPSILON then
      local empty = window_reset(cur + c, prev, left_in_window, P)
      local d = decision(ALLOW, math.max(0, L - (estimate + c)), empty, 0)
      return d, { prev, cur + c, window, now }, nil, ttl
    end
    if penalty then
      cur = math.max(cur, math.min(L, cur + c))
    end
    estimate = prev * (left_in_window / P) + cur
    local retry
    if cur + c <= L and prev > 0 then
      retry = P - (L - cur - c) * P / prev - into
    elseif cur > 0 then
      retry = left_in_window + math.max(0, P - (L - c) * P / cur)
    else
      retry = left_in_window
    end
    local empty = window_reset(cur, prev, left_in_window, P)
    local d = decision(DENY, math.max(0, L - estimate), empty, retry)
    return d, nil, penalty and { prev, cur, window, now } or nil, ttl
  elseif algorithm == 6 then -- sliding log
    local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    absent[key] = newest[2] == nil
    if newest[2] then
      now = math.max(now, tonumber(newest[2]))
    end
    -- Live entries (time > now - P), oldest first.
    local raw = redis.call('ZRANGEBYSCORE', key, '(' .. fmt(now - P), '+inf', 'WITHSCORES')
    local entries, sum = {}, 0
    for i = 1, #raw, 2 do
      local cost = tonumber(string.match(raw[i], ':([^:]+)$'))
      entries[#entries + 1] = { tonumber(raw[i + 1]), cost }
      sum = sum + cost
    end
    local ttl = whole_ms(P + MARGIN)
    local function reset(list)
      if #list == 0 then
        return 0
      end
      return list[#list][1] + P - now
    end
    if c > L then
      return decision(NEVER, L - sum, reset(entries), 0), nil, nil, ttl
    end
    if sum + c <= L then
      entries[#entries + 1] = { now, c }
      local d = decision(ALLOW, L - (sum + c), reset(entries), 0)
      return d, { entry = { now, c } }, nil, ttl
    end
    local penalised = nil
    if penalty and L - sum > 0 then
      entries[#entries + 1] = { now, L - sum }
      penalised = { entry = { now, L - sum } }
      sum = L
    end
    local freed, retry = 0, 0
    for i = 1, #entries do
      freed = freed + entries[i][2]
      if sum - freed + c <= L then
        retry = entries[i][1] + P - now
        break
      end
    end
    return decision(DENY, L - sum, reset(entries), retry), nil, penalised, ttl
  elseif algorithm == 7 then -- concurrency
    local raw = redis.call('ZRANGE', key, 0, -1, 'WITHSCORES')
    absent[key] = raw[1] == nil
    -- Live leases (expiry > now), soonest first.
    local live, used, last = {}, 0, now
    for i = 1, #raw, 2 do
      local expires = tonumber(raw[i + 1])
      if expires > now then
        local slots = tonumber(string.match(raw[i], ':([^:]+)$'))
        live[#live + 1] = { expires, slots }
        used = used + slots
        last = math.max(last, expires)
      end
    end
    local ttl = whole_ms(math.max(last - now, P) + MARGIN)
    if c > L then
      return decision(NEVER, L - used, last - now, 0), nil, nil, ttl
    end
    if used + c <= L then
      local d = decision(ALLOW, L - (used + c), math.max(last - now, P), 0)
      return d, { lease = { now + P, c } }, nil, ttl
    end
    local freed, retry = 0, 0
    for i = 1, #live do
      freed = freed + live[i][2]
      if used - freed + c <= L then
        retry = live[i][1] - now
        break
      end
    end
    return decision(DENY, L - used, last - now, retry), nil, nil, ttl
  end
end

-- The member of this check's lease, ending at `expires` and taking `slots`, in a
-- concurrency bucket. The time keeps it apart from an earlier lease of the same id (a
-- request_id used again after its record expired), which must still count.
local function lease_member(expires, slots)
  return lease_id .. ':' .. fmt(expires) .. ':' .. fmt(slots)
end

-- Writes a state of the first five algorithms as a hash, its fields named by how many
-- numbers it has (the header's State), with `call` (redis.call, or redis.pcall to get an
-- error back as a table), and returns HSET's reply.
local function write_hash(call, key, state)
  local n = #state
  if n == 2 then
    return call('HSET', key, 'v', fmt(state[1]), 't', fmt(state[2]))
  elseif n == 3 then
    return call('HSET', key, 'v', fmt(state[1]), 'w', fmt(state[2]), 't', fmt(state[3]))
  end
  return call('HSET', key, 'p', fmt(state[1]), 'v', fmt(state[2]), 'w', fmt(state[3]),
    't', fmt(state[4]))
end

local function write(key, algorithm, state, ttl, P)
  if algorithm == 7 then
    redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt(now))
    redis.call('ZADD', key, fmt(state.lease[1]), lease_member(state.lease[1], state.lease[2]))
  elseif algorithm == 6 then
    local time, cost = state.entry[1], state.entry[2]
    redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt(time - P))
    local k = redis.call('ZCOUNT', key, fmt(time), fmt(time))
    redis.call('ZADD', key, fmt(time), fmt(time) .. ':' .. k .. ':' .. fmt(cost))
  elseif packed then
    redis.call('SET', key, struct.pack(packing(#state), unpack(state)), 'PX', ttl)
    return
  else
    local reply = write_hash(redis.pcall, key, state)
    if type(reply) == 'table' then
      -- A packed string, under the hash layout, is written over; any other error is the
      -- check's (the read before it would have failed on a key of a third type).
      if not string.find(reply.err, 'WRONGTYPE', 1, true) then
        error(reply.err)
      end
      redis.call('DEL', key)
      write_hash(redis.call, key, state)
    end
  end
  redis.call('PEXPIRE', key, ttl)
end

-- How long a check's lease record lives: as long as the longest lease it lists.
local function lease_ttl(rules)
  local MARGIN = 1000
  local ttl = 0
  for i = 1, #rules do
    if rules[i].algorithm == 7 and rules[i].admitted then
      ttl = math.max(ttl, rules[i].P + MARGIN)
    end
  end
  return ttl
end

-- What phase 2 writes for a rule: its admitted state, or its penalty, or nothing. (Functions
-- are defined once a call, at the top: one defined inside check_one would be made again for
-- every check of a batch.)
local function to_write(r, allowed)
  local ALLOW = 1
  if allowed then
    return r.admitted
  elseif not r.shadow and r.d.v ~= ALLOW then
    return r.penalised
  end
  return nil
end

-- Decides one check: KEYS and ARGV as the header documents them (a batch passes each
-- check's own). `clock` gives Redis's time in ms when ARGV[1] is empty.
local function check_one(KEYS, ARGV, clock)
  local ALLOW, OVER_QUOTA = 1, 2
  -- The most index entries one call examines when it makes room.
  local PRUNE = 100
  local n = tonumber(ARGV[3])
  local dedup_ttl = tonumber(ARGV[2])
  local dedup_key = KEYS[n + 1]
  local dry_run = dedup_ttl < 0
  local reserve_ttl = tonumber(ARGV[7 + 7 * n] or '0') or 0
  lease_id = ARGV[8 + 7 * n]
  local lease_key = nil
  if lease_id then
    lease_key = KEYS[n + 4 + (reserve_ttl > 0 and 1 or 0)]
  end

  -- A check's own record is its caller's request_id's (a key of its own); a batch's record
  -- serves every other check.
  if dedup_ttl > 0 then
    if ARGV[4 + 7 * n] ~= '1' then
      error('a record of its own is a request_id\'s: ARGV[4+7n] must be 1 when ARGV[2] > 0')
    end
    local seen = redis.call('GET', dedup_key)
    if seen then
      local reply = decode_record(seen)
      reply[1] = 1
      return reply
    end
  end

  absent = {}
  if ARGV[1] ~= '' then
    now = tonumber(ARGV[1])
  else
    now = clock()
  end

  -- Phase 1: decide every rule, writing nothing.
  local rules, allowed = {}, true
  for i = 1, n do
    local base = 3 + (i - 1) * 7
    local algorithm = tonumber(ARGV[base + 1])
    local L, P, B = tonumber(ARGV[base + 2]), tonumber(ARGV[base + 3]), tonumber(ARGV[base + 4])
    local c = tonumber(ARGV[base + 5])
    local penalty, shadow = ARGV[base + 6] == '1', ARGV[base + 7] == '1'
    local d, admitted, penalised, ttl = decide_rule(algorithm, KEYS[i], L, P, B, c, now, penalty)
    if d.v ~= ALLOW and not shadow then
      allowed = false
    end
    rules[i] = { d = d, admitted = admitted, penalised = penalised, ttl = ttl,
                 algorithm = algorithm, P = P, shadow = shadow }
  end

  -- The quota: the keys this call would create, admitted only while the tenant's live keys
  -- stay within it.
  local quota = tonumber(ARGV[5 + 7 * n])
  if not dry_run and quota >= 0 then
    local index = KEYS[n + 3]
    local fresh = {}
    for i = 1, n do
      if to_write(rules[i], allowed) and absent[KEYS[i]] then
        fresh[#fresh + 1] = { KEYS[i], rules[i].ttl }
      end
    end
    if dedup_ttl > 0 then
      fresh[#fresh + 1] = { dedup_key, dedup_ttl }
    end
    if allowed and reserve_ttl > 0 then
      if redis.call('EXISTS', KEYS[n + 4]) == 0 then
        fresh[#fresh + 1] = { KEYS[n + 4], reserve_ttl }
      end
    end
    if allowed and lease_key and lease_ttl(rules) > 0 then
      if redis.call('EXISTS', lease_key) == 0 then
        fresh[#fresh + 1] = { lease_key, lease_ttl(rules) }
      end
    end
    if #fresh > 0 then
      -- Pruned once per clock: after a prune that found fewer than PRUNE entries due, none
      -- is due at this time (every entry scored since lies in the future).
      local seen_index = indexes[index]
      if not (seen_index and seen_index.clean and seen_index.at == now) then
        -- The prune and the count below see the entries of earlier checks.
        add_waiting(index)
        local due = redis.call('ZRANGEBYSCORE', index, '-inf', now, 'LIMIT', 0, PRUNE)
        local ended, alive = {}, {}
        -- Most due entries have ended: one EXISTS for them all says so, and only when some key
        -- lives on is each asked its PTTL (a call each), to move the living ones.
        if #due > 0 and redis.call('EXISTS', unpack(due)) == 0 then
          ended = due
        else
          for _, member in ipairs(due) do
            local left = redis.call('PTTL', member)
            if left > 0 then
              alive[#alive + 1] = now + left
              alive[#alive + 1] = member
            else
              ended[#ended + 1] = member
            end
          end
        end
        if #ended > 0 then
          redis.call('ZREM', index, unpack(ended))
        end
        if #alive > 0 then
          redis.call('ZADD', index, unpack(alive))
        end
        seen_index = { at = now, clean = #due < PRUNE, live = redis.call('ZCARD', index),
                       waiting = {} }
        indexes[index] = seen_index
      end
      if seen_index.live + #fresh > quota then
        -- A waiting entry may already have been in the index: count exactly before refusing.
        add_waiting(index)
      end
      local live = seen_index.live
      if live + #fresh > quota then
        local first = redis.call('ZRANGE', index, 0, 0, 'WITHSCORES')
        local wait = 1000
        if first[2] then
          wait = math.max(1, tonumber(first[2]) - now)
        end
        return { OVER_QUOTA, now, live, whole_ms(wait) }
      end
      local waiting = seen_index.waiting
      for _, key in ipairs(fresh) do
        waiting[#waiting + 1] = now + key[2]
        waiting[#waiting + 1] = key[1]
      end
      seen_index.live = live + #fresh
    end
  end

  -- Phase 2: commit all admitted consumption, or only the penalties (nothing in a dry run).
  for i = 1, (dry_run and 0 or n) do
    local r = rules[i]
    local state = to_write(r, allowed)
    if state then
      write(KEYS[i], r.algorithm, state, r.ttl, r.P)
    end
  end

  -- A reservation: what each written rule was charged, and where, for lua/settle.lua.
  if allowed and not dry_run and reserve_ttl > 0 then
    local charged = {}
    for i = 1, n do
      local r = rules[i]
      if r.admitted then
        local mark = 0
        if r.algorithm == 6 then
          mark = r.admitted.entry[1]
        elseif r.algorithm == 4 then
          mark = r.admitted[2]
        elseif r.algorithm == 5 then
          mark = r.admitted[3]
        end
        local base = 3 + (i - 1) * 7
        -- Written as strings of their digits, as a check's own call passes them (a batch's
        -- arrive as numbers, which cjson would print with 14 significant digits only).
        charged[#charged + 1] = { k = KEYS[i], a = r.algorithm, l = fmt(tonumber(ARGV[base + 2])),
          p = fmt(tonumber(ARGV[base + 3])), b = fmt(tonumber(ARGV[base + 4])),
          c = fmt(tonumber(ARGV[base + 5])), m = fmt(mark) }
      end
    end
    local record = KEYS[n + 4]
    -- cjson writes an empty table as {}: a reservation of shadow rules that all denied is [].
    local encoded = #charged > 0 and cjson.encode(charged) or '[]'
    -- A request_id used again after its record expired names the same reservation: it starts
    -- afresh, not settled.
    redis.call('DEL', record)
    redis.call('HSET', record, 'r', encoded, 'e', ARGV[8])
    redis.call('PEXPIRE', record, reserve_ttl)
  end

  -- A lease: the member each concurrency bucket holds for it, for lua/release.lua.
  if allowed and not dry_run and lease_key then
    local held = {}
    for i = 1, n do
      local r = rules[i]
      if r.algorithm == 7 and r.admitted then
        held[#held + 1] = { k = KEYS[i], m = lease_member(r.admitted.lease[1], r.admitted.lease[2]) }
      end
    end
    if #held > 0 then
      redis.call('DEL', lease_key)
      redis.call('HSET', lease_key, 'r', cjson.encode(held))
      redis.call('PEXPIRE', lease_key, lease_ttl(rules))
    end
  end

  local reply = { 0, now, allowed and 1 or 0 }
  for i = 1, n do
    local d = rules[i].d
    reply[#reply + 1] = d.v
    reply[#reply + 1] = fmt(d.rem)
    reply[#reply + 1] = d.reset
    reply[#reply + 1] = d.retry
  end

  if dedup_ttl > 0 then
    redis.call('SET', dedup_key, cjson.encode(reply), 'PX', dedup_ttl)
  end

  -- Active keys: the buckets this instance has not marked this minute go into the tenant's
  -- HyperLogLog of the minute with the batch's others, at its end.
  if not dry_run then
    local marks = ARGV[6 + 7 * n] or ''
    local active_key = KEYS[n + 2]
    local unmarked = gathered[active_key] or {}
    local before = #unmarked
    for i = 1, n do
      if string.sub(marks, i, i) ~= '0' then
        unmarked[#unmarked + 1] = KEYS[i]
      end
    end
    if before == 0 and #unmarked > 0 then
      gathered[active_key] = unmarked
      gathered.order[#gathered.order + 1] = active_key
    end
  end
  return reply
end

-- Redis's time in ms, read once a call: the checks of a batch are decided at one instant.
local time_ms = nil
local function redis_time()
  if not time_ms then
    local t = redis.call('TIME')
    time_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return time_ms
end

if ARGV[1] ~= 'batch' and ARGV[1] ~= 'resend' then
  return redis.error_reply('check.lua takes a batch: ARGV[1] is batch or resend (its header)')
end

-- A batch (see the header). A resend looks for the call's own record first, so that a resend
-- after a lost reply returns every check's first decision; a first send has none to find.
local record, field, record_ttl = KEYS[1], ARGV[2], tonumber(ARGV[3])
if ARGV[1] == 'resend' then
  local seen = redis.call('HGET', record, field)
  if seen then
    local replies = decode_record(seen)
    for _, reply in ipairs(replies) do
      if reply[1] == 0 then
        reply[1] = 1
      end
    end
    return encode_record(replies)
  end
end

packed = ARGV[6] ~= 'hash'
local key_counts = cmsgpack.unpack(ARGV[4])
local checks = cmsgpack.unpack(ARGV[5])
local replies = {}
gathered = { order = {} }
local key_at = 1
for j = 1, #key_counts do
  local key_count = key_counts[j]
  -- Built at its size in one step: filled one by one, a table grows (and is copied) five times.
  local keys = { unpack(KEYS, key_at + 1, key_at + key_count) }
  key_at = key_at + key_count
  -- A check that fails (a key of the wrong type) is that check's failure, not the batch's.
  local ok, reply = pcall(check_one, keys, checks[j], redis_time)
  if not ok then
    if type(reply) == 'table' and reply.err then
      reply = reply.err
    end
    reply = { FAILED, tostring(reply) }
  end
  replies[j] = reply
end

-- One ZADD per live-key index for the keys the whole batch created, not one per check.
add_all_waiting()
-- One PFADD per HyperLogLog for the whole batch, not one per check.
for _, active_key in ipairs(gathered.order) do
  mark_active(active_key, gathered[active_key])
end
local encoded = encode_record(replies)
redis.call('HSET', record, field, encoded)
-- Every write to this hash asks for the same TTL (it is in the key's name), at a Redis time no
-- earlier than the last: the expiry only moves later, and every field lives its TTL.
redis.call('PEXPIRE', record, record_ttl)
return encoded
