-- A seventh algorithm: `concurrency` limits the requests in flight (each holds a lease until
-- it is released, or for period_ms at most). The column's CHECK grows to allow it.
ALTER TABLE rules DROP CONSTRAINT rules_algorithm_check;
ALTER TABLE rules ADD CONSTRAINT rules_algorithm_check
    CHECK (algorithm IN ('token_bucket', 'gcra', 'leaky_bucket', 'fixed_window',
                         'sliding_window', 'sliding_log', 'concurrency'));
