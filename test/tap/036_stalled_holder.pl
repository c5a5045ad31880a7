
# A holder that stops dead (SIGSTOP: what a VM stall, a swap storm or a
# debugger does) for longer than the session timeout, while its transaction
# holds a lock and has written.  The whole PostgreSQL server stopped (every
# process, the session worker too): the server expires its session and the
# other node gets the lock.  The COMMIT that arrives meanwhile runs the
# moment the server resumes, when the client still believes it is
# connected: the commit guard must not trust that belief.  It wants the
# session proven alive for a third of the session timeout more (by a
# write's reply, resting on an earlier send the leader heard of: one
# before the write by less than two thirds of the timeout), else makes one
# round trip, and so the COMMIT fails with 40001 and the work rolls back.  A backend stopped alone (holding a transaction lock; holding a
# session lock while a batch transaction runs) keeps its lock, like an
# advisory lock: the session worker keeps the session alive, the other node
# does not get the lock, and the COMMIT goes through when it resumes.  (The
# worker may notice the expiry first when the server resumes, which the
# guard alone must not rely on: the first part checks the guard itself, by
# its requests.)
#
# Runs alone: COMMITs must fall within two thirds of a 2 s timeout of a
# proof.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

use ZklockTest;

my $session_timeout_ms = 2000;
my $stall_s = 5;
my $zk = start_zk();
my ($node_a, $node_b) = map {
	zk_node($_, $zk,
		'zklock.session_timeout' => $session_timeout_ms,
		shared_preload_libraries => 'zklock')
} qw(node_a node_b);
install_cs_log($_) for $node_a, $node_b;

# The guard's round trip is a set (of a held node, at a version no node
# has), which nothing else here sends.
sub sets
{
	return $node_a->safe_psql('postgres', 'SELECT sets FROM zk_session_stats');
}

my $probe = session($node_a, 'probe');
$probe->query_safe(q{SELECT zk_lock_acquire('probe')});
$node_a->safe_psql('postgres', 'CREATE TABLE probe_log (at timestamptz)');
my $write = q{BEGIN; INSERT INTO probe_log VALUES (now()); COMMIT};
my $sets = sets();
$probe->query_safe($write);
is(sets(), $sets, 'a COMMIT soon after a write\'s reply makes no request');
sleep_for($session_timeout_ms / 1000 * 2 / 3 + 0.3);
$probe->query_safe('BEGIN; SELECT count(*) FROM probe_log; COMMIT');
is(sets(), $sets, 'nor does one that wrote nothing, however long after');
$probe->query_safe($write);
is(sets(), $sets + 1,
	'a COMMIT more than two thirds of the session timeout after the last write makes one round trip');
$probe->query_safe($write);
is(sets(), $sets + 1, 'which proves the session for the next one');
$probe->query_safe(q{SELECT zk_lock_release('probe')});
$probe->quit;

# The processes of a whole PostgreSQL server: the postmaster and its children.
sub server_pids
{
	my ($node) = @_;
	my $pm = $node->{_pid};
	my @pids = ($pm);
	for my $stat (glob '/proc/[0-9]*/stat')
	{
		open my $fh, '<', $stat or next;
		my $line = <$fh> // next;
		push @pids, $1 if $line =~ /^(\d+) \(.*\) \S+ (\d+)/ && $2 == $pm;
	}
	return @pids;
}

my $other = session($node_b, 'other');
for my $case ('transaction lock', 'session lock', 'whole server')
{
	my $lock = "stall-" . ($case =~ s/ /-/gr);
	my $worker = "holder-" . ($case =~ s/ /-/gr);
	my $holder = session($node_a, $worker);
	$holder->query_safe('\set VERBOSITY verbose');
	my $pid = $holder->query_safe('SELECT pg_backend_pid()');
	if ($case eq 'session lock')
	{
		$holder->query_safe(qq{SELECT zk_lock_acquire('$lock')});
		$holder->query_safe(qq{BEGIN;
INSERT INTO cs SELECT current_setting('cluster_name'), '$worker', 0,
                      zk_lock_token('$lock'), clock_timestamp(), NULL});
	}
	else
	{
		$holder->query_safe(cs_begin_sql($lock, $worker));
	}

	my $whole = $case eq 'whole server';
	my @stopped = $whole ? server_pids($node_a) : ($pid);
	my $t0 = time;
	kill 'STOP', @stopped;
	if ($whole)
	{
		my ($out, $err) = $other->query(cs_waiter_sql($lock, 'other', 20000));
		is($err, 0, "$case: node_b gets the lock while the holder is stopped");
		note sprintf("$case: granted %.2f s after the stop", time - $t0);
	}
	send_query($holder, cs_end_sql($worker), 'commit-done');
	sleep_for($stall_s - (time - $t0)) if time - $t0 < $stall_s;
	is($other->query_safe(qq{SELECT zk_lock_try_acquire('$lock')}), 'f',
		"$case: node_b does not get it while the backend is stopped")
	  unless $whole;
	kill 'CONT', @stopped;
	wait_marker($holder, 'commit-done');
	if ($whole)
	{
		like($holder->{stderr},
			qr/ERROR:  40001: zklock lock "\Q$lock\E" was lost before the transaction committed/,
			"$case: the COMMIT after the stall fails with 40001");
		is($node_a->safe_psql('postgres', qq{SELECT count(*) FROM cs WHERE worker = '$worker'}),
			'0', "$case: the holder's work was rolled back");
	}
	else
	{
		is($holder->{stderr}, '', "$case: the COMMIT after the stall goes through");
		is($node_a->safe_psql('postgres', qq{SELECT count(*) FROM cs WHERE worker = '$worker'}),
			'1', "$case: the holder's work is committed");
		$holder->query_safe(qq{SELECT zk_lock_release('$lock')}) if $case eq 'session lock';
	}
	$holder->{stderr} = '';
	is($holder->query_safe(qq{SELECT zk_lock_acquire('$lock', 10000)}), 't',
		"$case: the holder locks again");
	$holder->query_safe(qq{SELECT zk_lock_release('$lock')});
	$holder->quit;
}
$other->quit;

check_critical_sections($node_a, $node_b);
finish_checks($zk, [ $node_a, $node_b ]);
done_testing();
