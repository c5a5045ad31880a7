-- DISCARD ALL releases every zklock session lock and semaphore, and deletes
-- their nodes before it returns, as it releases advisory locks: a pooler's
-- next client must not inherit them.
SELECT zk_lock_acquire('d-excl'), zk_lock_acquire('d-excl'),
       zk_lock_acquire_shared('d-shared'), zk_semaphore_acquire('d-sem', 2),
       pg_advisory_lock(4242);
SELECT name, mode, scope, hold_count FROM my_locks;

-- The other variants keep them, as they keep advisory locks.
DISCARD PLANS;
DISCARD SEQUENCES;
DISCARD TEMP;
SELECT name, mode, hold_count FROM my_locks;
SELECT count(*) AS advisory FROM pg_locks
 WHERE locktype = 'advisory' AND pid = pg_backend_pid();

-- DISCARD ALL refuses to run in a transaction block, and then keeps them.
BEGIN;
DISCARD ALL;
ROLLBACK;
SELECT name, mode, hold_count FROM my_locks;
SELECT in_new_session($$SELECT zk_lock_try_acquire('d-excl')::text$$) AS other_try;

DISCARD ALL;
SELECT * FROM my_locks;
SELECT count(*) AS advisory FROM pg_locks
 WHERE locktype = 'advisory' AND pid = pg_backend_pid();
SELECT state, locks FROM zk_session();
-- Their nodes are gone already: free for everybody at once.
SELECT count(*) AS queued FROM zk_cluster_locks WHERE lock_name LIKE 'd-%';
SELECT in_new_session($$SELECT zk_lock_try_acquire('d-excl')::text$$) AS excl_free,
       in_new_session($$SELECT zk_lock_try_acquire('d-shared')::text$$) AS shared_free;

-- No transaction lock can be held then: DISCARD ALL is refused in a query
-- string of several statements too, and the lock goes with the transaction.
SELECT zk_lock_xact_acquire('d-excl') \; DISCARD ALL;
SELECT * FROM my_locks;
-- With nothing held, DISCARD ALL does nothing more.
DISCARD ALL;
SELECT * FROM my_locks;
-- Locks taken after DISCARD ALL work as before.
SELECT zk_lock_acquire('d-excl'), zk_lock_release('d-excl');
