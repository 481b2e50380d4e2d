-- The first schema: tenants, the people and keys that act on them, their rules, and the
-- audit trail. Ids are UUID text and times are Unix milliseconds so that the same queries
-- run on PostgreSQL and SQLite (see migrations/README.md).

-- A tenant owns rules, keys and users. Its id is also the Redis hash tag of its buckets
-- (`sl:{<tenant_id>}:...`), so it must never change.
CREATE TABLE tenants (
    id          TEXT PRIMARY KEY,
    -- Shown in the console and unique so that operators can tell tenants apart.
    name        TEXT NOT NULL UNIQUE,
    -- A suspended tenant's check keys get 403 without touching Redis.
    status      TEXT NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'suspended')),
    created_at  BIGINT NOT NULL,
    updated_at  BIGINT NOT NULL
);

-- Console users. Operators act on every tenant; a tenant admin on exactly one.
CREATE TABLE users (
    id            TEXT PRIMARY KEY,
    email         TEXT NOT NULL UNIQUE,
    -- An argon2id PHC string; the password itself is never stored.
    password_hash TEXT NOT NULL,
    role          TEXT NOT NULL CHECK (role IN ('operator', 'tenant_admin')),
    tenant_id     TEXT REFERENCES tenants (id) ON DELETE CASCADE,
    created_at    BIGINT NOT NULL,
    CHECK ((role = 'operator' AND tenant_id IS NULL)
        OR (role = 'tenant_admin' AND tenant_id IS NOT NULL))
);

-- API keys. The browser (or the CLI) generates a key, shows it once and sends only its
-- SHA-256, so a database backup never contains a usable key.
CREATE TABLE api_keys (
    id           TEXT PRIMARY KEY,
    -- NULL only for operator keys, which act on every tenant.
    tenant_id    TEXT REFERENCES tenants (id) ON DELETE CASCADE,
    -- Check keys work only on /v1/check and admin keys only on /v1/admin: a key leaked
    -- from a service cannot raise its own limits.
    kind         TEXT NOT NULL CHECK (kind IN ('check', 'admin', 'operator')),
    name         TEXT NOT NULL,
    -- The first characters of the key, kept so that people can recognise it in lists.
    prefix       TEXT NOT NULL,
    -- Lower-case hex SHA-256 of the whole key: the lookup index of every check.
    hash         TEXT NOT NULL UNIQUE CHECK (length(hash) = 64),
    created_at   BIGINT NOT NULL,
    -- Set for keys created with an expiry and for the old key of a rotation (its grace period).
    expires_at   BIGINT,
    revoked_at   BIGINT,
    -- Written in batches, never on the check path.
    last_used_at BIGINT,
    -- The key that replaced this one in a rotation.
    replaced_by  TEXT REFERENCES api_keys (id),
    CHECK ((kind = 'operator') = (tenant_id IS NULL))
);
CREATE INDEX api_keys_tenant ON api_keys (tenant_id);

-- Rate-limit rules. Field names and meanings follow the public API's rule object.
CREATE TABLE rules (
    id           TEXT PRIMARY KEY,
    tenant_id    TEXT NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    -- Reported as the `policy` that decided a check.
    name         TEXT NOT NULL,
    -- exact and prefix match the check's route; default applies when no route rule matches;
    -- all applies to every check of the tenant in addition to the route rule.
    match_kind   TEXT NOT NULL CHECK (match_kind IN ('exact', 'prefix', 'default', 'all')),
    route        TEXT,
    -- tenant: one bucket for the whole tenant; subject: one bucket per caller-supplied subject.
    scope        TEXT NOT NULL CHECK (scope IN ('tenant', 'subject')),
    algorithm    TEXT NOT NULL CHECK (algorithm IN ('token_bucket', 'gcra', 'leaky_bucket',
                                                    'fixed_window', 'sliding_window', 'sliding_log')),
    limit_count  BIGINT NOT NULL CHECK (limit_count > 0),
    -- From 1 ms to 366 days.
    period_ms    BIGINT NOT NULL CHECK (period_ms BETWEEN 1 AND 31622400000),
    -- Capacity of the bucket algorithms; NULL means "equal to limit".
    burst        BIGINT CHECK (burst IS NULL OR burst > 0),
    -- Whether a denied request still charges the bucket.
    penalty      BOOLEAN NOT NULL DEFAULT FALSE,
    -- What to answer when Redis cannot decide: closed = 503, open = allow and count.
    failure_mode TEXT NOT NULL DEFAULT 'closed' CHECK (failure_mode IN ('closed', 'open')),
    -- Evaluated and counted as "would deny", never enforced.
    shadow       BOOLEAN NOT NULL DEFAULT FALSE,
    enabled      BOOLEAN NOT NULL DEFAULT TRUE,
    created_at   BIGINT NOT NULL,
    updated_at   BIGINT NOT NULL,
    UNIQUE (tenant_id, name),
    CHECK ((match_kind IN ('exact', 'prefix')) = (route IS NOT NULL))
);
CREATE INDEX rules_tenant ON rules (tenant_id);

-- Who did what, and when. Kept when a tenant is deleted, so no foreign key.
CREATE TABLE audit_events (
    id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- NULL for platform-wide actions such as creating a tenant.
    tenant_id  TEXT,
    -- "user:<email>", "key:<prefix>" or "cli".
    actor      TEXT NOT NULL,
    -- A dotted verb such as "rule.create" or "tenant.suspend".
    action     TEXT NOT NULL,
    target     TEXT,
    -- JSON with the details of the change.
    detail     TEXT NOT NULL DEFAULT '{}',
    at         BIGINT NOT NULL
);
CREATE INDEX audit_events_tenant_at ON audit_events (tenant_id, at);
CREATE INDEX audit_events_at ON audit_events (at);
