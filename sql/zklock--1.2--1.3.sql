/* zklock--1.2--1.3.sql */

\echo Use "ALTER EXTENSION zklock UPDATE TO '1.3'" to load this file. \quit

-- zk_lock_queue's info is jsonb, as users expect of a JSON document
-- (info->>'pid'); nothing in the extension depends on the function.
DROP FUNCTION zk_lock_queue(text);

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

-- 1.3 holds one ZooKeeper session per PostgreSQL server, in the session
-- worker (zklock must be in shared_preload_libraries).
COMMENT ON FUNCTION zk_session() IS
'this server''s ZooKeeper session, held by the zklock session worker for all backends: state (none, connecting, connected, suspended, lost), id, negotiated timeout, server, milliseconds since last contact, and the locks this backend holds in it';

COMMENT ON VIEW zk_session_stats IS
'this server''s ZooKeeper sessions (one at a time, held by the session worker) and the requests of all its backends';
