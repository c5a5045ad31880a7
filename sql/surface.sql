-- The server's ZooKeeper session, held by the session worker, is there
-- before this backend's first call; it holds none of this backend's locks.
SELECT state, session_id ~ '^0x[0-9a-f]+$' AS has_id, locks FROM zk_session();

-- Every SQL function once, on free locks.
SELECT zk_lock_acquire('surface');
SELECT state, session_id ~ '^0x[0-9a-f]+$' AS has_id, timeout_ms,
       server LIKE '127.0.0.1:%' AS server_known, since_contact_ms, locks
  FROM zk_session();
SELECT * FROM my_locks;
SELECT zk_lock_token('surface') > 0 AS token_known,
       zk_lock_token('not-held') IS NULL AS token_null_when_not_held;

-- Another session cannot take it, neither by try nor with a timeout.
SELECT in_new_session($$SELECT zk_lock_try_acquire('surface')::text$$) AS other_try;
SELECT in_new_session($$SELECT zk_lock_acquire('surface', 200)::text$$) AS other_timed;
SELECT in_new_session($$SELECT zk_lock_xact_try_acquire('surface')::text$$) AS other_xact_try;

SELECT zk_lock_release('surface');
SELECT * FROM my_locks;
SELECT state, locks FROM zk_session();
-- Released: another session gets it at once.
SELECT in_new_session($$SELECT zk_lock_try_acquire('surface')::text$$) AS other_try;

-- try_acquire and timeouts on a free lock.
SELECT zk_lock_try_acquire('surface');
SELECT zk_lock_acquire('surface2', 0), zk_lock_acquire('surface3', 1000);
SELECT name, scope, hold_count FROM my_locks;
SELECT zk_lock_release_all();
SELECT * FROM my_locks;

-- Release of what is not held.
SELECT zk_lock_release('never-held');

-- Transaction locks go with the transaction.
BEGIN;
SELECT zk_lock_xact_acquire('surface-x');
SELECT zk_lock_xact_try_acquire('surface-y');
SELECT name, scope, hold_count FROM my_locks;
SELECT in_new_session($$SELECT zk_lock_try_acquire('surface-x')::text$$) AS other_try;
COMMIT;
SELECT * FROM my_locks;
SELECT in_new_session($$SELECT zk_lock_try_acquire('surface-x')::text$$) AS other_try;

-- Fencing tokens grow across successive holders, also in other sessions.
SELECT zk_lock_acquire('fence');
SELECT zk_lock_token('fence') AS t1 \gset
SELECT zk_lock_release('fence');
SELECT in_new_session($$SELECT zk_lock_acquire('fence')::text || ' ' || zk_lock_token('fence')$$) AS other \gset
SELECT zk_lock_acquire('fence');
SELECT zk_lock_token('fence') AS t3 \gset
SELECT :t1 < split_part(:'other', ' ', 2)::bigint AS grows_1,
       split_part(:'other', ' ', 2)::bigint < :t3 AS grows_2;
SELECT zk_lock_release('fence');
