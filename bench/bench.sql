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
