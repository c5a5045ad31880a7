-- The README's batch job, as written there (test/docs_check.py checks that
-- the procedure below is the README's): batches commit one by one; a
-- failed batch lets go of the lock and fails the CALL, with the batches
-- before it committed; the lock is free for others after both runs.
CREATE TABLE billing_runs (token bigint, started timestamptz);
CREATE TABLE invoices_due (id int PRIMARY KEY, billed boolean DEFAULT false, poison boolean DEFAULT false);
INSERT INTO invoices_due (id) SELECT generate_series(1, 2500);
-- Bills up to n invoices, in order; an invoice marked poison fails its batch.
CREATE FUNCTION bill_next_batch(n int) RETURNS int LANGUAGE plpgsql AS $$
DECLARE
  done int;
BEGIN
  IF EXISTS (SELECT FROM (SELECT poison FROM invoices_due WHERE NOT billed ORDER BY id LIMIT n) b
              WHERE poison) THEN
    RAISE EXCEPTION 'invoice data is broken';
  END IF;
  UPDATE invoices_due SET billed = true
   WHERE id IN (SELECT id FROM invoices_due WHERE NOT billed ORDER BY id LIMIT n);
  GET DIAGNOSTICS done = ROW_COUNT;
  RETURN done;
END $$;

CREATE PROCEDURE nightly_billing()
LANGUAGE plpgsql AS $$
DECLARE
  billed int;
BEGIN
  -- Wait at most 10 minutes for whoever is running it elsewhere.
  IF NOT zk_lock_acquire('nightly-billing', 600000) THEN
    RAISE EXCEPTION 'nightly billing is still running on another node';
  END IF;
  -- Stamp the work with the fencing token (see below).
  INSERT INTO billing_runs (token, started) VALUES (zk_lock_token('nightly-billing'), now());
  -- One batch per transaction.  Between batches, stop politely if anybody,
  -- on any node, asked for the lock (zk_lock_request_release).
  LOOP
    BEGIN
      billed := bill_next_batch(1000);
    EXCEPTION WHEN OTHERS THEN
      -- A failed batch must not leave the lock held by this session.
      PERFORM zk_lock_release('nightly-billing');
      RAISE;
    END;
    COMMIT;   -- outside the block: no COMMIT inside an exception handler's
    EXIT WHEN billed = 0 OR zk_lock_release_requested('nightly-billing');
  END LOOP;
  PERFORM zk_lock_release('nightly-billing');
END $$;

CALL nightly_billing();
SELECT count(*) FILTER (WHERE billed) AS billed, count(*) AS invoices FROM invoices_due;
SELECT count(*) AS runs, bool_and(token > 0) AS stamped FROM billing_runs;
SELECT * FROM my_locks;

-- A batch that fails: the batches before it stay committed, the CALL fails
-- with the batch's error, and the lock is not left held.
INSERT INTO invoices_due (id) SELECT generate_series(2501, 4500);
UPDATE invoices_due SET poison = true WHERE id = 4000;
CALL nightly_billing();
SELECT count(*) FILTER (WHERE billed) AS billed, count(*) AS invoices FROM invoices_due;
SELECT * FROM my_locks;
SELECT in_new_session($$SELECT zk_lock_try_acquire('nightly-billing')::text$$) AS free_for_others;

DROP PROCEDURE nightly_billing();
DROP FUNCTION bill_next_batch(int);
DROP TABLE billing_runs, invoices_due;
