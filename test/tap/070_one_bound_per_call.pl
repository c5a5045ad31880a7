
# One bound per call (issue 48.1).  zklock.connect_timeout C bounds each
# request a call sends, counted from its sending.  With ZooKeeper silent
# (SIGSTOP: the client still believes it is connected, for two thirds of the
# 30 s session timeout) and C = 2 s:
#
#  1. an acquisition of a free name fails with 08006 within C and a little
#     (1.6 took 2C: the abort waited C more for the create it had given up);
#  2. an autocommit zk_lock_release returns false within C (1.6: 2C, its
#     COMMIT waited C more for the same delete), and the next statement
#     does not wait for that delete again (1.6: C, as every later one);
#  3. a release and its COMMIT, in a transaction, take C together (1.6: 2C);
#  4. a COMMIT that waits for the delete of its transaction lock stops
#     waiting at a cancel (1.6 waited its C, 10 s there, whatever came), and
#     the next statement does not wait for it either (1.6: C again).
#
# The timings are the point: 1.6 takes 2C where the bound is C + 0.5 s.
# pg_settings says what the setting bounds.
#
# Runs alone: calls are bounded at the connect timeout plus 0.5 s, some at
# 0.5 s.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

use ZklockTest;

my $c_ms = 2000;
my $c = $c_ms / 1000;
my $slack = 0.5;
my $zk = start_zk();
my $node = zk_node('node_a', $zk,
	'zklock.connect_timeout' => $c_ms,
	'zklock.session_timeout' => 30000);

is($node->safe_psql('postgres',
		q{SELECT short_desc FROM pg_settings WHERE name = 'zklock.connect_timeout'}),
	'How long a zklock call waits for ZooKeeper: for a session, for a lost connection to come back, and for the answer to each request it sends.',
	'pg_settings says what zklock.connect_timeout bounds');

my $s = session($node, 'caller');
$s->query_safe('\set VERBOSITY verbose');
$s->query_safe(q{SELECT zk_lock_acquire('r1'), zk_lock_acquire('r2')});
is($s->query_safe('SELECT state FROM zk_session()'), 'connected', 'the session is connected');

# Stop ZooKeeper; run $sql in $s, timed.  Returns its output and seconds.
sub silent_call
{
	my ($sql) = @_;
	$s->{stderr} = '';
	$zk->signal($_, 'STOP') for $zk->running;
	my $t0 = time;
	my $out = $s->query($sql);
	return ($out, time - $t0);
}

# ZooKeeper answers again; returns once the worker has no request left.
sub resume
{
	$zk->signal($_, 'CONT') for $zk->running;
	my $other = $node->background_psql('postgres');
	is(poll_query($other,
			'SELECT requests_in_flight + requests_queued FROM zk_session()', '0', 30),
		'0', 'ZooKeeper back: every request answered');
	$other->quit;
	$s->{stderr} = '';
	return;
}

# 1. An acquisition: its create's bound, not twice it.
{
	my (undef, $took) = silent_call(q{SELECT zk_lock_acquire('fresh')});
	like($s->{stderr}, qr/ERROR:  08006: ZooKeeper did not answer within $c_ms ms while acquiring a lock/,
		'an acquisition with ZooKeeper silent fails with 08006');
	cmp_ok($took, '>=', $c - 0.1, sprintf('once its create had C to be answered (%.2f s)', $took));
	cmp_ok($took, '<', $c + $slack, sprintf('and within C + %.1f s (%.2f s; 1.6: 2C)', $slack, $took));
	resume();
	is_deeply(queue_nodes($zk, 'fresh'), [], 'the node of the given-up create is deleted once ZooKeeper answers');
}

# 2. An autocommit release: C in all.
{
	my ($out, $took) = silent_call(q{SELECT zk_lock_release('r1')});
	is($out, 'f', 'an autocommit release with ZooKeeper silent returns false');
	like($s->{stderr}, qr/WARNING:  08006: zklock lock "r1" may have been lost before it was released/,
		'with the 08006 WARNING');
	cmp_ok($took, '<', $c + $slack,
		sprintf('within C + %.1f s, its COMMIT included (%.2f s; 1.6: 2C)', $slack, $took));
	$s->{stderr} = '';
	my $t0 = time;
	$s->query_safe('SELECT 1');
	my $next = time - $t0;
	cmp_ok($next, '<', $slack,
		sprintf('the next statement does not wait for the delete again (%.2f s; 1.6: C)', $next));
	resume();
	is_deeply(queue_nodes($zk, 'r1'), [], 'the released node is deleted once ZooKeeper answers');
}

# 3. A release and its COMMIT: C together.
{
	$s->query_safe('BEGIN');
	my ($out, $took) = silent_call(q{SELECT zk_lock_release('r2')});
	my $t0 = time;
	$s->query('COMMIT');
	my $commit = time - $t0;
	is($out, 'f', 'a release in a transaction with ZooKeeper silent returns false');
	cmp_ok($took + $commit, '<', $c + $slack,
		sprintf('the release (%.2f s) and its COMMIT (%.2f s) take C + %.1f s at most (1.6: 2C)',
			$took, $commit, $slack));
	resume();
	is_deeply(queue_nodes($zk, 'r2'), [], 'the released node is deleted once ZooKeeper answers');
}

# 4. A cancel ends a COMMIT's wait for its deletes.  C is 10 s here, so
# that 1.6's wait, which no cancel ends, is unmistakable.
{
	$s->query_safe('SET zklock.connect_timeout = 10000');
	$s->query_safe('BEGIN');
	is($s->query_safe(q{SELECT zk_lock_xact_acquire('x1')}), 't', 'a transaction lock is held');
	$zk->signal($_, 'STOP') for $zk->running;
	my $t0 = time;
	send_query($s, 'COMMIT', 'committed');
	ok(wait_for_wait_event($node, 'caller'), 'its COMMIT waits for the delete of its node');
	my $t1 = time;
	$node->safe_psql('postgres',
		q{SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE application_name = 'caller'});
	wait_marker($s, 'committed');
	my ($waited, $after_cancel) = (time - $t0, time - $t1);
	cmp_ok($after_cancel, '<', 1,
		sprintf('a cancel ends the wait (%.2f s after it; 1.6 waited C = 10 s in all)', $after_cancel));
	note sprintf('COMMIT took %.2f s', $waited);
	is($s->{stderr}, '', 'the COMMIT succeeds, and the cancel fails no statement');
	$t0 = time;
	is($s->query_safe('SELECT count(*) FROM zk_locks'), '0', 'nothing is held after it');
	my $next = time - $t0;
	cmp_ok($next, '<', 1,
		sprintf('and the next statement does not wait for the delete (%.2f s; 1.6: C)', $next));
	resume();
	is_deeply(queue_nodes($zk, 'x1'), [], 'the node is deleted once ZooKeeper answers');
	$s->query_safe('RESET zklock.connect_timeout');
}

$s->quit;
finish_checks($zk, [$node]);
done_testing();
