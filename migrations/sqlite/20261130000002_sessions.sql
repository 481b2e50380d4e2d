-- Console sessions (tower-sessions records). The cookie carries the session id; only its
-- SHA-256 is stored here, so a copy of the database holds no usable session.
CREATE TABLE sessions (
    id_hash    TEXT PRIMARY KEY,
    -- The session's data as JSON (the signed-in user's id).
    data       TEXT NOT NULL,
    -- Unix milliseconds; an expired session is never loaded and is deleted periodically.
    expires_at BIGINT NOT NULL
);
CREATE INDEX sessions_expires_at ON sessions (expires_at);
