-- Per-subject overrides of a rule: another limit (and optionally period and burst) for one
-- subject, or for every subject starting with a prefix (`subject` ending in `*`). An exact
-- subject beats the longest matching prefix, which beats the rule. At most 100 per rule (the
-- admin service counts them in the transaction that adds one, after locking the tenant).
CREATE TABLE subject_overrides (
    id          TEXT PRIMARY KEY,
    tenant_id   TEXT NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    rule_id     TEXT NOT NULL REFERENCES rules (id) ON DELETE CASCADE,
    subject     TEXT NOT NULL,
    limit_count BIGINT NOT NULL CHECK (limit_count > 0),
    -- NULL: the rule's period.
    period_ms   BIGINT CHECK (period_ms IS NULL OR period_ms BETWEEN 1 AND 31622400000),
    -- NULL: equal to the override's limit.
    burst       BIGINT CHECK (burst IS NULL OR burst > 0),
    created_at  BIGINT NOT NULL,
    updated_at  BIGINT NOT NULL,
    UNIQUE (rule_id, subject)
);
CREATE INDEX subject_overrides_tenant ON subject_overrides (tenant_id);
