-- Revocation: asking the holders of a lock to let go (zk_lock_request_release,
-- Curator's convention: __REVOKE__ in the holder's node), and hearing it
-- (zk_lock_release_requested, zk_locks, zk_lock_holders, zklock.revocable).

-- Nobody holds: nobody is asked.
SELECT zk_lock_request_release('revoke-free');
SELECT zk_lock_release_requested('revoke-free');

-- A holder in another session is asked; the request is recorded, nothing
-- is released, and the views still say who holds.
SELECT in_other_session($$SELECT zk_lock_acquire('revoke-a')::text$$);
SELECT in_other_session($$SELECT zk_lock_release_requested('revoke-a')::text$$) AS before;
SELECT lock_name, holding, release_requested FROM zk_lock_holders('revoke-a');
SELECT zk_lock_request_release('revoke-a');
SELECT wait_until($$SELECT bool_and(release_requested AND pid IS NOT NULL)
                      FROM zk_lock_holders('revoke-a')$$) AS written_back;
SELECT in_other_session($$SELECT zk_lock_release_requested('revoke-a')::text$$) AS after;
SELECT in_other_session($$SELECT string_agg(name || ' ' || state || ' ' || release_requested, ',') FROM zk_locks$$) AS other_locks;
SELECT lock_name, holding, usename = current_user AS same_user,
       database = current_database() AS same_database,
       application_name, requested_at IS NOT NULL AS has_requested_at,
       release_requested
  FROM zk_lock_holders('revoke-a');
SELECT info ? 'release_requested_at' AS recorded,
       (info->>'release_requested_at')::timestamptz >= (info->>'requested_at')::timestamptz AS after_request
  FROM zk_lock_queue('revoke-a');
SELECT lock_name, release_requested FROM zk_cluster_locks WHERE lock_name = 'revoke-a';
SELECT zk_lock_try_acquire('revoke-a') AS still_held_by_other;
-- Asked again: it is asked again, and says so once more.
SELECT zk_lock_request_release('revoke-a');
SELECT wait_until($$SELECT bool_and(release_requested AND pid IS NOT NULL)
                      FROM zk_lock_holders('revoke-a')$$) AS written_back_again;

-- Waiters are not asked: another session waits behind this one.
SELECT in_other_session($$SELECT zk_lock_release('revoke-a')::text$$) AS other_released;
SELECT zk_lock_acquire('revoke-b');
SELECT dblink_send_query('other', $$SELECT zk_lock_acquire('revoke-b')::text$$);
SELECT wait_until($$SELECT count(*) = 2 FROM zk_lock_holders('revoke-b')$$) AS other_waits;
SELECT zk_lock_request_release('revoke-b');
SELECT wait_until($$SELECT zk_lock_release_requested('revoke-b')$$) AS heard;
SELECT position, holding, release_requested FROM zk_lock_holders('revoke-b');
SELECT zk_lock_release('revoke-b');
SELECT * FROM dblink_get_result('other') AS t(granted text);
SELECT * FROM dblink_get_result('other') AS t(granted text);
SELECT in_other_session($$SELECT zk_lock_release_requested('revoke-b')::text || ' ' || zk_lock_release('revoke-b')::text$$) AS asked_and_released;

-- A new hold of the lock starts unasked.
SELECT zk_lock_acquire('revoke-a');
SELECT zk_lock_release_requested('revoke-a'), release_requested FROM zk_locks WHERE name = 'revoke-a';
SELECT zk_lock_request_release('revoke-a');
SELECT wait_until($$SELECT zk_lock_release_requested('revoke-a')$$) AS heard;
SELECT name, state, release_requested FROM zk_locks;
-- Asking whether a release was requested sends nothing to ZooKeeper.
SELECT wait_until($$SELECT bool_and(release_requested AND pid IS NOT NULL)
                      FROM zk_lock_holders('revoke-a')$$) AS written_back;
-- (the watch the write-back fired is set again by the end of the worker's
-- turn: a moment is enough)
SELECT pg_sleep(0.2);
SELECT creates + deletes + children_lists + gets + watches + syncs + sets AS requests
  FROM zk_session_stats \gset
SELECT count(*) FILTER (WHERE zk_lock_release_requested('revoke-a')) AS asked
  FROM generate_series(1, 1000);
SELECT creates + deletes + children_lists + gets + watches + syncs + sets = :requests AS no_request
  FROM zk_session_stats;
SELECT zk_lock_release('revoke-a');
SELECT zk_lock_release_requested('revoke-a') AS after_release;

-- Shared holders are all asked, and a semaphore's.
SELECT zk_lock_acquire_shared('revoke-s');
SELECT in_new_session($$SELECT zk_lock_acquire_shared('revoke-s')::text || ' ' || zk_lock_request_release('revoke-s')$$) AS two_shared;
SELECT wait_until($$SELECT zk_lock_release_requested('revoke-s')$$) AS heard_shared;
SELECT zk_lock_release_shared('revoke-s');
SELECT zk_semaphore_acquire('revoke-sem', 2);
SELECT zk_lock_request_release('revoke-sem');
SELECT wait_until($$SELECT zk_lock_release_requested('revoke-sem')$$) AS heard_semaphore;
SELECT zk_semaphore_release('revoke-sem');

-- zklock.revocable: the request interrupts the holder.  The other session
-- is idle when asked, so it hears it when its next statement starts: it
-- fails with 57Z01, its transaction rolls back and the session lock goes.
SHOW zklock.revocable;
SELECT in_other_session($$SELECT set_config('zklock.revocable', 'on', false)$$);
SELECT in_other_session($$SELECT zk_lock_acquire('revoke-r')::text$$);
SELECT zk_lock_request_release('revoke-r');
SELECT wait_until($$SELECT bool_and(release_requested AND pid IS NOT NULL)
                      FROM zk_lock_holders('revoke-r')$$) AS heard;
SELECT sqlstate_of($$SELECT * FROM dblink('other', 'SELECT 1') AS t(x int)$$);
SELECT in_other_session($$SELECT count(*)::text FROM zk_locks$$) AS other_holds;
SELECT zk_lock_try_acquire('revoke-r') AS free_now;
SELECT zk_lock_release('revoke-r');
-- Once per request: the session goes on normally afterwards.
SELECT in_other_session($$SELECT 'fine'$$);
-- A transaction lock goes with the rolled back transaction as well.
SELECT dblink_exec('other', 'BEGIN');
SELECT in_other_session($$SELECT zk_lock_xact_acquire('revoke-x')::text$$);
SELECT zk_lock_request_release('revoke-x');
SELECT wait_until($$SELECT bool_and(release_requested AND pid IS NOT NULL)
                      FROM zk_lock_holders('revoke-x')$$) AS heard;
SELECT sqlstate_of($$SELECT * FROM dblink('other', 'SELECT 1') AS t(x int)$$);
SELECT dblink_exec('other', 'ROLLBACK');
SELECT zk_lock_try_acquire('revoke-x') AS free_now;
SELECT zk_lock_release('revoke-x');
SELECT in_other_session($$SELECT set_config('zklock.revocable', 'off', false)$$);

-- Arguments.
SELECT zk_lock_request_release(NULL);
SELECT zk_lock_release_requested(NULL);
SELECT zk_lock_request_release('');
SELECT zk_lock_release_requested('');

SELECT dblink_disconnect('other');
DROP FUNCTION wait_until(text);

-- The statement hooks leave the error context stack as they found it: a
-- NOTICE or an error raised after the executor ran (AFTER triggers fire in
-- ExecutorFinish) once called a callback from a frame that had returned.
CREATE TABLE after_trigger_target (id int);
CREATE FUNCTION after_trigger_raises() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE NOTICE 'after trigger of % (%)', TG_OP, TG_LEVEL;
  IF TG_LEVEL = 'STATEMENT' THEN
    RAISE EXCEPTION 'after trigger refuses' USING ERRCODE = 'triggered_action_exception';
  END IF;
  RETURN NULL;
END $$;
CREATE TRIGGER after_row AFTER INSERT ON after_trigger_target
  FOR EACH ROW EXECUTE FUNCTION after_trigger_raises();
CREATE TRIGGER after_statement AFTER INSERT ON after_trigger_target
  FOR EACH STATEMENT EXECUTE FUNCTION after_trigger_raises();
INSERT INTO after_trigger_target VALUES (1);
SELECT sqlstate_of('INSERT INTO after_trigger_target VALUES (2)');
DROP TABLE after_trigger_target;
DROP FUNCTION after_trigger_raises();
