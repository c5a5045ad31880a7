-- A connection that takes a session lock and leaves holding it: pgbench -C.
SELECT zk_lock_acquire('bench-left-' || :client_id);
