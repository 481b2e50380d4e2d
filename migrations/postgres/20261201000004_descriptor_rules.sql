-- Descriptor rules: `match_kind = 'descriptor'` matches an Envoy rate-limit descriptor
-- (gRPC ShouldRateLimit) with exactly the entry keys in `descriptor`, a JSON array of
-- {"key", "value"?} objects; such a rule has no route, and only such a rule has entries.
ALTER TABLE rules ADD COLUMN descriptor TEXT;
ALTER TABLE rules DROP CONSTRAINT rules_match_kind_check;
ALTER TABLE rules ADD CONSTRAINT rules_match_kind_check
    CHECK (match_kind IN ('exact', 'prefix', 'default', 'all', 'descriptor'));
ALTER TABLE rules ADD CONSTRAINT rules_descriptor_check
    CHECK ((match_kind = 'descriptor') = (descriptor IS NOT NULL));
