
# Server-wide statistics (zklock in shared_preload_libraries): workers on two
# nodes take one lock in a loop, and each node's zk_lock_stats counts exactly
# its own acquisitions; try failures, timeouts, cancels, holders and waiters
# are counted as they happen; zk_session_stats counts sessions and requests;
# zk_lock_stats_reset starts again from zero.  And zklock.log_level lets the
# ZooKeeper client's messages through to the server log.
#
# Runs alone: it expects a reload to have reached the worker 0.5 s later.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;

use ZklockTest;

my $workers = 3;
my $loops = 20;
my $zk = start_zk();
my ($node_a, $node_b) =
  map { zk_node($_, $zk, shared_preload_libraries => 'zklock') } qw(node_a node_b);

sub stats
{
	my ($node, $cols, $lock) = @_;
	return $node->safe_psql('postgres',
		"SELECT $cols FROM zk_lock_stats WHERE name = '$lock'");
}

# 1. Concurrent loops on both nodes.
for my $node ($node_a, $node_b)
{
	$node->safe_psql('postgres', qq{
CREATE PROCEDURE loop(n int) LANGUAGE plpgsql AS \$\$
BEGIN
  FOR i IN 1..n LOOP
    PERFORM zk_lock_acquire('stats');
    PERFORM pg_sleep(0.002);
    PERFORM zk_lock_release('stats');
  END LOOP;
END \$\$});
}
my @sessions;
for my $node ($node_a, $node_b)
{
	for my $w (1 .. $workers)
	{
		my $s = session($node, "w$w");
		send_query($s, "CALL loop($loops)", 'loop-done');
		push @sessions, $s;
	}
}
wait_marker($_, 'loop-done') for @sessions;
$_->quit for @sessions;

for my $node ($node_a, $node_b)
{
	my $name = $node->name;
	is(stats($node, 'acquisitions, try_failures, timeouts, cancels, holders, waiters, lost', 'stats'),
		$workers * $loops . '|0|0|0|0|0|0',
		"$name counts its own $workers x $loops acquisitions, nothing else");
	is(stats($node, 'total_wait_ms > 0 AND max_wait_ms > 0 AND max_wait_ms <= total_wait_ms', 'stats'),
		't', "$name: wait times add up");
	my ($opened, $creates, $deletes, $lists) = split /\|/,
	  $node->safe_psql('postgres',
		'SELECT sessions_opened, creates, deletes, children_lists FROM zk_session_stats');
	is($opened, 1, "$name: one ZooKeeper session for the server, whatever its $workers backends");
	cmp_ok($creates, '>=', $workers * $loops, "$name: a create per acquisition, at least");
	cmp_ok($deletes, '>=', $workers * $loops, "$name: a delete per release, at least");
	cmp_ok($lists, '>=', $workers * $loops, "$name: a listing per acquisition, at least");
}

# 2. Holders, waiters, try failures, timeouts and cancels as they happen.
my $holder = session($node_a, 'holder');
$holder->query_safe(q{SELECT zk_lock_acquire('busy')});
my $waiter = session($node_a, 'waiter');
send_query($waiter, q{SELECT zk_lock_acquire('busy')}, 'waiter-done');
ok(wait_for_wait_event($node_a, 'waiter'), 'a waiter waits');
is(stats($node_a, 'holders, waiters', 'busy'), '1|1', 'one holder and one waiter on node_a');
is(stats($node_b, 'count(*)', 'busy'), '0', 'node_b has not seen the lock');

$node_a->safe_psql('postgres', q{SELECT zk_lock_try_acquire('busy')}) for 1 .. 3;
$node_a->safe_psql('postgres', q{SELECT zk_lock_acquire('busy', 100)});
$node_a->psql('postgres', q{SET statement_timeout = '100ms'; SELECT zk_lock_acquire('busy')});
$node_a->psql('postgres', q{SET lock_timeout = '100ms'; SELECT zk_lock_acquire('busy')});
is(stats($node_a, 'try_failures, timeouts, cancels', 'busy'), '3|1|2',
	'3 try failures, 1 timeout, 2 waits ended by statement_timeout and lock_timeout');

# A waiter ended from outside counts as a cancel, once, and waits no more:
# by pg_cancel_backend; by pg_terminate_backend, and by its client going
# away (seen within client_connection_check_interval), whose FATAL leaves
# the wait through the backend's exit rather than through an ERROR.  Its
# exit is over, statistics included, before it leaves pg_stat_activity.
my $cancels = 2;
for my $end ('pg_cancel_backend', 'pg_terminate_backend', 'its client going away')
{
	my $victim = session($node_a, 'victim');
	$victim->query_safe(q{SET client_connection_check_interval = '100ms'});
	send_query($victim, q{SELECT zk_lock_acquire('busy')}, 'victim-done');
	ok(wait_for_wait_event($node_a, 'victim'), "a second waiter waits, to be ended by $end");
	is(stats($node_a, 'waiters', 'busy'), '2', 'two waiters');
	if ($end eq 'its client going away')
	{
		$victim->{run}->kill_kill;
	}
	else
	{
		$node_a->safe_psql('postgres',
			"SELECT $end(pid) FROM pg_stat_activity WHERE application_name = 'victim'");
	}
	if ($end eq 'pg_cancel_backend')
	{
		wait_marker($victim, 'victim-done');
		$victim->quit;
	}
	else
	{
		ok($node_a->poll_query_until('postgres',
			q{SELECT count(*) FROM pg_stat_activity WHERE application_name = 'victim'}, '0'),
			'and its backend exits');
		eval { $victim->quit };
	}
	$cancels++;
	is(stats($node_a, 'cancels, waiters', 'busy'), "$cancels|1",
		"ended by $end: one more cancel, and the first waiter alone waits");
}

$holder->query_safe(q{SELECT zk_lock_release('busy')});
wait_marker($waiter, 'waiter-done');
is(stats($node_a, 'acquisitions, holders, waiters', 'busy'), '2|1|0',
	'the waiter got it: two acquisitions, one holder, no waiter');
$waiter->quit;
$node_a->poll_query_until('postgres',
	q{SELECT holders FROM zk_lock_stats WHERE name = 'busy'}, '0')
  or diag 'holders did not drop';
is(stats($node_a, 'holders', 'busy'), '0', 'a holder that disconnects no longer counts');
$holder->quit;

# A backend terminated inside a transaction that took a lock: its hold ends
# once in the statistics, not once at exit and again with the abort.
my $keeper = session($node_a, 'keeper');
$keeper->query_safe(q{SELECT zk_lock_acquire_shared('twice')});
my $doomed = session($node_a, 'doomed');
$doomed->query_safe(q{BEGIN; SELECT zk_lock_xact_acquire_shared('twice')});
is(stats($node_a, 'holders', 'twice'), '2', 'two holders of a shared lock');
$node_a->safe_psql('postgres',
	q{SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'doomed'});
$node_a->poll_query_until('postgres',
	q{SELECT count(*) FROM pg_stat_activity WHERE application_name = 'doomed'}, '0');
is(stats($node_a, 'holders', 'twice'), '1', 'the terminated one no longer counts, the other still does');
$keeper->query_safe(q{SELECT zk_lock_release_shared('twice')});
is(stats($node_a, 'holders', 'twice'), '0', 'nor once it released');
$keeper->quit;
eval { $doomed->quit };

# 3. Reset, by a superuser only.
$node_a->safe_psql('postgres', 'CREATE ROLE plain LOGIN');
my ($rc, $out, $err) = $node_a->psql('postgres', 'SELECT zk_lock_stats_reset()',
	extra_params => [ '-U', 'plain' ]);
like($err, qr/permission denied/, 'an ordinary user may not reset');
$node_a->safe_psql('postgres', 'SELECT zk_lock_stats_reset()');
is($node_a->safe_psql('postgres', 'SELECT count(*) FROM zk_lock_stats'), '0',
	'reset empties zk_lock_stats');
is($node_a->safe_psql('postgres', 'SELECT sessions_opened + creates FROM zk_session_stats'),
	'0', 'and zk_session_stats');
is(stats($node_b, 'acquisitions', 'stats'), $workers * $loops,
	"node_b's statistics are its own");

# 4. The ZooKeeper client's own log, at the level zklock.log_level sets in
# the configuration (the session worker's client logs).
my $log_offset = -s $node_b->logfile;
$node_b->append_conf('postgresql.conf', "zklock.log_level = debug\n");
$node_b->reload;
$node_b->poll_query_until('postgres', q{SELECT current_setting('zklock.log_level') = 'debug'});
my $logged = 0;
for (1 .. 50)
{
	$node_b->safe_psql('postgres',
		q{SELECT zk_lock_try_acquire('logged') AND zk_lock_release('logged')});
	$logged = slurp_file($node_b->logfile, $log_offset) =~ /LOG:  zklock: .*ZOO_DEBUG\@/;
	last if $logged;
	sleep_for(0.1);
}
ok($logged, 'with log_level = debug the client\'s DEBUG messages reach the server log');
$node_b->append_conf('postgresql.conf', "zklock.log_level = warn\n");
$node_b->reload;
$node_b->poll_query_until('postgres', q{SELECT current_setting('zklock.log_level') = 'warn'});
sleep_for(0.5);
$log_offset = -s $node_b->logfile;
$node_b->safe_psql('postgres',
	q{SELECT zk_lock_try_acquire('quiet') AND zk_lock_release('quiet')});
unlike(slurp_file($node_b->logfile, $log_offset), qr/ZOO_(INFO|DEBUG)\@/,
	'with the default (warn) they do not');

# zklock.max_tracked_locks is set like any setting of a preloaded library
# (it was once dropped as "invalid configuration parameter name": the
# prefix was reserved before it was defined).
$log_offset = -s $node_b->logfile;
$node_b->safe_psql('postgres', 'ALTER SYSTEM SET zklock.max_tracked_locks = 10');
$node_b->restart;
is($node_b->safe_psql('postgres', q{
SELECT setting || ' ' || source FROM pg_settings WHERE name = 'zklock.max_tracked_locks'}),
	'10 configuration file', 'zklock.max_tracked_locks set in the configuration is in force');
unlike(slurp_file($node_b->logfile, $log_offset), qr/invalid configuration parameter name/,
	'and the server does not call it invalid');
$node_b->safe_psql('postgres', q{
SELECT zk_lock_stats_reset();
SELECT count(*) FROM generate_series(1, 15) AS i
 WHERE zk_lock_try_acquire('tracked-' || i) AND zk_lock_release('tracked-' || i)});
is($node_b->safe_psql('postgres', q{SELECT count(*) FROM zk_lock_stats WHERE name LIKE 'tracked-%'}),
	'10', 'and zk_lock_stats keeps that many names');
$node_b->safe_psql('postgres', 'ALTER SYSTEM RESET zklock.max_tracked_locks');

finish_checks($zk, [ $node_a, $node_b ]);
done_testing();
