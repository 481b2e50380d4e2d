-- The most live buckets (and records of callers' request_ids) a tenant may hold in the limiter
-- at once; NULL: the default (server/src/store/quotas.rs). lua/check.lua and the in-process
-- limiter refuse a check that would create one past it.
ALTER TABLE tenant_quotas ADD COLUMN max_live_buckets BIGINT
    CHECK (max_live_buckets IS NULL OR max_live_buckets >= 0);
