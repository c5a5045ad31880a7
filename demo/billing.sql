-- The demo's batch job: a stored procedure that must never run twice at the
-- same time, even when it is called on different PostgreSQL nodes.
-- demo/run.sh loads this into each node.

CREATE EXTENSION zklock;

-- One row per run of the job, kept on the node that ran it.
CREATE TABLE billing_runs (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    node        text NOT NULL DEFAULT current_setting('cluster_name'),
    worker      text NOT NULL,
    method      text NOT NULL,
    token       bigint,        -- zklock fencing token; NULL with 'advisory'
    started_at  timestamptz NOT NULL,
    finished_at timestamptz
);

-- nightly_billing(worker, method) runs the job once, serialized by
--   'zklock'    a zklock lock: one run at a time on all the nodes that share
--               the ZooKeeper ensemble;
--   'advisory'  pg_advisory_xact_lock: one run at a time on this node only.
--
-- Both are transaction locks, taken first thing and released when the
-- transaction ends, by COMMIT or by the abort of an error: a failed run never
-- leaves the job locked.  A CALL outside BEGIN ... COMMIT is a transaction of
-- its own, so the row of the run is committed just before the lock goes.  A
-- job that commits as it goes needs a session lock instead, zk_lock_acquire():
-- once the transaction that took it commits, it stays held across the job's
-- later commits until zk_lock_release() or the end of the session.
CREATE PROCEDURE nightly_billing(worker text, method text)
LANGUAGE plpgsql AS $$
DECLARE
    fencing_token bigint;
    run_id bigint;
BEGIN
    CASE method
    WHEN 'zklock' THEN
        -- Wait at most 30 s for the runs on other nodes.
        IF NOT zk_lock_xact_acquire('nightly-billing', 30000) THEN
            RAISE EXCEPTION 'nightly billing is still running elsewhere';
        END IF;
        -- Grows with every holder: stamp what the job writes elsewhere with
        -- it, so that a stale holder's writes can be told apart.
        fencing_token := zk_lock_token('nightly-billing');
    WHEN 'advisory' THEN
        PERFORM pg_advisory_xact_lock(4242);    -- the job's advisory lock key
    ELSE
        RAISE EXCEPTION 'unknown method "%"', method;
    END CASE;

    INSERT INTO billing_runs (worker, method, token, started_at)
    VALUES (worker, method, fencing_token, clock_timestamp())
    RETURNING id INTO run_id;

    PERFORM pg_sleep(0.25);                     -- the work

    UPDATE billing_runs SET finished_at = clock_timestamp() WHERE id = run_id;
END
$$;

-- long_billing(max_batches): a long run that commits batch by batch, under a
-- session lock (it outlives each COMMIT), and stops politely after the
-- current batch when anybody, on any node, asks for the lock with
-- zk_lock_request_release('long-billing').
CREATE TABLE billing_batches (
    node    text NOT NULL DEFAULT current_setting('cluster_name'),
    batch   int NOT NULL,
    done_at timestamptz NOT NULL
);

CREATE PROCEDURE long_billing(max_batches int)
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM zk_lock_acquire('long-billing');
    FOR b IN 1..max_batches LOOP
        INSERT INTO billing_batches (batch, done_at) VALUES (b, clock_timestamp());
        PERFORM pg_sleep(0.1);                  -- the batch
        COMMIT;
        EXIT WHEN zk_lock_release_requested('long-billing');
    END LOOP;
    PERFORM zk_lock_release('long-billing');
END
$$;

-- nightly_shards(run, nodes): a job in two phases.  Each node loads its own
-- shard; then one aggregation, on whichever node takes it, once every node
-- has loaded: a double barrier of all the nodes, and a lock only one takes
-- (held until every node has left the barrier, so that no late node takes
-- it again).
CREATE TABLE shard_runs (
    node        text NOT NULL DEFAULT current_setting('cluster_name'),
    phase       text NOT NULL,
    started_at  timestamptz NOT NULL,
    finished_at timestamptz NOT NULL
);

CREATE PROCEDURE nightly_shards(run text, nodes int)
LANGUAGE plpgsql AS $$
DECLARE
    t0 timestamptz := clock_timestamp();
    aggregates boolean;
BEGIN
    PERFORM pg_sleep(0.3 + random());           -- load this node's shard
    INSERT INTO shard_runs (phase, started_at, finished_at)
    VALUES ('load', t0, clock_timestamp());
    COMMIT;                                     -- hold nothing at the barrier
    IF NOT zk_barrier_enter('shards-' || run, nodes, 60000) THEN
        RAISE EXCEPTION 'not every node loaded its shard within a minute';
    END IF;
    aggregates := zk_lock_try_acquire('aggregate-' || run);
    IF aggregates THEN
        t0 := clock_timestamp();
        PERFORM pg_sleep(0.5);                  -- aggregate every shard
        INSERT INTO shard_runs (phase, started_at, finished_at)
        VALUES ('aggregate', t0, clock_timestamp());
    END IF;
    COMMIT;
    PERFORM zk_barrier_leave('shards-' || run, 60000);
    IF aggregates THEN
        PERFORM zk_lock_release('aggregate-' || run);
    END IF;
END
$$;
