-- One uncontended cycle of a zklock transaction lock in a transaction that
-- writes: the commit guard checks the session before COMMIT releases it.
BEGIN;
SELECT zk_lock_xact_acquire('bench-cycle');
INSERT INTO bench_writes VALUES (1);
COMMIT;
