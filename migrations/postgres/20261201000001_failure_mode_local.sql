-- A third failure mode: `local` keeps limiting in each instance's memory, with an equal share
-- of the limit, while Redis cannot decide. The column's CHECK grows to allow it.
ALTER TABLE rules DROP CONSTRAINT rules_failure_mode_check;
ALTER TABLE rules ADD CONSTRAINT rules_failure_mode_check
    CHECK (failure_mode IN ('closed', 'open', 'local'));
