/* zklock--1.3--1.4.sql */

\echo Use "ALTER EXTENSION zklock UPDATE TO '1.4'" to load this file. \quit

-- 1.4: revocation.  zk_lock_holders, zk_cluster_locks and zk_locks gain a
-- column release_requested; a function's result type cannot change in
-- place, so they are made again, with their grants.
DROP VIEW zk_cluster_locks;
DROP FUNCTION zk_lock_holders();
DROP FUNCTION zk_lock_holders(text);
DROP VIEW zk_locks;
DROP FUNCTION zk_locks();

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
    OUT blocked_by text[],
    OUT release_requested boolean)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'zk_lock_holders'
LANGUAGE C VOLATILE PARALLEL UNSAFE CALLED ON NULL INPUT;

COMMENT ON FUNCTION zk_lock_holders(text) IS
'every holder and waiter of a lock (NULL: of every lock below zklock.root), cluster-wide, in queue order, with whom each waiter waits for and whether a release was requested';

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
    OUT blocked_by text[],
    OUT release_requested boolean)
RETURNS SETOF record
LANGUAGE sql VOLATILE PARALLEL UNSAFE
AS $$ SELECT * FROM @extschema@.zk_lock_holders(NULL::text) $$;

COMMENT ON FUNCTION zk_lock_holders() IS
'every holder and waiter of every lock below zklock.root, cluster-wide';

CREATE VIEW zk_cluster_locks AS SELECT * FROM @extschema@.zk_lock_holders();

COMMENT ON VIEW zk_cluster_locks IS
'every holder and waiter of every lock below zklock.root, cluster-wide, in queue order';

CREATE FUNCTION zk_locks(
    OUT name text,
    OUT mode text,
    OUT scope text,
    OUT hold_count integer,
    OUT znode text,
    OUT token bigint,
    OUT acquired_at timestamptz,
    OUT state text,
    OUT release_requested boolean)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'zk_locks'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE VIEW zk_locks AS SELECT * FROM zk_locks();

COMMENT ON VIEW zk_locks IS
'zklock locks and semaphores held by this backend, one row per lock, mode and scope';

-- Revocation, as Curator's: ask the holders of a lock to let go, and hear it.
CREATE FUNCTION zk_lock_request_release(name text)
RETURNS integer
AS 'MODULE_PATHNAME', 'zk_lock_request_release'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION zk_lock_request_release(text) IS
'ask every holder of a lock, cluster-wide, to release it (writes __REVOKE__ into their nodes, as Curator''s Revoker); returns how many holders were asked';

-- Asking may interrupt another server's job (zklock.revocable): only
-- superusers, unless granted.
REVOKE ALL ON FUNCTION zk_lock_request_release(text) FROM PUBLIC;

CREATE FUNCTION zk_lock_release_requested(name text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_lock_release_requested'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION zk_lock_release_requested(text) IS
'whether another client asked the holders of a lock this session holds to release it; answered without a round trip to ZooKeeper';

GRANT SELECT ON zk_locks, zk_cluster_locks TO PUBLIC;
