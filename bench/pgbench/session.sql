-- One uncontended cycle of a zklock session lock; each statement commits.
SELECT zk_lock_acquire('bench-cycle');
SELECT zk_lock_release('bench-cycle');
