--[[
reset.lua: clear one bucket, and take it off its tenant's live-key index, as one step.

Why a script: the bucket and its index entry must go together. A bucket deleted while its
index entry stays would still count against the tenant's quota of live buckets until the
time it was scored with, so the subject's next check (which creates the bucket afresh) could
be refused as over the quota. Both keys carry the tenant's hash tag, so on a Redis Cluster
they share a slot and one node runs this.

KEYS[1]  the bucket, `sl:{<tenant>}:<rule>:<subject part>`
KEYS[2]  the tenant's live-key index, `slb:{<tenant>}` (see check.lua)

Returns 1 when the bucket existed, 0 when it did not.
]]

local existed = redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], KEYS[1])
return existed
