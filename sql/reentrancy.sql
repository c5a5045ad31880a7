-- Session locks stack like pg_advisory_lock: n acquisitions need n releases,
-- and there is one znode however often a lock is held.
SELECT zk_lock_acquire('re'), zk_lock_acquire('re'), zk_lock_try_acquire('re');
SELECT * FROM my_locks;
SELECT znode AS first_znode FROM zk_locks WHERE name = 're' \gset
SELECT zk_lock_release('re');
SELECT hold_count, znode = :'first_znode' AS same_znode FROM zk_locks WHERE name = 're';
SELECT zk_lock_release('re');
SELECT in_new_session($$SELECT zk_lock_try_acquire('re')::text$$) AS other_try_still_held;
SELECT zk_lock_release('re');
SELECT in_new_session($$SELECT zk_lock_try_acquire('re')::text$$) AS other_try_after_last;
SELECT zk_lock_release('re');

-- A session lock and a transaction lock on one name share one znode.
BEGIN;
SELECT zk_lock_acquire('both');
SELECT zk_lock_xact_acquire('both');
SELECT * FROM my_locks;
SELECT count(DISTINCT znode) AS znodes FROM zk_locks WHERE name = 'both';
-- The session hold can go; the node stays for the transaction hold.
SELECT zk_lock_release('both');
SELECT name, scope, hold_count FROM my_locks;
SELECT in_new_session($$SELECT zk_lock_try_acquire('both')::text$$) AS other_try_in_xact;
COMMIT;
SELECT * FROM my_locks;
SELECT in_new_session($$SELECT zk_lock_try_acquire('both')::text$$) AS other_try_after_commit;

-- The transaction hold ends; the committed session hold stays.
BEGIN;
SELECT zk_lock_xact_acquire('mixed'), zk_lock_acquire('mixed');
COMMIT;
SELECT name, scope, hold_count FROM my_locks;
SELECT zk_lock_release('mixed');
SELECT * FROM my_locks;

-- release_all counts locks, not holds, and leaves transaction locks alone.
SELECT zk_lock_acquire('ra1'), zk_lock_acquire('ra1'), zk_lock_acquire('ra2');
BEGIN;
SELECT zk_lock_xact_acquire('ra3');
SELECT zk_lock_release_all();
SELECT name, scope, hold_count FROM my_locks;
COMMIT;
SELECT zk_lock_release_all();
SELECT * FROM my_locks;
