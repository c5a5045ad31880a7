/* zklock--1.6--1.7.sql */

\echo Use "ALTER EXTENSION zklock UPDATE TO '1.7'" to load this file. \quit

-- 1.7: ZooKeeper's barrier recipes, on the same nodes as Curator's
-- DistributedBarrier / DistributedDoubleBarrier and Kazoo's Barrier /
-- DoubleBarrier.  Neither is transactional: a gate is nobody's, a barrier's
-- membership is the session's.  Names without a leading "/" live below
-- zklock.root, in places of their own (%gates, %barriers); absolute paths
-- are shared with the other clients.

-- A gate: closed while its node exists.  Closing blocks every waiter,
-- cluster-wide: close and open are for superusers, unless granted.
CREATE FUNCTION zk_gate_close(name text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_gate_close'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION zk_gate_close(text) IS
'close a gate, cluster-wide (create its node, as Curator''s setBarrier); true if this call closed it, false if it was closed; not transactional';

REVOKE ALL ON FUNCTION zk_gate_close(text) FROM PUBLIC;

CREATE FUNCTION zk_gate_open(name text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_gate_open'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION zk_gate_open(text) IS
'open a gate, cluster-wide (delete its node, as Curator''s removeBarrier); true if this call opened it, false if it was open; not transactional';

REVOKE ALL ON FUNCTION zk_gate_open(text) FROM PUBLIC;

CREATE FUNCTION zk_gate_wait(name text, timeout_ms integer DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_gate_wait'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION zk_gate_wait(text, integer) IS
'wait while a gate is closed; true once it is open (or was opened meanwhile), false after timeout_ms (NULL: no limit)';

-- A double barrier: parties members enter, none proceeds until all have;
-- none leaves until all have left.
CREATE FUNCTION zk_barrier_enter(name text, parties integer,
                                 timeout_ms integer DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_barrier_enter'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION zk_barrier_enter(text, integer, integer) IS
'enter a double barrier and wait until parties members have entered; false after timeout_ms (NULL: no limit), and then this session is no member; the membership is the session''s, not the transaction''s';

CREATE FUNCTION zk_barrier_leave(name text, timeout_ms integer DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_barrier_leave'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION zk_barrier_leave(text, integer) IS
'leave a double barrier this session entered and wait until every member has left; false after timeout_ms (NULL: no limit); the membership ends either way';

-- Deletes the nodes of other sessions and clients: superusers only, unless
-- granted.
CREATE FUNCTION zk_barrier_reset(name text)
RETURNS integer
AS 'MODULE_PATHNAME', 'zk_barrier_reset'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION zk_barrier_reset(text) IS
'delete every child of a double barrier''s node (ready and every member''s node, whoever''s) so that it starts afresh; returns how many it deleted';

REVOKE ALL ON FUNCTION zk_barrier_reset(text) FROM PUBLIC;

-- What ZooKeeper holds, read from any node.
CREATE FUNCTION zk_barriers(
    name text DEFAULT NULL,
    OUT barrier_name text,
    OUT path text,
    OUT members integer,
    OUT parties integer,
    OUT ready boolean,
    OUT ready_stale boolean)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'zk_barriers'
LANGUAGE C VOLATILE PARALLEL UNSAFE CALLED ON NULL INPUT;

COMMENT ON FUNCTION zk_barriers(text) IS
'a double barrier (NULL: every one below zklock.root): how many members it has, the parties its zklock members entered for, whether ready exists and whether it is older than every member (left behind)';

CREATE FUNCTION zk_barrier_members(
    name text DEFAULT NULL,
    OUT barrier_name text,
    OUT "position" integer,
    OUT znode text,
    OUT czxid bigint,
    OUT parties integer,
    OUT cluster_name text,
    OUT host_port text,
    OUT pid integer,
    OUT database text,
    OUT usename text,
    OUT application_name text,
    OUT entered_at timestamptz,
    OUT state text,
    OUT before_ready boolean,
    OUT data text)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'zk_barrier_members'
LANGUAGE C VOLATILE PARALLEL UNSAFE CALLED ON NULL INPUT;

COMMENT ON FUNCTION zk_barrier_members(text) IS
'the members of a double barrier (NULL: of every one below zklock.root) in the order the recipe sorts them, with who they are; state (entering, inside, leaving) for this server''s backends only; data for other clients'' members (Kazoo''s fqdn-pid)';

CREATE FUNCTION zk_gates(
    name text DEFAULT NULL,
    OUT gate_name text,
    OUT path text,
    OUT closed boolean,
    OUT czxid bigint,
    OUT cluster_name text,
    OUT host_port text,
    OUT pid integer,
    OUT database text,
    OUT usename text,
    OUT application_name text,
    OUT closed_at timestamptz,
    OUT data text)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'zk_gates'
LANGUAGE C VOLATILE PARALLEL UNSAFE CALLED ON NULL INPUT;

COMMENT ON FUNCTION zk_gates(text) IS
'whether a gate is closed, and by whom (NULL: every closed gate below zklock.root)';

CREATE VIEW zk_cluster_barriers AS
  SELECT * FROM @extschema@.zk_barrier_members(NULL::text);

COMMENT ON VIEW zk_cluster_barriers IS
'the members of every double barrier below zklock.root, cluster-wide';

CREATE VIEW zk_cluster_gates AS SELECT * FROM @extschema@.zk_gates(NULL::text);

COMMENT ON VIEW zk_cluster_gates IS
'every closed gate below zklock.root, cluster-wide';

-- Waits at gates and barriers on this server, by kind; reset with the
-- other statistics (zk_lock_stats_reset).
CREATE FUNCTION zk_barrier_stats(
    OUT kind text,
    OUT passed bigint,
    OUT timeouts bigint,
    OUT cancels bigint,
    OUT total_wait_ms double precision,
    OUT max_wait_ms double precision,
    OUT waiting integer)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'zk_barrier_stats'
LANGUAGE C VOLATILE PARALLEL SAFE;

CREATE VIEW zk_barrier_stats AS SELECT * FROM @extschema@.zk_barrier_stats();

COMMENT ON VIEW zk_barrier_stats IS
'waits at gates (gate) and double barriers (enter, leave) across all backends of this server';

COMMENT ON FUNCTION zk_lock_stats_reset() IS
'reset zk_lock_stats, zk_session_stats and zk_barrier_stats';

GRANT SELECT ON zk_cluster_barriers, zk_cluster_gates, zk_barrier_stats
    TO PUBLIC;
