-- Each session names its user, so that a password change can end every other session of
-- that user at once (on every instance: sessions are read from here on each request).
ALTER TABLE sessions ADD COLUMN user_id TEXT;
UPDATE sessions SET user_id = data::json ->> 'user_id';
CREATE INDEX sessions_user_id ON sessions (user_id);
