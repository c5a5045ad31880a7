/* zklock--1.4.sql */

\echo Use "CREATE EXTENSION zklock" to load this file. \quit

-- Session locks: held until released (as often as acquired) or the session
-- ends; an acquisition made in a transaction that aborts is undone.
CREATE FUNCTION zk_lock_acquire(name text, timeout_ms integer DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_lock_acquire'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION zk_lock_acquire(text, integer) IS
'acquire a cluster-wide session lock in ZooKeeper; waits up to timeout_ms (NULL: no limit), returns false on timeout';

CREATE FUNCTION zk_lock_try_acquire(name text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_lock_try_acquire'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION zk_lock_try_acquire(text) IS
'acquire a cluster-wide session lock if it is free, without waiting';

CREATE FUNCTION zk_lock_release(name text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_lock_release'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION zk_lock_release(text) IS
'release one hold of a session lock; false with a WARNING if not held';

CREATE FUNCTION zk_lock_release_all()
RETURNS integer
AS 'MODULE_PATHNAME', 'zk_lock_release_all'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION zk_lock_release_all() IS
'release every session lock of this session; returns how many locks were released';

-- Transaction locks: held until the transaction commits or aborts.
CREATE FUNCTION zk_lock_xact_acquire(name text, timeout_ms integer DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_lock_xact_acquire'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION zk_lock_xact_acquire(text, integer) IS
'acquire a cluster-wide lock until the end of the transaction; waits up to timeout_ms (NULL: no limit)';

CREATE FUNCTION zk_lock_xact_try_acquire(name text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_lock_xact_try_acquire'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION zk_lock_xact_try_acquire(text) IS
'acquire a cluster-wide lock until the end of the transaction if it is free, without waiting';

CREATE FUNCTION zk_lock_token(name text)
RETURNS bigint
AS 'MODULE_PATHNAME', 'zk_lock_token'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION zk_lock_token(text) IS
'fencing token of a lock this session holds (the czxid of its node), NULL if not held';

-- Shared (read) locks: any number of sessions share one; an exclusive lock
-- excludes them all.  Waiters are served in arrival order.
CREATE FUNCTION zk_lock_acquire_shared(name text, timeout_ms integer DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_lock_acquire_shared'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION zk_lock_acquire_shared(text, integer) IS
'acquire a cluster-wide shared session lock; waits up to timeout_ms (NULL: no limit), returns false on timeout';

CREATE FUNCTION zk_lock_try_acquire_shared(name text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_lock_try_acquire_shared'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION zk_lock_try_acquire_shared(text) IS
'acquire a cluster-wide shared session lock if no writer holds or waits for it, without waiting';

CREATE FUNCTION zk_lock_release_shared(name text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_lock_release_shared'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION zk_lock_release_shared(text) IS
'release one hold of a shared session lock; false with a WARNING if not held';

CREATE FUNCTION zk_lock_xact_acquire_shared(name text, timeout_ms integer DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_lock_xact_acquire_shared'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION zk_lock_xact_acquire_shared(text, integer) IS
'acquire a cluster-wide shared lock until the end of the transaction; waits up to timeout_ms (NULL: no limit)';

CREATE FUNCTION zk_lock_xact_try_acquire_shared(name text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_lock_xact_try_acquire_shared'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION zk_lock_xact_try_acquire_shared(text) IS
'acquire a cluster-wide shared lock until the end of the transaction if it is free, without waiting';

-- Semaphores: at most permits sessions hold one at a time.
CREATE FUNCTION zk_semaphore_acquire(name text, permits integer,
                                     timeout_ms integer DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_semaphore_acquire'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION zk_semaphore_acquire(text, integer, integer) IS
'take one of permits places of a cluster-wide semaphore for the session; waits up to timeout_ms (NULL: no limit)';

CREATE FUNCTION zk_semaphore_release(name text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_semaphore_release'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION zk_semaphore_release(text) IS
'release one hold of a semaphore place; false with a WARNING if not held';

-- Who holds and who waits, cluster-wide, read from ZooKeeper.
CREATE FUNCTION zk_lock_queue(
    name text,
    OUT lock_name text,
    OUT "position" integer,
    OUT mode text,
    OUT holding boolean,
    OUT token bigint,
    OUT znode text,
    OUT info jsonb)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'zk_lock_queue'
LANGUAGE C VOLATILE PARALLEL UNSAFE CALLED ON NULL INPUT;

COMMENT ON FUNCTION zk_lock_queue(text) IS
'the queue of a lock (NULL: of every lock below zklock.root) as stored in ZooKeeper; info is the JSON document a node carries, NULL if it is not one';

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

CREATE FUNCTION zk_session(
    OUT state text,
    OUT session_id text,
    OUT timeout_ms integer,
    OUT server text,
    OUT since_contact_ms bigint,
    OUT locks integer)
RETURNS record
AS 'MODULE_PATHNAME', 'zk_session'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION zk_session() IS
'this server''s ZooKeeper session, held by the zklock session worker for all backends: state (none, connecting, connected, suspended, lost), id, negotiated timeout, server, milliseconds since last contact, and the locks this backend holds in it';

-- Server-wide statistics.
-- Need zklock in shared_preload_libraries; they raise an error otherwise.
CREATE FUNCTION zk_lock_stats(
    OUT name text,
    OUT acquisitions bigint,
    OUT try_failures bigint,
    OUT timeouts bigint,
    OUT cancels bigint,
    OUT total_wait_ms double precision,
    OUT max_wait_ms double precision,
    OUT holders integer,
    OUT waiters integer,
    OUT lost bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'zk_lock_stats'
LANGUAGE C VOLATILE PARALLEL SAFE;

CREATE VIEW zk_lock_stats AS SELECT * FROM zk_lock_stats();

COMMENT ON VIEW zk_lock_stats IS
'zklock statistics per lock name, across all backends of this server';

CREATE FUNCTION zk_lock_stats_reset()
RETURNS void
AS 'MODULE_PATHNAME', 'zk_lock_stats_reset'
LANGUAGE C VOLATILE PARALLEL SAFE;

COMMENT ON FUNCTION zk_lock_stats_reset() IS
'reset zk_lock_stats and zk_session_stats';

-- Like pg_stat_statements_reset: only superusers, unless granted.
REVOKE ALL ON FUNCTION zk_lock_stats_reset() FROM PUBLIC;

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
'this server''s ZooKeeper sessions (one at a time, held by the session worker) and the requests of all its backends';

-- Functions are executable by PUBLIC by default, views are not readable:
-- the views go to the same roles as the functions behind them (a view's
-- user must also be allowed to execute its function).  Every role may read
-- every row of zk_cluster_locks, as it may read ZooKeeper's world-readable
-- lock nodes and pg_locks; see "Security" in the README.
GRANT SELECT ON zk_locks, zk_cluster_locks, zk_lock_stats, zk_session_stats
    TO PUBLIC;
