/* zklock--1.1--1.2.sql */

\echo Use "ALTER EXTENSION zklock UPDATE TO '1.2'" to load this file. \quit

-- zk_lock_holders is written in C now, reading each node's data without
-- trusting it, and shows whom each waiter waits for (blocked_by).
DROP VIEW zk_cluster_locks;
DROP FUNCTION zk_lock_holders();
DROP FUNCTION zk_lock_holders(text);

CREATE FUNCTION zk_lock_holders(
    name text,
    OUT lock_name text,
    OUT "position" integer,
    OUT mode text,
    OUT holding boolean,
    OUT cluster_name text,
    OUT host_port text,
    OUT pid integer,
    OUT database text,
    OUT usename text,
    OUT application_name text,
    OUT requested_at timestamptz,
    OUT token bigint,
    OUT znode text,
    OUT blocked_by text[])
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'zk_lock_holders'
LANGUAGE C VOLATILE PARALLEL UNSAFE CALLED ON NULL INPUT;

COMMENT ON FUNCTION zk_lock_holders(text) IS
'every holder and waiter of a lock (NULL: of every lock below zklock.root), cluster-wide, in queue order, with whom each waiter waits for';

CREATE FUNCTION zk_lock_holders(
    OUT lock_name text,
    OUT "position" integer,
    OUT mode text,
    OUT holding boolean,
    OUT cluster_name text,
    OUT host_port text,
    OUT pid integer,
    OUT database text,
    OUT usename text,
    OUT application_name text,
    OUT requested_at timestamptz,
    OUT token bigint,
    OUT znode text,
    OUT blocked_by text[])
RETURNS SETOF record
LANGUAGE sql VOLATILE PARALLEL UNSAFE
AS $$ SELECT * FROM @extschema@.zk_lock_holders(NULL::text) $$;

COMMENT ON FUNCTION zk_lock_holders() IS
'every holder and waiter of every lock below zklock.root, cluster-wide';

CREATE VIEW zk_cluster_locks AS SELECT * FROM @extschema@.zk_lock_holders();

COMMENT ON VIEW zk_cluster_locks IS
'every holder and waiter of every lock below zklock.root, cluster-wide, in queue order';


-- zk_session_stats counts data rewrites (sets) and deadlock checks too.
DROP VIEW zk_session_stats;
DROP FUNCTION zk_session_stats();

CREATE FUNCTION zk_session_stats(
    OUT sessions_opened bigint,
    OUT sessions_lost bigint,
    OUT reconnects bigint,
    OUT creates bigint,
    OUT deletes bigint,
    OUT children_lists bigint,
    OUT gets bigint,
    OUT watches bigint,
    OUT watch_removals bigint,
    OUT syncs bigint,
    OUT sets bigint,
    OUT deadlock_checks bigint,
    OUT deadlocks bigint,
    OUT stats_reset timestamptz)
RETURNS record
AS 'MODULE_PATHNAME', 'zk_session_stats'
LANGUAGE C VOLATILE PARALLEL SAFE;

CREATE VIEW zk_session_stats AS SELECT * FROM zk_session_stats();

COMMENT ON VIEW zk_session_stats IS
'ZooKeeper sessions and requests of all backends of this server';


-- The views go to the same roles as the functions behind them (PUBLIC):
-- before 1.2 only superusers could read them.
GRANT SELECT ON zk_locks, zk_cluster_locks, zk_lock_stats, zk_session_stats
    TO PUBLIC;
