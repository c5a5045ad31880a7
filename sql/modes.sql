-- Shared locks, semaphores and the cluster-wide queue view.

-- Readers share; a writer waits for them, and they for a writer.
SELECT zk_lock_acquire_shared('rw'), zk_lock_acquire_shared('rw');
SELECT in_other_session($$SELECT zk_lock_try_acquire_shared('rw')::text$$) AS other_reader;
SELECT in_new_session($$SELECT zk_lock_try_acquire('rw')::text$$) AS writer;
SELECT * FROM my_locks;
-- Upgrading would wait for ourselves.
SELECT sqlstate_of($$SELECT zk_lock_acquire('rw')$$);
-- A try never waits: it is not granted, and nothing is left behind.
SELECT zk_lock_try_acquire('rw') AS upgrade_tried, zk_lock_xact_try_acquire('rw') AS xact_upgrade_tried;
-- timeout_ms 0 is a try; any other timeout waits, so it would wait for ourselves.
SELECT zk_lock_acquire('rw', 0) AS upgrade_timeout_0;
SELECT sqlstate_of($$SELECT zk_lock_acquire('rw', 100)$$) AS upgrade_timeout_100;
SELECT * FROM my_locks;
SELECT zk_lock_release_shared('rw'), zk_lock_release_shared('rw'), zk_lock_release_shared('rw');
SELECT in_other_session($$SELECT zk_lock_release_shared('rw')::text$$) AS other_released;
SELECT in_new_session($$SELECT zk_lock_try_acquire('rw')::text$$) AS writer_now;

-- A writer excludes readers; it may read-lock what it holds (downgrade).
SELECT zk_lock_acquire('w');
SELECT in_new_session($$SELECT zk_lock_try_acquire_shared('w')::text$$) AS reader;
SELECT zk_lock_try_acquire_shared('w') AS own_reader;
SELECT zk_lock_release('w');
SELECT in_new_session($$SELECT zk_lock_try_acquire('w')::text$$) AS writer_while_read;
SELECT in_new_session($$SELECT zk_lock_try_acquire_shared('w')::text$$) AS reader_while_read;
SELECT zk_lock_release_shared('w');
-- Exclusive and shared releases are separate.
SELECT zk_lock_release_shared('nothing');
SELECT zk_lock_acquire('x-only');
SELECT zk_lock_release_shared('x-only');
SELECT zk_lock_release('x-only');

-- Transaction-scoped shared locks end with the transaction.
BEGIN;
SELECT zk_lock_xact_acquire_shared('xs'), zk_lock_xact_try_acquire_shared('xs');
SELECT in_other_session($$SELECT zk_lock_xact_try_acquire_shared('xs')::text$$) AS other_reader;
SELECT * FROM my_locks;
SELECT zk_lock_release_shared('xs');
COMMIT;
SELECT * FROM my_locks;
SELECT in_new_session($$SELECT zk_lock_try_acquire('xs')::text$$) AS writer_after_commit;
-- ... and an aborted acquisition is undone.
BEGIN;
SELECT zk_lock_acquire_shared('xa');
ROLLBACK;
SELECT * FROM my_locks;

-- Semaphores: at most permits holders; the same permits everywhere.
SELECT zk_semaphore_acquire('sem', 2);
SELECT in_other_session($$SELECT zk_semaphore_acquire('sem', 2, 0)::text$$) AS second;
SELECT in_new_session($$SELECT zk_semaphore_acquire('sem', 2, 0)::text$$) AS third;
SELECT in_new_session($$SELECT zk_semaphore_acquire('sem', 2, 200)::text$$) AS third_waits;
SELECT sqlstate_of($$SELECT zk_semaphore_acquire('sem', 3)$$) AS own_other_permits;
SELECT in_new_session($$SELECT sqlstate_of('SELECT zk_semaphore_acquire(''sem'', 5, 0)')$$) AS other_permits;
SELECT zk_semaphore_acquire('sem', 2) AS reentrant;
SELECT * FROM my_locks;
SELECT zk_semaphore_release('sem'), zk_semaphore_release('sem'), zk_semaphore_release('sem');
SELECT in_new_session($$SELECT zk_semaphore_acquire('sem', 2, 0)::text$$) AS third_now;
SELECT in_other_session($$SELECT zk_semaphore_release('sem')::text$$) AS other_released;
SELECT sqlstate_of($$SELECT zk_semaphore_acquire('sem', 0)$$) AS zero,
       sqlstate_of($$SELECT zk_semaphore_acquire('sem', NULL)$$) AS null_permits,
       sqlstate_of($$SELECT zk_semaphore_acquire('sem', 1, -1)$$) AS negative_timeout;
-- Semaphores are released on abort too.
BEGIN;
SELECT zk_semaphore_acquire('sem-abort', 1);
ROLLBACK;
SELECT in_new_session($$SELECT zk_semaphore_acquire('sem-abort', 1, 0)::text$$) AS free_after_abort;

-- Who holds and waits, cluster-wide.
SELECT zk_lock_acquire('q'), zk_lock_acquire_shared('q2');
SELECT in_other_session($$SELECT zk_lock_acquire_shared('q2')::text$$) AS other_reader;
SELECT in_other_session($$SELECT zk_semaphore_acquire('q3', 1)::text$$) AS other_sem;
SELECT lock_name, position, mode, holding, cluster_name IS NOT NULL AS has_cluster,
       host_port LIKE '%:%' AS has_host_port, pid = pg_backend_pid() AS mine,
       database = current_database() AS same_db, usename = current_user AS same_user,
       requested_at <= now() AS has_time, token > 0 AS has_token,
       znode LIKE '/zklock_regress/' || lock_name || '/%' AS znode_below_root
  FROM zk_cluster_locks
 ORDER BY lock_name, position;
SELECT lock_name, position, mode, holding FROM zk_lock_holders('q2');
SELECT count(*) FROM zk_lock_holders('nobody-holds-this');
SELECT in_other_session($$SELECT zk_semaphore_release('q3')::text$$) AS other_sem_released;
-- Releases session locks of every mode.
SELECT in_other_session($$SELECT zk_lock_release_all()::text$$) AS other_released;
SELECT zk_lock_release_all();
SELECT count(*) FROM zk_cluster_locks;

-- A lock and a semaphore of one name are separate things: both are listed,
-- each queue numbered from 1.
SELECT zk_lock_acquire('both'), zk_semaphore_acquire('both', 2);
SELECT in_other_session($$SELECT zk_semaphore_acquire('both', 2)::text$$) AS other_sem;
SELECT position, mode, holding, pid = pg_backend_pid() AS mine
  FROM zk_lock_holders('both') ORDER BY mode, position;
SELECT mode, count(*) FROM zk_cluster_locks WHERE lock_name = 'both' GROUP BY mode ORDER BY mode;
SELECT mode, info->>'mode' AS info_mode FROM zk_lock_queue('both') ORDER BY mode, position;
SELECT in_other_session($$SELECT zk_semaphore_release('both')::text$$) AS other_sem_released;
SELECT zk_lock_release('both'), zk_semaphore_release('both');

-- Exclusive nodes named for Curator's read-write lock.
SET zklock.exclusive_naming = readwrite;
SELECT zk_lock_acquire('curator-rw');
SELECT name, mode, znode FROM my_locks;
SELECT zk_lock_release('curator-rw');
RESET zklock.exclusive_naming;
SELECT sqlstate_of($$SET zklock.exclusive_naming = 'other'$$);
SELECT in_other_session($$SELECT 'done'$$), dblink_disconnect('other');
