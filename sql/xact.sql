-- A session lock acquired in a transaction that aborts is released.
BEGIN;
SELECT zk_lock_acquire('x-abort');
SELECT name, scope, hold_count FROM my_locks;
ROLLBACK;
SELECT * FROM my_locks;
SELECT in_new_session($$SELECT zk_lock_try_acquire('x-abort')::text$$) AS free_after_abort;

-- Committed, it stays until released.
BEGIN;
SELECT zk_lock_acquire('x-commit');
COMMIT;
SELECT name, scope, hold_count FROM my_locks;
SELECT in_new_session($$SELECT zk_lock_try_acquire('x-commit')::text$$) AS other_try;

-- Only the holds the aborted transaction added are undone.
BEGIN;
SELECT zk_lock_acquire('x-commit');
SELECT hold_count FROM zk_locks WHERE name = 'x-commit';
ROLLBACK;
SELECT hold_count FROM zk_locks WHERE name = 'x-commit';
SELECT zk_lock_release('x-commit');

-- Savepoints: rolling back undoes what was acquired since.
BEGIN;
SELECT zk_lock_acquire('sp-outer');
SAVEPOINT s1;
SELECT zk_lock_acquire('sp-inner'), zk_lock_acquire('sp-outer'), zk_lock_xact_acquire('sp-x');
SELECT name, scope, hold_count FROM my_locks;
ROLLBACK TO SAVEPOINT s1;
SELECT name, scope, hold_count FROM my_locks;
SAVEPOINT s2;
SELECT zk_lock_acquire('sp-kept');
RELEASE SAVEPOINT s2;
COMMIT;
SELECT name, scope, hold_count FROM my_locks;
SELECT in_new_session($$SELECT zk_lock_try_acquire('sp-inner')::text$$) AS inner_free,
       in_new_session($$SELECT zk_lock_try_acquire('sp-x')::text$$) AS xact_free,
       in_new_session($$SELECT zk_lock_try_acquire('sp-kept')::text$$) AS kept_taken;
SELECT zk_lock_release_all();

-- A released savepoint's acquisitions are undone when an outer level aborts.
BEGIN;
SAVEPOINT a;
SAVEPOINT b;
SELECT zk_lock_acquire('nested');
RELEASE SAVEPOINT b;
ROLLBACK TO SAVEPOINT a;
SELECT * FROM my_locks;
COMMIT;

-- Acquire and release within one aborted transaction: nothing to undo.
SELECT zk_lock_acquire('pre');
BEGIN;
SELECT zk_lock_acquire('pre'), zk_lock_release('pre'), zk_lock_release('pre');
ROLLBACK;
SELECT * FROM my_locks;
SELECT in_new_session($$SELECT zk_lock_try_acquire('pre')::text$$) AS pre_free;

-- PL/pgSQL exception blocks are subtransactions too.
DO $$
BEGIN
  BEGIN
    PERFORM zk_lock_acquire('plpgsql');
    RAISE EXCEPTION 'boom';
  EXCEPTION WHEN OTHERS THEN
    NULL;
  END;
  PERFORM zk_lock_acquire('plpgsql-kept');
END $$;
SELECT name, scope, hold_count FROM my_locks;
SELECT zk_lock_release('plpgsql-kept');

-- Transaction locks cannot be released by hand.
BEGIN;
SELECT zk_lock_xact_acquire('xl');
SELECT zk_lock_release('xl');
SELECT name, scope, hold_count FROM my_locks;
COMMIT;
SELECT * FROM my_locks;

-- Procedures that commit: the lock of each transaction goes at its commit.
CREATE TABLE xact_log (i int, free_elsewhere text);
CREATE PROCEDURE xact_steps() LANGUAGE plpgsql AS $$
BEGIN
  FOR i IN 1..3 LOOP
    PERFORM zk_lock_xact_acquire('proc');
    INSERT INTO xact_log
      VALUES (i, in_new_session($q$SELECT zk_lock_try_acquire('proc')::text$q$));
    COMMIT;
  END LOOP;
END $$;
CALL xact_steps();
SELECT * FROM xact_log ORDER BY i;
SELECT * FROM my_locks;

-- A prepared transaction would outlive the session that owns the locks.
BEGIN;
SELECT zk_lock_xact_acquire('prep');
PREPARE TRANSACTION 'zk';
SELECT * FROM my_locks;
BEGIN;
SELECT zk_lock_acquire('prep-session');
PREPARE TRANSACTION 'zk';
SELECT * FROM my_locks;
SELECT in_new_session($$SELECT zk_lock_try_acquire('prep')::text$$) AS prep_free;
