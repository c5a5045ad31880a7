-- The same with a fence of one holder's token (equal each time: the
-- resource's row is locked, not updated).
BEGIN;
SELECT zk_lock_fence('bench-fence-equal', 1000);
INSERT INTO bench_fenced (v) VALUES (1);
COMMIT;
