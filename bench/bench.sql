-- bench.sql: what bench/bench.py installs in each PostgreSQL node.
--
-- Timings are taken inside the backend with clock_timestamp(), so they
-- leave out psql and the connection; figures are only collected in memory
-- while the clock runs and written to tables once it has stopped.

CREATE EXTENSION zklock;

-- Uncontended cycles from PL/pgSQL.  kind: 'session' (zk_lock_acquire +
-- zk_lock_release), 'xact' (zk_lock_xact_acquire, then COMMIT ends the
-- transaction and the lock), 'xact_write' (the same with a row written, so
-- that the commit guard checks the session), 'advisory' (pg_advisory_lock +
-- pg_advisory_unlock, for scale).  One untimed cycle first: the ZooKeeper
-- session is opened and the lock's parent created on first use.
CREATE UNLOGGED TABLE bench_writes (i int);

CREATE PROCEDURE bench_cycles(kind text, lock text, n int,
                              INOUT seconds float8 DEFAULT NULL)
LANGUAGE plpgsql AS $$
DECLARE
  t0 timestamptz;
  key bigint := hashtext(lock);
BEGIN
  FOR i IN 0..n LOOP
    IF i = 1 THEN
      t0 := clock_timestamp();
    END IF;
    CASE kind
      WHEN 'session' THEN
        PERFORM zk_lock_acquire(lock);
        PERFORM zk_lock_release(lock);
      WHEN 'xact' THEN
        PERFORM zk_lock_xact_acquire(lock);
        COMMIT;
      WHEN 'xact_write' THEN
        PERFORM zk_lock_xact_acquire(lock);
        INSERT INTO bench_writes VALUES (i);
        COMMIT;
      WHEN 'advisory' THEN
        PERFORM pg_advisory_lock(key);
        PERFORM pg_advisory_unlock(key);
    END CASE;
  END LOOP;
  seconds := extract(epoch FROM clock_timestamp() - t0);
END $$;

-- Contended handoff: take turns on one lock for the given seconds.  Each
-- backend opens its ZooKeeper session, then waits for the start on an
-- advisory lock that the benchmark holds on each node.  The acquisition time
-- is taken right after zk_lock_acquire returns, the release time right
-- before zk_lock_release starts; the fencing token orders the holders of
-- all nodes.
CREATE UNLOGGED TABLE bench_grants (
  run text, token bigint, acquired timestamptz, released timestamptz);

CREATE PROCEDURE bench_handoff(run text, lock text, seconds float8,
                               gate bigint)
LANGUAGE plpgsql AS $$
DECLARE
  tokens bigint[] := '{}';
  acquired timestamptz[] := '{}';
  released timestamptz[] := '{}';
  end_at timestamptz;
BEGIN
  IF zk_lock_try_acquire(lock) THEN
    PERFORM zk_lock_release(lock);
  END IF;
  PERFORM pg_advisory_lock_shared(gate);
  PERFORM pg_advisory_unlock_shared(gate);
  end_at := clock_timestamp() + seconds * interval '1 second';
  LOOP
    PERFORM zk_lock_acquire(lock);
    acquired := acquired || clock_timestamp();
    tokens := tokens || zk_lock_token(lock);
    released := released || clock_timestamp();
    PERFORM zk_lock_release(lock);
    EXIT WHEN released[cardinality(released)] >= end_at;
  END LOOP;
  INSERT INTO bench_grants
    SELECT run, t, a, r FROM unnest(tokens, acquired, released) AS u(t, a, r);
END $$;

-- Many locks held by one backend: acquire (or release) prefix1..prefixN in
-- turn.  Returns the seconds each tenth of the names took (n a multiple of
-- 10), to show whether operations get slower as the backend holds more.
CREATE FUNCTION bench_many(op text, prefix text, n int)
RETURNS float8[]
LANGUAGE plpgsql AS $$
DECLARE
  tenths float8[] := '{}';
  t0 timestamptz := clock_timestamp();
  t timestamptz;
BEGIN
  FOR i IN 1..n LOOP
    IF op = 'acquire' THEN
      PERFORM zk_lock_acquire(prefix || i);
    ELSE
      PERFORM zk_lock_release(prefix || i);
    END IF;
    IF i = n * (cardinality(tenths) + 1) / 10 THEN
      t := clock_timestamp();
      tenths := tenths || extract(epoch FROM t - t0);
      t0 := t;
    END IF;
  END LOOP;
  RETURN tenths;
END $$;

-- What a backend pays per call for the locks it holds, without asking
-- ZooKeeper anything: a zk_lock_token() call, and an empty COMMIT (zklock's
-- commit callback runs for every transaction).  Seconds per call of each.
CREATE PROCEDURE bench_local(lock text, n int, INOUT token_s float8 DEFAULT NULL,
                             INOUT commit_s float8 DEFAULT NULL)
LANGUAGE plpgsql AS $$
DECLARE
  t0 timestamptz;
BEGIN
  COMMIT;
  t0 := clock_timestamp();
  FOR i IN 1..n LOOP
    PERFORM zk_lock_token(lock);
  END LOOP;
  token_s := extract(epoch FROM clock_timestamp() - t0) / n;
  t0 := clock_timestamp();
  FOR i IN 1..n LOOP
    COMMIT;
  END LOOP;
  commit_s := extract(epoch FROM clock_timestamp() - t0) / n;
END $$;

-- Many waiters: wait for the lock, note when it came and which queue node
-- got it, let the next one have it, and only then write it down.  With a
-- gate (an advisory lock the benchmark holds), wait there before ending, so
-- that no backend's exit (and its psql's) takes the machine's CPU from the
-- drain being timed.
CREATE UNLOGGED TABLE bench_queue (
  run text, znode text, token bigint, granted timestamptz);

CREATE FUNCTION bench_wait(run text, lock text, gate bigint DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  granted timestamptz;
  held record;
BEGIN
  PERFORM zk_lock_acquire(lock);
  granted := clock_timestamp();
  SELECT l.znode, l.token INTO held FROM zk_locks l WHERE l.name = lock;
  PERFORM zk_lock_release(lock);
  INSERT INTO bench_queue VALUES (run, held.znode, held.token, granted);
  IF gate IS NOT NULL THEN
    PERFORM pg_advisory_lock_shared(gate);
  END IF;
END $$;

-- First use in a new backend: loading zklock (zk_session() opens no
-- session), then the first acquisition, which connects to ZooKeeper, then
-- n later acquisitions, each followed by a release; seconds of each part
-- (the later ones averaged).
CREATE FUNCTION bench_first_use(lock text, n int, pause float8 DEFAULT 0,
                                OUT first_s float8, OUT later_s float8)
LANGUAGE plpgsql AS $$
DECLARE
  t0 timestamptz;
  later interval := '0';
BEGIN
  -- The backend's first zklock call: it maps the shared area and takes its
  -- slot; the server's ZooKeeper session is the session worker's already.
  -- With lock NULL, pg_advisory_lock instead: what PostgreSQL's own first
  -- call in a new backend costs (catalog caches, the statement's plan).
  -- With a pause, each call comes that long after the last, as the first
  -- comes after the connection: the later ones then pay what an idle
  -- machine costs (processes and ZooKeeper's threads woken, a disk's first
  -- sync) as the first does, and the difference is the first use's own.
  FOR i IN 0..n LOOP
    IF pause > 0 THEN
      PERFORM pg_sleep(pause);
    END IF;
    t0 := clock_timestamp();
    IF lock IS NULL THEN
      PERFORM pg_advisory_lock(7);
    ELSE
      PERFORM zk_lock_acquire(lock);
    END IF;
    IF i = 0 THEN
      first_s := extract(epoch FROM clock_timestamp() - t0);
    ELSE
      later := later + (clock_timestamp() - t0);
    END IF;
    IF lock IS NULL THEN
      PERFORM pg_advisory_unlock(7);
    ELSE
      PERFORM zk_lock_release(lock);
    END IF;
  END LOOP;
  later_s := extract(epoch FROM later) / n;
END $$;

-- The 1,000-backend measurement opens its backends through dblink.
CREATE EXTENSION IF NOT EXISTS dblink;

-- Revocation, the asker's side: ask the holders of lock, then wait until the
-- holder's node records when its server heard the request (the
-- release_requested_at it writes back).  Seconds from the request's start.
CREATE FUNCTION bench_revoke(lock text) RETURNS double precision
LANGUAGE plpgsql AS $$
DECLARE
  t0 timestamptz := clock_timestamp();
  heard timestamptz;
BEGIN
  IF zk_lock_request_release(lock) <> 1 THEN
    RAISE EXCEPTION 'no holder of % was asked', lock;
  END IF;
  FOR i IN 1..10000 LOOP
    SELECT (info->>'release_requested_at')::timestamptz INTO heard
      FROM zk_lock_queue(lock) WHERE holding;
    IF heard IS NOT NULL THEN
      RETURN extract(epoch FROM heard - t0);
    END IF;
    PERFORM pg_sleep(0.001);
  END LOOP;
  RAISE EXCEPTION 'the holder of % did not hear the request', lock;
END $$;

-- What the holder's look costs: seconds per zk_lock_release_requested().
CREATE FUNCTION bench_release_requested(lock text, n int) RETURNS double precision
LANGUAGE plpgsql AS $$
DECLARE
  t0 timestamptz := clock_timestamp();
BEGIN
  FOR i IN 1..n LOOP
    PERFORM zk_lock_release_requested(lock);
  END LOOP;
  RETURN extract(epoch FROM clock_timestamp() - t0) / n;
END $$;

-- A burst: each backend waits at the gate (an advisory lock the benchmark
-- holds exclusively), then releases or acquires its lock in the same
-- instant as every other; returns how long its call took, in milliseconds.
CREATE FUNCTION bench_burst_step(what text, lock text, gate bigint)
RETURNS float8
LANGUAGE plpgsql AS $$
DECLARE
  t0 timestamptz;
BEGIN
  PERFORM pg_advisory_lock_shared(gate);
  PERFORM pg_advisory_unlock_shared(gate);
  t0 := clock_timestamp();
  IF what = 'release' THEN
    IF NOT zk_lock_release(lock) THEN
      RAISE EXCEPTION 'lock % was not held', lock;
    END IF;
  ELSE
    PERFORM zk_lock_acquire(lock, 300000);
  END IF;
  RETURN extract(epoch FROM clock_timestamp() - t0) * 1000;
END $$;

-- The commit guard's proof (issue 47).  The guard's round trip is a set,
-- counted in zk_session_stats' sets, which takes in this backend's own
-- counts when read; the session worker's own syncs are not counted.
--
-- One transaction that writes a row under a transaction lock and commits
-- pause seconds after its acquisition started (the create: the server's
-- last write): the acquisition's and the COMMIT's milliseconds (the COMMIT
-- holds the guard and the lock's release), and the guard's sets.
CREATE PROCEDURE bench_proof_commit(lock text, pause float8,
                                    INOUT acquire_ms float8 DEFAULT NULL,
                                    INOUT commit_ms float8 DEFAULT NULL,
                                    INOUT sets bigint DEFAULT NULL)
LANGUAGE plpgsql AS $$
DECLARE
  sets0 bigint;
  t0 timestamptz;
  t1 timestamptz;
BEGIN
  SELECT s.sets INTO sets0 FROM zk_session_stats s;
  t0 := clock_timestamp();
  PERFORM zk_lock_xact_acquire(lock);
  acquire_ms := extract(epoch FROM clock_timestamp() - t0) * 1000;
  INSERT INTO bench_writes VALUES (0);
  PERFORM pg_sleep(pause - extract(epoch FROM clock_timestamp() - t0));
  t1 := clock_timestamp();
  COMMIT;
  commit_ms := extract(epoch FROM clock_timestamp() - t1) * 1000;
  SELECT s.sets - sets0 INTO sets FROM zk_session_stats s;
END $$;

-- A lock held across transactions (none: lock NULL): a row written and
-- committed over and over for the given seconds.  The COMMITs, the seconds
-- they took, the guard's sets, and the 99th percentile and the slowest
-- COMMIT in milliseconds.
CREATE PROCEDURE bench_proof_held(lock text, seconds float8,
                                  INOUT commits int DEFAULT NULL,
                                  INOUT elapsed_s float8 DEFAULT NULL,
                                  INOUT sets bigint DEFAULT NULL,
                                  INOUT p99_ms float8 DEFAULT NULL,
                                  INOUT max_ms float8 DEFAULT NULL)
LANGUAGE plpgsql AS $$
DECLARE
  ms float8[];
  sets0 bigint;
  start timestamptz;
  t0 timestamptz;
  t1 timestamptz;
BEGIN
  IF lock IS NOT NULL THEN
    PERFORM zk_lock_acquire(lock);
  END IF;
  SELECT s.sets INTO sets0 FROM zk_session_stats s;
  COMMIT;
  commits := 0;
  start := clock_timestamp();
  LOOP
    INSERT INTO bench_writes VALUES (commits);
    t0 := clock_timestamp();
    COMMIT;
    t1 := clock_timestamp();
    commits := commits + 1;
    ms[commits] := extract(epoch FROM t1 - t0) * 1000;
    EXIT WHEN t1 >= start + seconds * interval '1 second';
  END LOOP;
  elapsed_s := extract(epoch FROM t1 - start);
  SELECT s.sets - sets0 INTO sets FROM zk_session_stats s;
  SELECT percentile_disc(0.99) WITHIN GROUP (ORDER BY x), max(x)
    INTO p99_ms, max_ms FROM unnest(ms) AS x;
  IF lock IS NOT NULL THEN
    PERFORM zk_lock_release(lock);
  END IF;
  TRUNCATE bench_writes;
END $$;

-- Under write load, as zkbare's paced does, for the given seconds: with
-- kind 'holders', hold lock and call zk_lock_holders on it, pausing
-- min_pause_ms after each; with 'acquire', acquire and release lock,
-- pausing a random min_pause_ms to max_pause_ms after each.  Milliseconds
-- per call timed; one first, untimed.
CREATE FUNCTION bench_proof_paced(kind text, lock text, seconds float8,
                                  min_pause_ms int, max_pause_ms int DEFAULT NULL)
RETURNS float8[]
LANGUAGE plpgsql AS $$
DECLARE
  ms float8[] := '{}';
  end_at timestamptz := clock_timestamp() + seconds * interval '1 second';
  t0 timestamptz;
BEGIN
  PERFORM zk_lock_acquire(lock);
  IF kind = 'acquire' THEN
    PERFORM zk_lock_release(lock);
  END IF;
  LOOP
    t0 := clock_timestamp();
    EXIT WHEN t0 >= end_at;
    IF kind = 'holders' THEN
      PERFORM * FROM zk_lock_holders(lock);
    ELSE
      PERFORM zk_lock_acquire(lock);
    END IF;
    ms := ms || extract(epoch FROM clock_timestamp() - t0) * 1000;
    IF kind = 'holders' THEN
      PERFORM pg_sleep(min_pause_ms / 1000.0);
    ELSE
      PERFORM zk_lock_release(lock);
      PERFORM pg_sleep((min_pause_ms + random() * (max_pause_ms - min_pause_ms)) / 1000.0);
    END IF;
  END LOOP;
  IF kind = 'holders' THEN
    PERFORM zk_lock_release(lock);
  END IF;
  RETURN ms;
END $$;
