-- Gates and double barriers: ZooKeeper's barrier recipes, as Curator and
-- Kazoo lay them out.  Other members are dblink sessions of this database
-- (the TAP tests 076 to 078 put them on two servers and beside Curator and
-- Kazoo).

-- A session that runs its query without waiting for it.
CREATE FUNCTION send_in(conn text, query text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  IF NOT (conn = ANY (coalesce(dblink_get_connections(), '{}'))) THEN
    PERFORM dblink_connect(conn, 'dbname=' || current_database());
  END IF;
  PERFORM dblink_send_query(conn, query);
END $$;

-- Its answer (one text column), or its SQLSTATE and error, once it comes.
CREATE FUNCTION answer_of(conn text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
  r text;
BEGIN
  SELECT t.r INTO r FROM dblink_get_result(conn) AS t(r text);
  PERFORM * FROM dblink_get_result(conn) AS t(r text);
  RETURN r;
EXCEPTION WHEN OTHERS OR query_canceled THEN
  PERFORM * FROM dblink_get_result(conn, false) AS t(r text);
  RETURN SQLSTATE || ': ' || SQLERRM;
END $$;

-- The members of a barrier, without what varies from run to run.
CREATE VIEW members_of AS
  SELECT barrier_name, position, parties, pid = pg_backend_pid() AS mine,
         state, before_ready, usename = current_user AS by_me,
         znode ~ '/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' AS uuid_named,
         czxid > 0 AS has_czxid, entered_at <= now() AS has_time, data
    FROM zk_cluster_barriers;

-- ---------------------------------------------------------------------------
-- A gate.  Closed while its node exists; nobody's, not transactional.
SELECT zk_gate_close('g1') AS closed, zk_gate_close('g1') AS closed_again;
SELECT gate_name, path, closed, pid = pg_backend_pid() AS by_me,
       usename = current_user AS user_ok, closed_at <= now() AS has_time, data
  FROM zk_gates('g1');
SELECT gate_name, closed FROM zk_cluster_gates;
-- Waiting: a time-out is false; a try (0) never waits.
SELECT zk_gate_wait('g1', 100) AS passed, zk_gate_wait('g1', 0) AS try_passed;
-- A waiter elsewhere passes when it opens.
SELECT send_in('w1', $$SELECT zk_gate_wait('g1')::text$$);
SELECT wait_until($$SELECT waiting = 1 FROM zk_barrier_stats WHERE kind = 'gate'$$) AS waits;
SELECT zk_gate_open('g1') AS opened, zk_gate_open('g1') AS opened_again;
SELECT answer_of('w1') AS waiter_passed;
SELECT gate_name, closed, czxid, data FROM zk_gates('g1');
SELECT count(*) AS closed_gates FROM zk_cluster_gates;
SELECT zk_gate_wait('g1') AS open_passes_at_once;
-- Closed in a transaction that rolls back: still closed (not transactional).
BEGIN;
SELECT zk_gate_close('g2');
ROLLBACK;
SELECT closed FROM zk_gates('g2');
-- DISCARD ALL leaves gates alone: they are nobody's.
DISCARD ALL;
SELECT closed FROM zk_gates('g2');
SELECT zk_gate_open('g2');

-- A gate opened and closed again while a waiter waits: the waiter saw it
-- open (its node is another one now) and passes.
SELECT zk_gate_close('g3');
SELECT send_in('w1', $$SELECT zk_gate_wait('g3', 20000)::text$$);
SELECT wait_until($$SELECT waiting = 1 FROM zk_barrier_stats WHERE kind = 'gate'$$) AS waits;
SELECT zk_gate_open('g3') AND zk_gate_close('g3') AS reopened_and_closed;
SELECT answer_of('w1') AS waiter_passed;
SELECT zk_gate_open('g3');

-- ---------------------------------------------------------------------------
-- A double barrier of one: enter and leave pass at once.
SELECT zk_barrier_enter('b1', 1) AS entered;
SELECT * FROM members_of WHERE barrier_name = 'b1';
SELECT barrier_name, members, parties, ready, ready_stale FROM zk_barriers('b1');
SELECT zk_barrier_leave('b1') AS left;
SELECT count(*) AS members FROM zk_barrier_members('b1');
SELECT barrier_name, members, ready FROM zk_barriers('b1');

-- Three members: two wait until the third enters, then none leaves until
-- all have left.
SELECT send_in('m1', $$SELECT zk_barrier_enter('b3', 3, 20000)::text$$);
SELECT send_in('m2', $$SELECT zk_barrier_enter('b3', 3, 20000)::text$$);
SELECT wait_until($$SELECT count(*) = 2 FROM members_of
                    WHERE barrier_name = 'b3' AND state = 'entering'$$) AS two_wait;
SELECT barrier_name, members, parties, ready FROM zk_barriers('b3');
SELECT zk_barrier_enter('b3', 3, 20000) AS third_entered;
SELECT answer_of('m1') AS m1_entered, answer_of('m2') AS m2_entered;
SELECT array_agg(position ORDER BY position) AS positions,
       count(*) FILTER (WHERE mine) AS mine, bool_and(parties = 3) AS parties,
       bool_and(state = 'inside') AS inside, bool_and(before_ready) AS before_ready
  FROM members_of WHERE barrier_name = 'b3';
SELECT barrier_name, members, ready, ready_stale FROM zk_barriers('b3');
-- A fourth that comes late passes at once: the round passed.
SELECT send_in('m4', $$SELECT zk_barrier_enter('b3', 3, 20000)::text$$);
SELECT answer_of('m4') AS late_entered;
-- Leaving: m1 and m2 wait for this session and m4.
SELECT send_in('m1', $$SELECT zk_barrier_leave('b3', 20000)::text$$);
SELECT send_in('m2', $$SELECT zk_barrier_leave('b3', 20000)::text$$);
SELECT wait_until($$SELECT waiting = 2 FROM zk_barrier_stats WHERE kind = 'leave'$$) AS two_leave;
-- ready went with the first leave: a newcomer would not pass on it.
SELECT ready FROM zk_barriers('b3');
-- A leave that times out is false, and this session is a member no more.
SELECT zk_barrier_leave('b3', 200) AS left_in_time;
SELECT count(*) FILTER (WHERE mine) AS mine_left FROM members_of WHERE barrier_name = 'b3';
SELECT send_in('m4', $$SELECT zk_barrier_leave('b3', 20000)::text$$);
SELECT answer_of('m1') AS m1_left, answer_of('m2') AS m2_left, answer_of('m4') AS m4_left;
SELECT count(*) AS members FROM zk_barrier_members('b3');
SELECT ready FROM zk_barriers('b3');

-- An enter that times out is false and leaves nothing behind.
SELECT zk_barrier_enter('b2', 2, 200) AS entered;
SELECT count(*) AS members FROM zk_barrier_members('b2');
SELECT zk_barrier_enter('b2', 2, 0) AS tried;
SELECT count(*) AS members FROM zk_barrier_members('b2');

-- ---------------------------------------------------------------------------
-- Errors.
SELECT sqlstate_of($$SELECT zk_barrier_enter(NULL, 2)$$);
SELECT sqlstate_of($$SELECT zk_barrier_enter('', 2)$$);
SELECT sqlstate_of($$SELECT zk_barrier_enter(repeat('b', 257), 2)$$);
SELECT sqlstate_of($$SELECT zk_barrier_enter('e', NULL)$$);
SELECT sqlstate_of($$SELECT zk_barrier_enter('e', 0)$$);
SELECT sqlstate_of($$SELECT zk_barrier_enter('e', 2, -1)$$);
SELECT sqlstate_of($$SELECT zk_gate_wait('g', -1)$$);
SELECT sqlstate_of($$SELECT zk_gate_close(NULL)$$);
SELECT sqlstate_of($$SELECT zk_barrier_leave('never-entered')$$);
SELECT sqlstate_of($$SELECT zk_barrier_enter('/zookeeper/x', 1)$$);
-- Entering twice.
SELECT zk_barrier_enter('twice', 1);
SELECT sqlstate_of($$SELECT zk_barrier_enter('twice', 1)$$);
SELECT zk_barrier_leave('twice');
-- Other parties than a zklock member inside: refused, and no node left.
SELECT send_in('m1', $$SELECT zk_barrier_enter('mixed', 3, 20000)::text$$);
SELECT wait_until($$SELECT count(*) = 1 FROM members_of WHERE barrier_name = 'mixed'$$) AS m1_waits;
SELECT sqlstate_of($$SELECT zk_barrier_enter('mixed', 2, 1000)$$);
SELECT count(*) AS members FROM zk_barrier_members('mixed');
SELECT dblink_cancel_query('m1');
SELECT answer_of('m1') AS m1_cancelled;
SELECT wait_until($$SELECT count(*) = 0 FROM zk_barrier_members('mixed')$$) AS none_left;

-- ---------------------------------------------------------------------------
-- Not transactional: an enter in a transaction that rolls back stays.
BEGIN;
SELECT zk_barrier_enter('xact', 1);
ROLLBACK;
SELECT count(*) FILTER (WHERE mine) AS mine FROM members_of WHERE barrier_name = 'xact';
SELECT zk_barrier_leave('xact');

-- Cancelled (statement_timeout): the wait ends, the node goes.
SET statement_timeout = 300;
SELECT zk_barrier_enter('cancelled', 2);
RESET statement_timeout;
SELECT wait_until($$SELECT count(*) = 0 FROM zk_barrier_members('cancelled')$$) AS node_gone;
SELECT sqlstate_of($$SELECT zk_barrier_leave('cancelled')$$);

-- DISCARD ALL ends the session's memberships at once.
SELECT zk_barrier_enter('discarded', 1);
DISCARD ALL;
SELECT wait_until($$SELECT count(*) = 0 FROM zk_barrier_members('discarded')$$) AS node_gone;
SELECT sqlstate_of($$SELECT zk_barrier_leave('discarded')$$);

-- A session's exit ends its memberships: the worker deletes its node.
SELECT in_new_session($$SELECT zk_barrier_enter('exited', 1)::text$$) AS entered;
SELECT wait_until($$SELECT count(*) = 0 FROM zk_barrier_members('exited')$$) AS node_gone;

-- ---------------------------------------------------------------------------
-- A ready left behind: members entered and went without leaving.  It is
-- older than every member that comes next: ignored and deleted, not passed.
SELECT in_new_session($$SELECT zk_barrier_enter('stale', 1)::text$$) AS entered;
SELECT wait_until($$SELECT count(*) = 0 FROM zk_barrier_members('stale')$$) AS member_gone;
SELECT members, ready, ready_stale FROM zk_barriers('stale');
SELECT zk_barrier_enter('stale', 2, 300) AS passed_on_old_ready;
SELECT members, ready FROM zk_barriers('stale');
-- The next round works.
SELECT send_in('m1', $$SELECT zk_barrier_enter('stale', 2, 20000)::text$$);
SELECT zk_barrier_enter('stale', 2, 20000) AS entered;
SELECT answer_of('m1') AS m1_entered;
SELECT send_in('m1', $$SELECT zk_barrier_leave('stale', 20000)::text$$);
SELECT zk_barrier_leave('stale', 20000) AS left;
SELECT answer_of('m1') AS m1_left;
SELECT members, ready FROM zk_barriers('stale');

-- A superuser's reset deletes every child, whoever's: a waiting member
-- hears it at once, a member inside at its next call.
SELECT send_in('m1', $$SELECT zk_barrier_enter('reset', 3, 20000)::text$$);
SELECT send_in('m2', $$SELECT zk_barrier_enter('reset', 3, 20000)::text$$);
SELECT wait_until($$SELECT count(*) = 2 FROM zk_barrier_members('reset')$$) AS two_wait;
SELECT zk_barrier_reset('reset') AS deleted;
SELECT answer_of('m1') AS m1, answer_of('m2') AS m2;
SELECT zk_barrier_enter('reset-inside', 1);
SELECT zk_barrier_reset('reset-inside') AS deleted;
SELECT sqlstate_of($$SELECT zk_barrier_leave('reset-inside')$$) AS member;
SELECT sqlstate_of($$SELECT zk_barrier_leave('reset-inside')$$) AS forgotten;
SELECT barrier_name, members, ready FROM zk_barriers()
 WHERE barrier_name IN ('reset', 'reset-inside') ORDER BY 1;

-- ---------------------------------------------------------------------------
-- Names: a lock, a gate and a barrier of one name are three things, each in
-- its own place; neither a gate nor a barrier is listed as a lock.
SELECT zk_lock_acquire('same'), zk_gate_close('same'), zk_barrier_enter('same', 1);
SELECT lock_name, mode FROM zk_lock_holders('same');
SELECT count(*) AS not_locks FROM zk_cluster_locks WHERE lock_name LIKE '\%%' OR lock_name = 'same' AND mode <> 'exclusive';
SELECT path FROM zk_gates('same');
SELECT path FROM zk_barriers('same');
SELECT barrier_name, members FROM zk_barriers() WHERE barrier_name = 'same';
SELECT zk_lock_release('same'), zk_gate_open('same'), zk_barrier_leave('same');
-- An absolute path is the same node for every recipe (one recipe per path).
SELECT zk_barrier_enter('/zklock_regress_abs/barrier', 1);
SELECT barrier_name, path, members FROM zk_barriers('/zklock_regress_abs/barrier');
SELECT zk_barrier_leave('/zklock_regress_abs/barrier');
SELECT zk_gate_close('/zklock_regress_abs/gate'), zk_gate_open('/zklock_regress_abs/gate');

SELECT dblink_disconnect(c) FROM unnest(dblink_get_connections()) AS c ORDER BY 1;

-- ---------------------------------------------------------------------------
-- Privileges: closing, opening and resetting are for superusers unless
-- granted; waiting, entering, leaving and the views are everybody's.
SELECT current_user AS su \gset
CREATE ROLE barrier_user LOGIN;
SELECT zk_gate_close('priv-gate');
\c - barrier_user
SELECT sqlstate_of($$SELECT zk_gate_close('priv-gate')$$);
SELECT sqlstate_of($$SELECT zk_gate_open('priv-gate')$$);
SELECT sqlstate_of($$SELECT zk_barrier_reset('priv-barrier')$$);
SELECT zk_gate_wait('priv-gate', 0) AS passed;
SELECT gate_name, closed FROM zk_cluster_gates;
SELECT zk_barrier_enter('priv-barrier', 1), zk_barrier_leave('priv-barrier');
SELECT sqlstate_of($$SELECT zk_barrier_enter('/zklock_regress_abs/barrier', 1)$$);
SELECT sqlstate_of($$SELECT zk_gate_wait('/zklock_regress_abs/gate', 0)$$);
SELECT sqlstate_of($$SELECT * FROM zk_barriers('/zklock_regress_abs/barrier')$$);
SELECT kind, passed > 0 AS counted FROM zk_barrier_stats ORDER BY kind;
\c - :su
GRANT EXECUTE ON FUNCTION zk_gate_open(text) TO barrier_user;
\c - barrier_user
SELECT zk_gate_open('priv-gate');
\c - :su
REVOKE EXECUTE ON FUNCTION zk_gate_open(text) FROM barrier_user;
DROP ROLE barrier_user;

-- ---------------------------------------------------------------------------
-- Statistics: waits by kind, this server's; reset with the others.
SELECT kind, passed > 0 AS passed, timeouts > 0 AS timed_out,
       cancels > 0 AS cancelled, total_wait_ms > 0 AS waited,
       max_wait_ms <= total_wait_ms AS max_ok, waiting
  FROM zk_barrier_stats ORDER BY kind;
SELECT zk_lock_stats_reset();
SELECT kind, passed, timeouts, cancels, total_wait_ms, max_wait_ms, waiting
  FROM zk_barrier_stats ORDER BY kind;

-- Nothing left but the ready of the rounds whose members went without
-- leaving: a reset deletes them.
SELECT count(*) AS members FROM zk_cluster_barriers;
SELECT barrier_name, zk_barrier_reset(barrier_name) FROM zk_barriers() WHERE ready
 ORDER BY 1;
SELECT count(*) AS barriers FROM zk_barriers();
SELECT count(*) AS gates FROM zk_cluster_gates;
DROP VIEW members_of;
DROP FUNCTION send_in(text, text), answer_of(text);
