-- Fencing at the resource: zk_lock_fence, zk_lock_fences, zk_lock_fence_trigger.
-- Concurrent writers and the postgres_fdw and dblink paths: test/tap/052_fence.pl.

-- The first token of a resource is recorded; an equal one passes, a higher
-- one raises the fence, a lower one fails with 40001.
SELECT zk_lock_fence('billing', 100);
SELECT zk_lock_fence('billing', 100);
SELECT resource, token FROM zk_lock_fences ORDER BY resource;
SELECT zk_lock_fence('billing', 250);
SELECT sqlstate_of($$SELECT zk_lock_fence('billing', 249)$$);
SELECT resource, token FROM zk_lock_fences ORDER BY resource;
-- Resources are independent.
SELECT zk_lock_fence('reports', 7);
SELECT resource, token FROM zk_lock_fences ORDER BY resource;

-- The refusal names the resource, both tokens, and says what happened.
SELECT zk_lock_fence('billing', 3);

-- The refused transaction rolls back, with what it wrote.
CREATE TABLE invoices (id int, amount int);
BEGIN;
INSERT INTO invoices VALUES (1, 10);
SELECT zk_lock_fence('billing', 1);
COMMIT;
SELECT count(*) AS invoices_after_refusal FROM invoices;

-- recorded_at is when the highest token was first recorded: an equal token
-- does not move it, a higher one does.
SELECT recorded_at AS first_recorded FROM zk_lock_fences WHERE resource = 'billing' \gset
SELECT pg_sleep(0.01);
SELECT zk_lock_fence('billing', 250);
SELECT recorded_at = :'first_recorded' AS unchanged_by_equal
  FROM zk_lock_fences WHERE resource = 'billing';
SELECT zk_lock_fence('billing', 251);
SELECT recorded_at > :'first_recorded' AS moved_by_higher
  FROM zk_lock_fences WHERE resource = 'billing';

-- A NULL token or resource is an error, never a pass.
SELECT sqlstate_of($$SELECT zk_lock_fence('billing', NULL)$$);
SELECT sqlstate_of($$SELECT zk_lock_fence(NULL, 5)$$);
SELECT sqlstate_of($$SELECT zk_lock_fence('billing', zk_lock_token('not-held'))$$);

-- A fence in a subtransaction that rolls back records nothing.
BEGIN;
SAVEPOINT s;
SELECT zk_lock_fence('billing', 900);
ROLLBACK TO SAVEPOINT s;
COMMIT;
SELECT token FROM zk_lock_fences WHERE resource = 'billing';

-- zk_lock_fence(name): the token of the lock this session holds exclusively.
SELECT sqlstate_of($$SELECT zk_lock_fence('fenced-job')$$);
SELECT zk_lock_acquire('fenced-job');
SELECT zk_lock_fence('fenced-job') = zk_lock_token('fenced-job') AS fenced_with_own_token;
SELECT token = zk_lock_token('fenced-job') AS recorded
  FROM zk_lock_fences WHERE resource = 'fenced-job';
SELECT zk_lock_release('fenced-job');
-- Held shared is no exclusive hold.
SELECT zk_lock_acquire_shared('fenced-job');
SELECT sqlstate_of($$SELECT zk_lock_fence('fenced-job')$$);
SELECT zk_lock_release_shared('fenced-job');
-- The next holder's token is higher, so the old one is refused after it.
SELECT token AS old_token FROM zk_lock_fences WHERE resource = 'fenced-job' \gset
SELECT in_new_session($$SELECT zk_lock_acquire('fenced-job') AND zk_lock_fence('fenced-job') > 0$$);
SELECT sqlstate_of(format('SELECT zk_lock_fence(%L, %s)', 'fenced-job', :old_token)) LIKE '40001:%' AS old_token_refused;

-- The trigger, with a token column: each written row carries the token,
-- which is fenced and then cleared, so that an UPDATE that does not set it
-- again cannot pass with an older holder's token.
CREATE TABLE ledger (id int PRIMARY KEY, amount int, fence_token bigint);
CREATE TRIGGER ledger_fence BEFORE INSERT OR UPDATE OR DELETE ON ledger
  FOR EACH ROW EXECUTE FUNCTION zk_lock_fence_trigger('ledger', 'fence_token');
INSERT INTO ledger VALUES (1, 10, 500);
SELECT * FROM ledger;
SELECT token FROM zk_lock_fences WHERE resource = 'ledger';
UPDATE ledger SET amount = 11, fence_token = 500 WHERE id = 1;
SELECT sqlstate_of($$UPDATE ledger SET amount = 12 WHERE id = 1$$);
SELECT sqlstate_of($$UPDATE ledger SET amount = 12, fence_token = 499 WHERE id = 1$$);
SELECT sqlstate_of($$INSERT INTO ledger VALUES (2, 20, 499)$$);
SELECT * FROM ledger;
-- Without a carried token, the transaction's zklock.fence_token.
SELECT sqlstate_of($$DELETE FROM ledger WHERE id = 1$$);
BEGIN;
SET LOCAL zklock.fence_token = 499;
SELECT sqlstate_of($$DELETE FROM ledger WHERE id = 1$$);
SET LOCAL zklock.fence_token = 501;
DELETE FROM ledger WHERE id = 1;
INSERT INTO ledger (id, amount) VALUES (3, 30);
COMMIT;
SELECT * FROM ledger;
SELECT token FROM zk_lock_fences WHERE resource = 'ledger';
SELECT sqlstate_of($$SET zklock.fence_token = 'twelve'$$);

-- The trigger, per statement, with the setting only.
CREATE TABLE audit (note text);
CREATE TRIGGER audit_fence BEFORE INSERT OR UPDATE OR DELETE ON audit
  FOR EACH STATEMENT EXECUTE FUNCTION zk_lock_fence_trigger('audit');
SELECT sqlstate_of($$INSERT INTO audit VALUES ('no token')$$);
BEGIN;
SET LOCAL zklock.fence_token = 40;
INSERT INTO audit SELECT 'row ' || i FROM generate_series(1, 3) i;
COMMIT;
SELECT count(*) AS audit_rows FROM audit;

-- Misuse of the trigger.
CREATE TABLE misused (id int, t bigint);
CREATE TRIGGER misused_after AFTER INSERT ON misused
  FOR EACH ROW EXECUTE FUNCTION zk_lock_fence_trigger('misused', 't');
SELECT sqlstate_of($$INSERT INTO misused VALUES (1, 1)$$);
DROP TRIGGER misused_after ON misused;
CREATE TRIGGER misused_column BEFORE INSERT ON misused
  FOR EACH ROW EXECUTE FUNCTION zk_lock_fence_trigger('misused', 'no_such_column');
SELECT sqlstate_of($$INSERT INTO misused VALUES (1, 1)$$);
DROP TABLE misused;

-- Callers fence; they do not write the table behind the view.  (The grants
-- PUBLIC has by default were taken away by the privileges test.)
CREATE ROLE fence_user;
GRANT EXECUTE ON FUNCTION zk_lock_fence(text, bigint) TO fence_user;
GRANT SELECT ON zk_lock_fences TO fence_user;
SET ROLE fence_user;
SELECT zk_lock_fence('billing', 251);
SELECT count(*) > 0 AS can_read FROM zk_lock_fences;
SELECT sqlstate_of($$UPDATE zk_lock_fence_tokens SET token = 0$$);
SELECT sqlstate_of($$DELETE FROM zk_lock_fences$$);
RESET ROLE;

-- pg_dump keeps the rows: the table is an extension configuration table.
SELECT extconfig::regclass[] AS config_tables FROM pg_extension WHERE extname = 'zklock';

-- A resource is retired by deleting its row, as a superuser.
DELETE FROM zk_lock_fences WHERE resource = 'reports';
SELECT resource FROM zk_lock_fences ORDER BY resource;

DROP TABLE invoices, ledger, audit;
DROP OWNED BY fence_user;
DROP ROLE fence_user;
