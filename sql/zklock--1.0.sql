/* zklock--1.0.sql */

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

CREATE FUNCTION zk_locks(
    OUT name text,
    OUT scope text,
    OUT hold_count integer,
    OUT znode text,
    OUT token bigint,
    OUT acquired_at timestamptz,
    OUT state text)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'zk_locks'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE VIEW zk_locks AS SELECT * FROM zk_locks();

COMMENT ON VIEW zk_locks IS
'zklock locks held by this backend, one row per lock and scope';

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
'this backend''s ZooKeeper session: state (none, connecting, connected, suspended, lost), id, negotiated timeout, server, milliseconds since last contact, locks held';
