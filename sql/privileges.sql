-- The whole SQL surface as an ordinary LOGIN role.
SELECT current_user AS su \gset
CREATE ROLE zklock_user LOGIN;

\c - zklock_user
-- zklock is preloaded, so its settings are checked as they are set, before
-- any zklock call: the role cannot set this superuser-only one.
SET zklock.absolute_paths = '/zklock_regress/stolen';
SHOW zklock.absolute_paths;
SELECT zk_lock_try_acquire('priv-try');

-- Every lock function.
SELECT zk_lock_acquire('priv-a'), zk_lock_acquire('priv-a', 1000),
       zk_lock_acquire_shared('priv-s'), zk_lock_try_acquire_shared('priv-s2'),
       zk_semaphore_acquire('priv-sem', 3), zk_semaphore_acquire('priv-sem', 3, 0);
SELECT zk_lock_token('priv-a') > 0 AS has_token;
BEGIN;
SELECT zk_lock_xact_acquire('priv-x'), zk_lock_xact_try_acquire('priv-x2'),
       zk_lock_xact_acquire_shared('priv-xs'),
       zk_lock_xact_try_acquire_shared('priv-xs2');
SELECT name, mode, scope, hold_count, state FROM zk_locks ORDER BY 1, 2, 3;
COMMIT;
SELECT name, mode, scope, hold_count FROM zk_locks ORDER BY 1, 2, 3;
SELECT state, locks FROM zk_session();

-- Holders and queues.
SELECT lock_name, position, mode, holding, usename = current_user AS mine
  FROM zk_lock_holders('priv-a');
SELECT lock_name, mode, holding, usename = current_user AS mine
  FROM zk_cluster_locks WHERE lock_name LIKE 'priv-%' ORDER BY 1, 2;
SELECT lock_name, mode, holding, info->>'user' = current_user AS mine
  FROM zk_lock_queue('priv-s');

-- Statistics: readable by everybody; resetting them is for superusers.
SELECT sqlstate_of('SELECT * FROM zk_lock_stats');
SELECT sqlstate_of('SELECT * FROM zk_session_stats');
SELECT sqlstate_of('SELECT zk_lock_stats_reset()');

SELECT zk_lock_release('priv-a'), zk_lock_release('priv-a'),
       zk_lock_release_shared('priv-s'), zk_semaphore_release('priv-sem');
SELECT zk_lock_release('priv-a');
SELECT zk_lock_release_all();
SELECT * FROM zk_locks;

-- Asking holders to let go may interrupt other servers' jobs: superusers,
-- unless granted.  Whether one's own lock was asked for is everybody's.
SELECT sqlstate_of($$SELECT zk_lock_request_release('priv-rr')$$);
SELECT zk_lock_release_requested('priv-rr');
\c - :su
GRANT EXECUTE ON FUNCTION zk_lock_request_release(text) TO zklock_user;
\c - zklock_user
SELECT zk_lock_acquire('priv-rr');
SELECT zk_lock_request_release('priv-rr');
SELECT zk_lock_release('priv-rr');
\c - :su
REVOKE EXECUTE ON FUNCTION zk_lock_request_release(text) FROM zklock_user;
\c - zklock_user

-- Absolute paths: refused (42501) to lock and to read, nothing created.
SELECT n, sqlstate_of(format('SELECT %s(%L)', f, n))
  FROM unnest(ARRAY['zk_lock_acquire', 'zk_lock_try_acquire',
                    'zk_lock_xact_acquire', 'zk_lock_xact_try_acquire',
                    'zk_lock_acquire_shared', 'zk_lock_try_acquire_shared',
                    'zk_lock_xact_acquire_shared',
                    'zk_lock_xact_try_acquire_shared']) AS f,
       unnest(ARRAY['/zklock_regress/abs']) AS n;
SELECT sqlstate_of($$SELECT zk_semaphore_acquire('/zklock_regress/abs', 2)$$);
SELECT sqlstate_of($$SELECT * FROM zk_lock_queue('/zklock_regress')$$);
SELECT sqlstate_of($$SELECT * FROM zk_lock_holders('/zookeeper_not/x')$$);
-- The detail and hint.
SELECT zk_lock_acquire('/zklock_regress/abs');
-- /zookeeper stays refused as an invalid name first.
SELECT sqlstate_of($$SELECT * FROM zk_lock_queue('/zookeeper/quota')$$);
SELECT * FROM zk_locks;

-- A superuser opens a subtree to the role (ALTER ROLE ... SET applies at its
-- next login).
\c - :su
SET zklock.absolute_paths = '/zklock_regress/abs, /zklock_regress/other/sub';
ALTER ROLE zklock_user SET zklock.absolute_paths = '/zklock_regress/abs, /zklock_regress/other/sub';
RESET zklock.absolute_paths;
\c - zklock_user
SHOW zklock.absolute_paths;
SELECT zk_lock_acquire('/zklock_regress/abs'),
       zk_lock_try_acquire('/zklock_regress/abs/deeper/lock'),
       zk_lock_try_acquire_shared('/zklock_regress/other/sub/x'),
       zk_semaphore_acquire('/zklock_regress/abs/sem', 2, 0);
SELECT name, mode FROM zk_locks ORDER BY 1, 2;
SELECT lock_name, mode, holding FROM zk_lock_holders('/zklock_regress/abs');
-- By whole components: not a sibling that shares a prefix, not a parent.
SELECT n, sqlstate_of(format('SELECT zk_lock_try_acquire(%L)', n))
  FROM unnest(ARRAY['/zklock_regress/absx', '/zklock_regress/ab',
                    '/zklock_regress', '/zklock_regress/other',
                    '/zklock_regress/other/subx/y', '/other']) AS n;
SELECT zk_lock_release_all();

-- Set by a superuser in the session, it stays in force after SET ROLE.
\c - :su
SET zklock.absolute_paths = '/zklock_regress/su-set';
SET ROLE zklock_user;
SELECT zk_lock_try_acquire('/zklock_regress/su-set/x');
SELECT sqlstate_of($$SELECT zk_lock_try_acquire('/zklock_regress/abs')$$);
SET zklock.absolute_paths = '/zklock_regress/abs';
SELECT zk_lock_release_all();
RESET ROLE;
-- A path the backend holds already is checked again before a hold is
-- counted: a superuser's hold (say, by a SECURITY DEFINER function) does not
-- open it to the role.
SELECT zk_lock_acquire('/zklock_regress/su-held');
SET ROLE zklock_user;
SELECT sqlstate_of($$SELECT zk_lock_acquire('/zklock_regress/su-held')$$);
SELECT sqlstate_of($$SELECT zk_lock_try_acquire('/zklock_regress/su-held')$$);
RESET ROLE;
SELECT name, hold_count FROM zk_locks WHERE name = '/zklock_regress/su-held';
SELECT zk_lock_release('/zklock_regress/su-held');
-- Superusers may use any path (but /zookeeper, see names).
RESET zklock.absolute_paths;
SELECT zk_lock_try_acquire('/zklock_regress/anywhere'),
       zk_lock_release('/zklock_regress/anywhere');

-- Every role sees every holder and waiter, also those of other users.
CREATE ROLE zklock_other LOGIN;
SELECT dblink_connect('theirs', format('dbname=%s user=zklock_other', current_database()));
SELECT * FROM dblink('theirs', $$SELECT zk_lock_acquire('priv-theirs')::text$$) AS t(r text);
SET ROLE zklock_user;
SELECT lock_name, mode, holding, usename, database = current_database() AS db
  FROM zk_lock_holders('priv-theirs');
SELECT lock_name, usename FROM zk_cluster_locks WHERE lock_name LIKE 'priv-%';
SELECT zk_lock_try_acquire('priv-theirs');
RESET ROLE;
SELECT * FROM dblink('theirs', $$SELECT zk_lock_release_all()::text$$) AS t(r text);
SELECT dblink_disconnect('theirs');

-- zk_lock_fence(name) fences through zk_lock_fence(resource, token) and
-- needs EXECUTE on it too: revoked from PUBLIC, a role that holds the lock
-- can fence with neither form, nor write through zk_lock_fence_trigger.
CREATE TABLE priv_fenced (t bigint);
CREATE TRIGGER priv_fenced BEFORE INSERT ON priv_fenced
  FOR EACH ROW EXECUTE FUNCTION zk_lock_fence_trigger('priv-fence', 't');
GRANT INSERT ON priv_fenced TO zklock_user;
REVOKE EXECUTE ON FUNCTION zk_lock_fence(text, bigint) FROM PUBLIC;
SET ROLE zklock_user;
SELECT zk_lock_acquire('priv-fence');
SELECT sqlstate_of($$SELECT zk_lock_fence('priv-fence', 5)$$);
SELECT sqlstate_of($$SELECT zk_lock_fence('priv-fence')$$);
SELECT sqlstate_of($$INSERT INTO priv_fenced VALUES (zk_lock_token('priv-fence'))$$);
SELECT zk_lock_fence('priv-fence');
RESET ROLE;
-- Both revoked, as the reference says: both refused.
REVOKE EXECUTE ON FUNCTION zk_lock_fence(text) FROM PUBLIC;
SET ROLE zklock_user;
SELECT sqlstate_of($$SELECT zk_lock_fence('priv-fence', 5)$$);
SELECT sqlstate_of($$SELECT zk_lock_fence('priv-fence')$$);
RESET ROLE;
-- Granted both, the role fences with its lock's token.
GRANT EXECUTE ON FUNCTION zk_lock_fence(text, bigint), zk_lock_fence(text) TO zklock_user;
SET ROLE zklock_user;
BEGIN;
SELECT zk_lock_fence('priv-fence') = zk_lock_token('priv-fence') AS fenced;
ROLLBACK;
SELECT zk_lock_release('priv-fence');
RESET ROLE;
REVOKE EXECUTE ON FUNCTION zk_lock_fence(text, bigint), zk_lock_fence(text) FROM zklock_user;
-- The owner, a superuser, still fences with both.
SELECT zk_lock_acquire('priv-fence');
BEGIN;
SELECT zk_lock_fence('priv-fence') = zk_lock_token('priv-fence') AS fenced,
       zk_lock_fence('priv-fence', zk_lock_token('priv-fence')) > 0 AS fenced_with_token;
ROLLBACK;
SELECT zk_lock_release('priv-fence');
SELECT count(*) AS recorded FROM zk_lock_fences WHERE resource = 'priv-fence';
GRANT EXECUTE ON FUNCTION zk_lock_fence(text, bigint), zk_lock_fence(text) TO PUBLIC;
DROP TABLE priv_fenced;

-- Restricting zklock to some roles, as the README says: revoke from PUBLIC
-- and grant to a role.  (It stays so: cleanup drops the extension.)
CREATE ROLE zklock_users;
DO $$
DECLARE
  obj record;
BEGIN
  FOR obj IN SELECT d.classid, d.objid
               FROM pg_depend d JOIN pg_extension e ON d.refobjid = e.oid
              WHERE e.extname = 'zklock' AND d.deptype = 'e'
  LOOP
    IF obj.classid = 'pg_proc'::regclass
       AND obj.objid NOT IN ('zk_lock_stats_reset()'::regprocedure,
                             'zk_lock_request_release(text)'::regprocedure,
                             'zk_gate_close(text)'::regprocedure,
                             'zk_gate_open(text)'::regprocedure,
                             'zk_barrier_reset(text)'::regprocedure) THEN
      EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', obj.objid::regprocedure);
      EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO zklock_users', obj.objid::regprocedure);
    ELSIF obj.classid = 'pg_class'::regclass THEN
      EXECUTE format('REVOKE SELECT ON %s FROM PUBLIC', obj.objid::regclass);
      EXECUTE format('GRANT SELECT ON %s TO zklock_users', obj.objid::regclass);
    END IF;
  END LOOP;
END $$;
SET ROLE zklock_user;
SELECT sqlstate_of($$SELECT zk_lock_try_acquire('priv-restricted')$$);
SELECT sqlstate_of($$SELECT zk_lock_release_all()$$);
SELECT sqlstate_of($$SELECT * FROM zk_locks$$);
SELECT sqlstate_of($$SELECT * FROM zk_cluster_locks$$);
SELECT sqlstate_of($$SELECT * FROM zk_lock_holders('priv-restricted')$$);
RESET ROLE;
GRANT zklock_users TO zklock_user;
SET ROLE zklock_user;
SELECT zk_lock_try_acquire('priv-restricted');
SELECT name FROM zk_locks;
SELECT lock_name, holding FROM zk_cluster_locks WHERE lock_name = 'priv-restricted';
SELECT zk_lock_release('priv-restricted');
SELECT sqlstate_of('SELECT zk_lock_stats_reset()');
SELECT sqlstate_of($$SELECT zk_lock_request_release('priv-restricted')$$);
RESET ROLE;

ALTER ROLE zklock_user RESET zklock.absolute_paths;
DROP OWNED BY zklock_users;
DROP ROLE zklock_user, zklock_other, zklock_users;
SELECT * FROM my_locks;
