/* zklock--1.0--1.1.sql: server-wide statistics */

\echo Use "ALTER EXTENSION zklock UPDATE TO '1.1'" to load this file. \quit

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
    OUT stats_reset timestamptz)
RETURNS record
AS 'MODULE_PATHNAME', 'zk_session_stats'
LANGUAGE C VOLATILE PARALLEL SAFE;

CREATE VIEW zk_session_stats AS SELECT * FROM zk_session_stats();

COMMENT ON VIEW zk_session_stats IS
'ZooKeeper sessions and requests of all backends of this server';
