-- The same with a higher token each time (a new holder per transaction:
-- the resource's row is updated).
BEGIN;
SELECT zk_lock_fence('bench-fence-rising', nextval('bench_fence_tokens'));
INSERT INTO bench_fenced (v) VALUES (1);
COMMIT;
