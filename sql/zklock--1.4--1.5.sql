/* zklock--1.4--1.5.sql */

\echo Use "ALTER EXTENSION zklock UPDATE TO '1.5'" to load this file. \quit

-- 1.5: fencing at the resource.  A transaction that writes protected data
-- records its lock's token for the resource; a token below the highest
-- recorded is refused with 40001, so a stale holder's writes roll back.
-- Plain SQL and PL/pgSQL over a table: no ZooKeeper, no preloading, usable
-- in a central database the nodes write to.

-- Rows are never deleted by zklock: a deleted row would let a stale token in
-- again.  pg_dump keeps them (pg_extension_config_dump).
CREATE TABLE zk_lock_fence_tokens (
    resource text PRIMARY KEY,
    token bigint NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now()
);

SELECT pg_catalog.pg_extension_config_dump('zk_lock_fence_tokens', '');

REVOKE ALL ON zk_lock_fence_tokens FROM PUBLIC;

COMMENT ON TABLE zk_lock_fence_tokens IS
'highest fencing token recorded for each resource (read it through zk_lock_fences)';

CREATE VIEW zk_lock_fences AS
  SELECT resource, token, recorded_at FROM zk_lock_fence_tokens;

COMMENT ON VIEW zk_lock_fences IS
'resources fenced by zk_lock_fence, with the highest token recorded and when it was first recorded';

GRANT SELECT ON zk_lock_fences TO PUBLIC;

-- The row of the resource, locked until the end of the transaction, orders
-- its writers.  A higher token updates it: a fence that comes while that
-- transaction is open waits for it, and compares with what it recorded
-- (READ COMMITTED) or fails with 40001 (REPEATABLE READ, SERIALIZABLE).  An
-- equal token, the same holder's next transaction or another connection of
-- it, only share-locks the row: such writers go side by side, and a higher
-- token waits for all of them.  SECURITY DEFINER: callers may fence, not
-- write the table.
CREATE FUNCTION zk_lock_fence(resource text, token bigint)
RETURNS bigint
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    highest bigint;
BEGIN
    IF resource IS NULL THEN
        RAISE EXCEPTION 'fencing resource must not be null'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF token IS NULL THEN
        RAISE EXCEPTION 'fencing token for resource "%" must not be null', resource
            USING ERRCODE = 'null_value_not_allowed',
                  HINT = 'zk_lock_token() is NULL when this session does not hold the lock; a NULL token never passes a fence.';
    END IF;
    -- Each turn either returns, raises, or saw the highest token rise.
    LOOP
        SELECT f.token INTO highest
          FROM @extschema@.zk_lock_fence_tokens f
         WHERE f.resource = zk_lock_fence.resource;
        IF NOT FOUND THEN
            INSERT INTO @extschema@.zk_lock_fence_tokens AS f (resource, token)
            VALUES (zk_lock_fence.resource, zk_lock_fence.token)
            ON CONFLICT ON CONSTRAINT zk_lock_fence_tokens_pkey DO NOTHING;
            IF FOUND THEN
                RETURN token;
            END IF;
            -- Another transaction recorded the resource first.
            CONTINUE;
        END IF;
        IF token < highest THEN
            RAISE EXCEPTION 'fencing token % of resource "%" is below the highest seen, %',
                    token, resource, highest
                USING ERRCODE = 'serialization_failure',
                      HINT = 'The lock that issued this token was lost, and a later holder has written to the resource since.  Roll back; a retry with the same token fails again.';
        ELSIF token > highest THEN
            -- After a concurrent raise, the condition is checked again on
            -- what it committed.
            UPDATE @extschema@.zk_lock_fence_tokens f
               SET token = zk_lock_fence.token, recorded_at = now()
             WHERE f.resource = zk_lock_fence.resource
               AND f.token < zk_lock_fence.token;
            IF FOUND THEN
                RETURN token;
            END IF;
        ELSE
            SELECT f.token INTO highest
              FROM @extschema@.zk_lock_fence_tokens f
             WHERE f.resource = zk_lock_fence.resource
               FOR SHARE;
            IF highest = token THEN
                RETURN token;
            END IF;
        END IF;
    END LOOP;
END
$$;

COMMENT ON FUNCTION zk_lock_fence(text, bigint) IS
'record a fencing token as the highest seen for a resource, in this transaction; a lower token fails with 40001';

CREATE FUNCTION zk_lock_fence(name text)
RETURNS bigint
AS 'MODULE_PATHNAME', 'zk_lock_fence_held'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION zk_lock_fence(text) IS
'fence the resource named like a lock this session holds exclusively, with that lock''s token';

-- For writers that cannot call a function, such as postgres_fdw (it never
-- sends one): BEFORE INSERT, UPDATE or DELETE, FOR EACH ROW or STATEMENT.
-- Arguments: the resource, and optionally a bigint column that carries the
-- token of an inserted or updated row.  The column is cleared (NULL) once
-- the token is fenced, so that an UPDATE that does not set it again cannot
-- pass with an old holder's token.  Without a carried token, the writing
-- transaction's zklock.fence_token setting is the token.
CREATE FUNCTION zk_lock_fence_trigger()
RETURNS trigger
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    resource text := TG_ARGV[0];
    token_column text := TG_ARGV[1];
    row_json jsonb;
    token bigint;
BEGIN
    IF TG_WHEN <> 'BEFORE' OR TG_NARGS NOT IN (1, 2) OR resource IS NULL THEN
        RAISE EXCEPTION 'zk_lock_fence_trigger must be a BEFORE trigger with the resource as its first argument and optionally the token column as its second'
            USING ERRCODE = 'triggered_action_exception';
    END IF;
    IF token_column IS NOT NULL AND TG_LEVEL = 'ROW' AND TG_OP IN ('INSERT', 'UPDATE') THEN
        row_json := to_jsonb(NEW);
        IF NOT row_json ? token_column THEN
            RAISE EXCEPTION 'column "%" of zk_lock_fence_trigger does not exist in table "%"',
                    token_column, TG_TABLE_NAME
                USING ERRCODE = 'undefined_column';
        END IF;
        token := (row_json ->> token_column)::bigint;
        NEW := jsonb_populate_record(NEW, jsonb_build_object(token_column, NULL));
    END IF;
    IF token IS NULL THEN
        token := nullif(current_setting('zklock.fence_token', true), '')::bigint;
    END IF;
    IF token IS NULL THEN
        RAISE EXCEPTION 'no fencing token for % on table "%" (resource "%")',
                TG_OP, TG_TABLE_NAME, resource
            USING ERRCODE = 'null_value_not_allowed',
                  HINT = CASE WHEN token_column IS NULL OR TG_OP = 'DELETE'
                         THEN 'SET LOCAL zklock.fence_token to the token of the writing transaction''s lock.'
                         ELSE format('Set column %I of the row to the writer''s token (zk_lock_token()), or SET LOCAL zklock.fence_token.', token_column) END;
    END IF;
    PERFORM @extschema@.zk_lock_fence(resource, token);
    IF TG_LEVEL = 'STATEMENT' THEN
        RETURN NULL;
    ELSIF TG_OP = 'DELETE' THEN
        RETURN OLD;
    END IF;
    RETURN NEW;
END
$$;

COMMENT ON FUNCTION zk_lock_fence_trigger() IS
'BEFORE trigger that fences each write of a table: arguments resource [, token column]; the token is the column''s value or zklock.fence_token';

-- zk_session_stats gains the deadlock detector's work and the live records
-- of the shared area; a function's result type cannot change in place, so
-- it is made again, with its view and grant.
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
    OUT deadlock_members bigint,
    OUT deadlock_cycles bigint,
    OUT deadlock_victims bigint,
    OUT shared_records bigint,
    OUT stats_reset timestamptz)
RETURNS record
AS 'MODULE_PATHNAME', 'zk_session_stats_1_5'
LANGUAGE C VOLATILE PARALLEL SAFE;

CREATE VIEW zk_session_stats AS SELECT * FROM zk_session_stats();

COMMENT ON VIEW zk_session_stats IS
'this server''s ZooKeeper sessions (one at a time, held by the session worker), the requests of all its backends, its deadlock checks, and the records of its shared area';

GRANT SELECT ON zk_session_stats TO PUBLIC;

-- zk_session gains the session worker's pid and its requests: sent and not
-- answered yet, and waiting for their turn (flow control).
DROP FUNCTION zk_session();

CREATE FUNCTION zk_session(
    OUT state text,
    OUT session_id text,
    OUT timeout_ms integer,
    OUT server text,
    OUT since_contact_ms bigint,
    OUT locks integer,
    OUT worker_pid integer,
    OUT requests_in_flight integer,
    OUT requests_queued integer)
RETURNS record
AS 'MODULE_PATHNAME', 'zk_session_1_5'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION zk_session() IS
'this server''s ZooKeeper session, held by the zklock session worker for all backends: state (none, connecting, connected, suspended, lost), id, negotiated timeout, server, milliseconds since last contact, the locks this backend holds in it, the worker''s pid, and its requests sent and not answered, and waiting for their turn';
