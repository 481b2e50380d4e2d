-- What a user is shown of their sessions: when each began, when it was last used, and the
-- client it began from (address and browser), so they can tell them apart and sign out the
-- others. NULL for sessions from before this migration.
ALTER TABLE sessions ADD COLUMN created_at BIGINT;
ALTER TABLE sessions ADD COLUMN last_seen_at BIGINT;
ALTER TABLE sessions ADD COLUMN client TEXT;
