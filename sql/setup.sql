-- Objects and helpers shared by the zklock regression tests.
CREATE EXTENSION zklock;
CREATE EXTENSION dblink;

-- The extension's members, as \dx+ lists them, less the row types of its
-- views and their array types: newer majors record those as members of
-- their own, 15 does not, and they come and go with the views anyway.
CREATE VIEW zklock_members AS
  SELECT pg_describe_object(d.classid, d.objid, 0) AS member
    FROM pg_depend d JOIN pg_extension e ON d.refobjid = e.oid
   WHERE d.refclassid = 'pg_extension'::regclass AND e.extname = 'zklock'
     AND d.deptype = 'e'
     AND NOT EXISTS (SELECT FROM pg_type t LEFT JOIN pg_type elem ON elem.oid = t.typelem
                      WHERE d.classid = 'pg_type'::regclass AND t.oid = d.objid
                        AND (t.typrelid <> 0 OR elem.typrelid <> 0))
   ORDER BY pg_describe_object(d.classid, d.objid, 0) COLLATE "C";
SELECT * FROM zklock_members;

-- Run a query in a brand-new session, which lets go of every lock it took
-- before it returns (a disconnect alone frees them a moment later).
CREATE FUNCTION in_new_session(query text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
  result text;
BEGIN
  PERFORM dblink_connect('fresh', 'dbname=' || current_database());
  BEGIN
    SELECT r INTO result FROM dblink('fresh', query) AS t(r text);
    PERFORM * FROM dblink('fresh', 'SELECT zk_lock_release_all()') AS t(n int);
  EXCEPTION WHEN OTHERS THEN
    PERFORM dblink_disconnect('fresh');
    RAISE;
  END;
  PERFORM dblink_disconnect('fresh');
  RETURN result;
END $$;

-- A second, long-lived session, for locks held by somebody else.
CREATE FUNCTION in_other_session(query text) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
  IF NOT ('other' = ANY (coalesce(dblink_get_connections(), '{}'))) THEN
    PERFORM dblink_connect('other', 'dbname=' || current_database());
  END IF;
  RETURN (SELECT r FROM dblink('other', query) AS t(r text));
END $$;

-- SQLSTATE and message of a statement, or 'ok'.
CREATE FUNCTION sqlstate_of(query text) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE query;
  RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
  RETURN SQLSTATE || ': ' || SQLERRM;
END $$;

-- Until query answers true (10 s at most): what the worker or another
-- session does comes a moment later.
CREATE FUNCTION wait_until(query text) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
  done boolean;
BEGIN
  FOR i IN 1..1000 LOOP
    EXECUTE query INTO done;
    IF done THEN
      RETURN true;
    END IF;
    PERFORM pg_sleep(0.01);
  END LOOP;
  RETURN false;
END $$;

-- zk_locks without what varies from run to run.
CREATE VIEW my_locks AS
  SELECT name, mode, scope, hold_count,
         regexp_replace(znode, '/_c_[0-9a-f-]{36}-(lock-|__READ__|__WRIT__|permits[0-9]+-lease-)[0-9]{10}$',
                        '/_c_<tag>-\1<seq>') AS znode,
         token > 0 AS has_token,
         acquired_at <= now() + interval '1 hour' AS has_time,
         state
    FROM zk_locks
   ORDER BY name COLLATE "C", mode, scope;
