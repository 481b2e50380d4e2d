-- Whether a gRPC request may set a descriptor rule's limit itself (Envoy's per-descriptor
-- `limit` override). Only descriptor rules may allow it; the admin service validates that.
ALTER TABLE rules ADD COLUMN allow_override BOOLEAN NOT NULL DEFAULT FALSE;
