
# zklock's own closes keep the commit guard's margin (issue 25.3).  A
# backend that passed the guard may still be committing (here: waiting for
# a synchronous standby after its commit record, which is found by its
# wait event; pending syncs under wal_level = minimal, ON COMMIT actions and
# NOTIFY take time there too).  A reload that changes
# zklock.session_timeout makes the session worker close its session, which
# would free every node at once:
#
# 1. the close waits for that COMMIT to end: the other node is granted the
#    lock only after it;
# 2. a COMMIT that does not end within a third of the session timeout: the
#    worker drops the connection without ending the session, which the
#    server expires after its timeout; meanwhile no other COMMIT passes the
#    guard (40001).
#
# Runs alone: a COMMIT must find the session closing 0.3 s after a reload.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

use ZklockTest;

my $session_timeout_ms = 4000;
my $zk = start_zk();
# With WAL senders, so that a commit can wait for a synchronous standby.
my $node_a = zk_node('node_a', $zk, allows_streaming => 1,
	'zklock.session_timeout' => $session_timeout_ms);
my $node_b = zk_node('node_b', $zk);
$node_a->safe_psql('postgres', 'CREATE TABLE work (what text)');

# Commits that write wait for a standby that is not there, until this is
# taken back.
sub standby_wanted
{
	my ($on) = @_;
	$node_a->append_conf('postgresql.conf',
		"synchronous_standby_names = '" . ($on ? 'nobody' : '') . "'\n");
	$node_a->reload;
	return;
}

sub wait_event_of
{
	my ($app) = @_;
	return $node_a->safe_psql('postgres',
		"SELECT wait_event FROM pg_stat_activity WHERE application_name = '$app'");
}

my $other = session($node_b, 'other');
my $other_a = session($node_a, 'observer');
my $timeout_s = $session_timeout_ms / 1000;

for my $case ('commit ends', 'commit stuck')
{
	my $lock = $case =~ s/ /-/gr;
	standby_wanted(1);
	my $holder = session($node_a, 'holder');
	my $late = session($node_a, 'late');
	is(poll_query($holder, 'SHOW synchronous_standby_names', 'nobody'), 'nobody',
		"$case: the holder's commits wait for a standby");
	$holder->query_safe(qq{BEGIN; SELECT zk_lock_acquire('$lock'); INSERT INTO work VALUES ('$case')});
	$late->query_safe('\set VERBOSITY verbose');
	# Should it pass the guard, its COMMIT must not wait for the standby.
	$late->query_safe('SET synchronous_commit = local');
	$late->query_safe(qq{BEGIN; SELECT zk_lock_acquire('$lock-late'); INSERT INTO work VALUES ('$case, late')});
	send_query($holder, 'COMMIT', 'committed');
	is(poll_query($other_a, q{SELECT wait_event FROM pg_stat_activity WHERE application_name = 'holder'},
			'SyncRep', 20),
		'SyncRep', "$case: the holder passed the guard and waits for its commit to be replicated");

	my $t0 = time;
	$session_timeout_ms += 1000;
	$node_a->append_conf('postgresql.conf', "zklock.session_timeout = $session_timeout_ms\n");
	$node_a->reload;
	send_query($other, qq{SELECT zk_lock_acquire('$lock', 30000)}, 'granted');
	sleep_for(0.3);

	# A COMMIT while the session is being closed does not pass the guard.
	send_query($late, 'COMMIT', 'late-committed');
	wait_marker($late, 'late-committed');
	like($late->{stderr}, qr/ERROR:  40001: zklock lock "\Q$lock\E-late" was lost before the transaction committed/,
		"$case: a COMMIT that comes while the session is being closed fails with 40001");

	my ($committed_at, $granted_at);
	if ($case eq 'commit ends')
	{
		sleep_for(0.7);
		is(wait_event_of('holder'), 'SyncRep', "$case: node_a's COMMIT still waits");
		is($node_b->safe_psql('postgres',
				q{SELECT wait_event FROM pg_stat_activity WHERE application_name = 'other'}),
			zklock_wait_event($node_b), "$case: and node_b still waits for the lock");
		standby_wanted(0);
		wait_marker($holder, 'committed');
		$committed_at = time - $t0;
		wait_marker($other, 'granted');
		$granted_at = time - $t0;
		note sprintf("$case: COMMIT ended after %.2f s, node_b granted after %.2f s", $committed_at, $granted_at);
		cmp_ok($granted_at, '>=', $committed_at, "$case: node_b is granted the lock only after node_a's COMMIT ended");
	}
	else
	{
		wait_marker($other, 'granted');
		$granted_at = time - $t0;
		is(wait_event_of('holder'), 'SyncRep', "$case: node_a's COMMIT still waits");
		note sprintf("$case: node_b granted after %.2f s", $granted_at);
		cmp_ok($granted_at, '>', $timeout_s * 2 / 3,
			"$case: node_b is granted only once the session expired, not when the worker gave up waiting");
		standby_wanted(0);
		wait_marker($holder, 'committed');
	}
	is($holder->{stderr}, '', "$case: node_a's COMMIT went through");
	$other->query_safe(qq{SELECT zk_lock_release('$lock')});
	$holder->quit;
	$late->quit;
	ok(defined wait_worker_session($node_a), "$case: node_a has a new session");
}
$other->quit;
$other_a->quit;
like(slurp_file($node_a->logfile),
	qr/zklock: dropping the connection of ZooKeeper session 0x[0-9a-f]+ without ending it: a backend has not finished committing/,
	'the server log says why the session was left to expire');

finish_checks($zk, [ $node_a, $node_b ]);
done_testing();
