-- Per-tenant quotas set by operators. A tenant without a row (or a NULL column) has the
-- instance's defaults (see server/src/admin/quotas.rs). They are counted inside the
-- transaction that adds a rule or a key, after the tenant's row is locked.
CREATE TABLE tenant_quotas (
    tenant_id  TEXT PRIMARY KEY REFERENCES tenants (id) ON DELETE CASCADE,
    -- The most rules the tenant may have.
    max_rules  INTEGER CHECK (max_rules IS NULL OR max_rules >= 0),
    -- The most keys (check and admin) the tenant may hold that are neither revoked nor expired.
    max_keys   INTEGER CHECK (max_keys IS NULL OR max_keys >= 0),
    updated_at BIGINT NOT NULL
);
