-- A seventh algorithm: `concurrency` limits the requests in flight (each holds a lease until
-- it is released, or for period_ms at most). SQLite cannot change a CHECK in place, so the
-- table is rebuilt with the same rows. Dropping the old table deletes the rows that reference
-- it (subject_overrides, ON DELETE CASCADE, with foreign keys on), so those are kept aside
-- first and put back after.
CREATE TEMP TABLE overrides_kept AS SELECT * FROM subject_overrides;
CREATE TABLE rules_new (
    id           TEXT PRIMARY KEY,
    tenant_id    TEXT NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    -- Reported as the `policy` that decided a check.
    name         TEXT NOT NULL,
    -- exact and prefix match the check's route; default applies when no route rule matches;
    -- all applies to every check of the tenant in addition to the route rule; descriptor
    -- matches an Envoy descriptor.
    match_kind   TEXT NOT NULL CHECK (match_kind IN ('exact', 'prefix', 'default', 'all', 'descriptor')),
    route        TEXT,
    -- tenant: one bucket for the whole tenant; subject: one bucket per caller-supplied subject.
    scope        TEXT NOT NULL CHECK (scope IN ('tenant', 'subject')),
    algorithm    TEXT NOT NULL CHECK (algorithm IN ('token_bucket', 'gcra', 'leaky_bucket',
                                                    'fixed_window', 'sliding_window', 'sliding_log',
                                                    'concurrency')),
    limit_count  BIGINT NOT NULL CHECK (limit_count > 0),
    -- From 1 ms to 366 days.
    period_ms    BIGINT NOT NULL CHECK (period_ms BETWEEN 1 AND 31622400000),
    -- Capacity of the bucket algorithms; NULL means "equal to limit".
    burst        BIGINT CHECK (burst IS NULL OR burst > 0),
    -- Whether a denied request still charges the bucket.
    penalty      BOOLEAN NOT NULL DEFAULT FALSE,
    -- What to answer when Redis cannot decide: closed = 503, open = allow and count,
    -- local = decide in this instance with limit / live instances.
    failure_mode TEXT NOT NULL DEFAULT 'closed' CHECK (failure_mode IN ('closed', 'open', 'local')),
    -- Evaluated and counted as "would deny", never enforced.
    shadow       BOOLEAN NOT NULL DEFAULT FALSE,
    enabled      BOOLEAN NOT NULL DEFAULT TRUE,
    created_at   BIGINT NOT NULL,
    updated_at   BIGINT NOT NULL,
    -- A descriptor rule's entries: a JSON array of {"key", "value"?} objects.
    descriptor   TEXT,
    -- Whether a gRPC request may set a descriptor rule's limit itself.
    allow_override BOOLEAN NOT NULL DEFAULT FALSE,
    UNIQUE (tenant_id, name),
    CHECK ((match_kind IN ('exact', 'prefix')) = (route IS NOT NULL)),
    CHECK ((match_kind = 'descriptor') = (descriptor IS NOT NULL))
);
INSERT INTO rules_new (id, tenant_id, name, match_kind, route, scope, algorithm, limit_count,
                       period_ms, burst, penalty, failure_mode, shadow, enabled, created_at,
                       updated_at, descriptor, allow_override)
    SELECT id, tenant_id, name, match_kind, route, scope, algorithm, limit_count, period_ms,
           burst, penalty, failure_mode, shadow, enabled, created_at, updated_at, descriptor,
           allow_override
    FROM rules;
DROP TABLE rules;
ALTER TABLE rules_new RENAME TO rules;
CREATE INDEX rules_tenant ON rules (tenant_id);
INSERT INTO subject_overrides SELECT * FROM overrides_kept;
DROP TABLE overrides_kept;
