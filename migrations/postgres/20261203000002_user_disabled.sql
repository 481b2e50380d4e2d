-- An operator can disable a console user: NULL while the user may sign in, else when it was
-- disabled (Unix milliseconds). Disabling also ends the user's sessions.
ALTER TABLE users ADD COLUMN disabled_at BIGINT;
