-- One uncontended cycle of a zklock transaction lock: COMMIT releases it.
BEGIN;
SELECT zk_lock_xact_acquire('bench-cycle');
COMMIT;
