-- Objects and helpers shared by the zklock regression tests.
CREATE EXTENSION zklock;
CREATE EXTENSION dblink;

\dx+ zklock

-- Run a query in a brand-new session (closed at once, so its locks go too).
CREATE FUNCTION in_new_session(query text) RETURNS text
LANGUAGE sql AS $$
  SELECT r FROM dblink('dbname=' || current_database(), query) AS t(r text)
$$;

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

-- zk_locks without what varies from run to run.
CREATE VIEW my_locks AS
  SELECT name, scope, hold_count,
         regexp_replace(znode, '/_c_[0-9a-f-]{36}-lock-[0-9]{10}$',
                        '/_c_<tag>-lock-<seq>') AS znode,
         token > 0 AS has_token,
         acquired_at <= now() + interval '1 hour' AS has_time,
         state
    FROM zk_locks
   ORDER BY name COLLATE "C", scope;
