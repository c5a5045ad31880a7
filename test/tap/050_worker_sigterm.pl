
# The session worker stopped with SIGTERM, as an administrator or a script
# that ends "every other process" does (issue 27, item 1): it exited with 0,
# which PostgreSQL takes for "done", and was never started again: every
# acquisition on the server failed with 08001 until PostgreSQL was
# restarted.  Now it says so in the log and exits so that the postmaster
# starts it again: locks work again within a few seconds, five times over.
# A server that shuts down does not start it again.  The worker shows in
# pg_stat_activity and answers pg_cancel_backend, pg_terminate_backend and
# pg_log_backend_memory_contexts as an operator expects (item 2).

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

use ZklockTest;

my $zk = start_zk();
my $node = zk_node('node_a', $zk);
is($node->safe_psql('postgres', q{SELECT zk_lock_acquire('before', 10000)}), 't', 'a lock is granted');

for my $round (1 .. 5)
{
	my $old = worker_pid($node);
	my $t0 = time;
	kill 'TERM', $old;
	my $new;
	while (time - $t0 < 20)
	{
		$new = worker_pid($node);
		last if defined $new && $new != $old;
		sleep_for(0.1);
	}
	isnt($new, $old, "round $round: a new session worker runs after SIGTERM");
	is($node->safe_psql('postgres', qq{SELECT zk_lock_acquire('after-$round', 10000)}), 't',
		"round $round: a lock is granted again");
	my $took = time - $t0;
	cmp_ok($took, '<', 10, sprintf("round $round: %.1f s after the SIGTERM", $took));
}
ok($node->log_contains('zklock session worker stopping on request; it is started again in 1 s'),
	'the log says the worker stops and is started again');

# Visible as an operator expects (issue 27, item 2): in pg_stat_activity,
# with its own backend_type and its wait event between events, its pid the
# one zk_session() gives.  pg_cancel_backend leaves it (and its session)
# alone, pg_log_backend_memory_contexts reaches it, pg_terminate_backend
# stops it and the postmaster starts it again.
{
	my $pid = worker_pid($node);
	my $event = $node->pg_version >= 17 ? 'ZkSessionWorkerMain' : 'Extension';
	ok( $node->poll_query_until('postgres', qq{
SELECT backend_type || '/' || coalesce(datname, '-') || '/' || wait_event_type || '/' || wait_event
  FROM pg_stat_activity WHERE pid = $pid}, "zklock session worker/-/Extension/$event"),
		"pg_stat_activity shows the worker, connected to no database, waiting in $event");
	is($node->safe_psql('postgres', 'SELECT worker_pid FROM zk_session()'), $pid,
		'zk_session() gives its pid');
	my $session = $node->safe_psql('postgres', 'SELECT session_id FROM zk_session()');
	is($node->safe_psql('postgres', "SELECT pg_cancel_backend($pid)"), 't', 'pg_cancel_backend of the worker');
	sleep_for(1);
	is($node->safe_psql('postgres', 'SELECT worker_pid || session_id FROM zk_session()'),
		$pid . $session, 'cancelled, the worker and its session go on');
	my $offset = -s $node->logfile;
	is($node->safe_psql('postgres', "SELECT pg_log_backend_memory_contexts($pid)"), 't',
		'pg_log_backend_memory_contexts of the worker');
	ok($node->wait_for_log(qr/logging memory contexts of PID $pid/, $offset),
		'the worker logs its memory contexts');
	ok($node->wait_for_log(qr/zklock worker turn: \d+ total in/, $offset),
		'among them the context each turn of its loop allocates in, and frees');
	my $t0 = time;
	is($node->safe_psql('postgres', "SELECT pg_terminate_backend($pid)"), 't', 'pg_terminate_backend of the worker');
	ok( $node->poll_query_until('postgres', qq{
SELECT count(*) = 1 FROM pg_stat_activity
 WHERE backend_type = 'zklock session worker' AND pid <> $pid}),
		'a new worker shows in pg_stat_activity');
	is($node->safe_psql('postgres', q{SELECT zk_lock_acquire('after-terminate', 10000)}), 't',
		sprintf('a lock is granted again, %.1f s after pg_terminate_backend', time - $t0));
	is($node->safe_psql('postgres',
			q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'zklock session reaper'}),
		'0', 'the reaper, which ends a crashed worker\'s session, is not running');
}

# A worker stopped with requests in flight (ZooKeeper stopped: their replies
# never come to it): the shared area's records are back where they were once
# the backends gave up and the next worker runs.
$node->safe_psql('postgres', q{SELECT zk_lock_release_all()});
my $records0 = $node->safe_psql('postgres', 'SELECT shared_records FROM zk_session_stats');
$node->safe_psql('postgres', 'CREATE EXTENSION dblink');
$zk->signal($_, 'STOP') for $zk->running;
my $coord = dblink_send_many($node, 8, 1, 'inflight_',
	q{'SELECT zk_lock_acquire(''inflight-' || i || ''', 20000)'});
ok($node->poll_query_until('postgres', q{
SELECT count(*) FROM pg_stat_activity
 WHERE application_name LIKE 'inflight\\_%' AND wait_event_type = 'Extension'}, '8'),
	'8 backends wait for replies that do not come');
my $old = worker_pid($node);
kill 'TERM', $old;
my $new;
my $t0 = time;
while (time - $t0 < 20)
{
	$new = worker_pid($node);
	last if defined $new && $new != $old;
	sleep_for(0.1);
}
isnt($new, $old, 'the worker is stopped and started again meanwhile');
$zk->signal($_, 'CONT') for $zk->running;
$coord->[0]->query(q{SELECT count(*) FROM generate_series(1, 8) AS i,
       LATERAL dblink_get_result('c' || i, false) AS t(r boolean)});
$coord->[0]->quit;
ok($node->poll_query_until('postgres', q{
SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'inflight\\_%'}, '0'),
	'the waiting backends are done');
ok($node->poll_query_until('postgres',
	q{SELECT shared_records FROM zk_session_stats}, $records0),
	"the shared area's live records are back at $records0")
  or diag $node->safe_psql('postgres', 'SELECT shared_records FROM zk_session_stats');

# A server that shuts down stops its worker for good.
$node->stop('fast');
ok($node->log_contains('database system is shut down'), 'the server shuts down with its worker');
ok(!$node->log_contains('terminating any other active server processes'), 'and no process crashed');
# The server log tells the session's story (issue 27, item 6): the worker's
# start, its session established, lost (and why), and replaced.  node_b's
# session expires while its worker is stopped (SIGSTOP) past the timeout.
my $node_b = zk_node('node_b', $zk, 'zklock.session_timeout' => '2000');
ok(defined wait_worker_session($node_b), 'node_b: the worker has its session');
my $first = $node_b->safe_psql('postgres', 'SELECT session_id FROM zk_session()');
my $wpid = worker_pid($node_b);
kill 'STOP', $wpid;
sleep_for(5);
kill 'CONT', $wpid;
ok($node_b->poll_query_until('postgres', qq{
SELECT state = 'connected' AND session_id <> '$first' FROM zk_session()}),
	'node_b: its session expired and was replaced');
my $second = $node_b->safe_psql('postgres', 'SELECT session_id FROM zk_session()');
my $story = slurp_file($node_b->logfile);
like($story, qr/LOG:  zklock session worker started \(ZooKeeper at /, 'the log: the worker started');
like($story, qr/LOG:  zklock: ZooKeeper session $first established with \S+ \(timeout \d+ ms\)\n/,
	'the log: its session established');
like($story, qr/LOG:  zklock: ZooKeeper session $first is lost: ZooKeeper expired it\n.*DETAIL:  The locks held in it are lost/,
	'the log: lost, and why');
like($story, qr/LOG:  zklock: ZooKeeper session $second established with \S+ \(timeout \d+ ms\), replacing session $first/,
	'the log: the new session, replacing it');
$node_b->stop('fast');

# pg_upgrade starts servers in binary upgrade mode (postgres -b): zklock
# starts no session worker there, and so opens no ZooKeeper session.
my $sessions = scalar keys %{ $zk->live_sessions };
PostgreSQL::Test::Utils::system_or_bail('pg_ctl', '-D', $node->data_dir, '-l', $node->logfile,
	'-o', '-b', '-w', 'start');
$node->_update_pid(1);
ok(!defined worker_pid_now($node), 'binary upgrade mode: no session worker runs');
sleep_for(1);
is(scalar keys %{ $zk->live_sessions }, $sessions, 'and no ZooKeeper session was opened');
$node->stop('fast');

finish_checks($zk, []);
done_testing();

# The worker's pid if one runs now (worker_pid waits for one to appear).
sub worker_pid_now
{
	my ($node) = @_;
	my $pid = `pgrep -P $node->{_pid} -f 'zklock session worker'`;
	chomp $pid;
	return $pid eq '' ? undef : $pid;
}
