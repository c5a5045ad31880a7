
# A lock released inside the transaction that wrote under it (issue 25.1):
# the usual advisory-lock habit, acquire, write, release, then COMMIT.  The
# server's session worker stops (SIGSTOP: a VM stall, a swap storm or a
# debugger does the same) for longer than the session timeout, so that the
# server expires the session and the other node is granted the lock; the
# holder then releases and the worker resumes.  A release proves that the
# lock was held until then only if ZooKeeper confirmed the delete of a node
# that was still there, in the same session: here it cannot, so the release
# returns false with a WARNING and the COMMIT fails with 40001 (with
# zklock.on_lost_lock = warning it commits, with the WARNING).  The same for
# zk_lock_release_all() and for a hold undone by ROLLBACK TO SAVEPOINT.  A
# release that the server confirms costs the COMMIT nothing more.
#
# Runs alone: COMMITs must fall within two thirds of a 2 s timeout of a
# reply.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

use ZklockTest;

my $session_timeout_ms = 2000;
my $zk = start_zk();
my $node_a = zk_node('node_a', $zk, 'zklock.session_timeout' => $session_timeout_ms);
my $node_b = zk_node('node_b', $zk, 'zklock.session_timeout' => $session_timeout_ms);
$node_a->safe_psql('postgres', 'CREATE TABLE work (what text)');

# The commit guard's round trip is a set; nothing else here sends one.
sub sets
{
	return $node_a->safe_psql('postgres', 'SELECT sets FROM zk_session_stats');
}

sub rows
{
	my ($what) = @_;
	return $node_a->safe_psql('postgres', "SELECT count(*) FROM work WHERE what = '$what'");
}

# Confirmed releases: nothing lost, and the COMMIT makes no request (the
# delete's answer was the proof).
{
	my $s = session($node_a, 'confirmed');
	$s->query_safe(q{SELECT zk_lock_acquire('warm')});
	$s->query_safe(q{SELECT zk_lock_release('warm')});
	my $sets = sets();
	for my $i (1 .. 20)
	{
		$s->query_safe(q{BEGIN; SELECT zk_lock_acquire('L'); INSERT INTO work VALUES ('confirmed')});
		sleep_for($session_timeout_ms / 1000) if $i == 1;
		is($s->query_safe(q{SELECT zk_lock_release('L')}), 't', "confirmed release $i returns true")
		  if $i <= 2;
		$s->query_safe(q{SELECT zk_lock_release('L')}) if $i > 2;
		$s->query_safe('COMMIT');
	}
	is($s->{stderr}, '', 'no WARNING, no error');
	is(rows('confirmed'), 20, 'every transaction committed');
	is(sets(), $sets, 'the COMMITs after a confirmed release made no request, even long after the acquisition');
	$s->quit;
}

my $other = session($node_b, 'other');
my %cases = (
	'release' => {
		before => q{SELECT zk_lock_acquire('L')},
		release => q{SELECT zk_lock_release('L')},
		returns => 'f',
	},
	'release_all' => {
		before => q{SELECT zk_lock_acquire('L'); SELECT zk_lock_acquire('M')},
		release => q{SELECT zk_lock_release_all()},
		returns => '2',
		warns => qr/zklock lock "[LM]" and 1 other lock may have been lost before they were released/,
	},
	'rollback to savepoint' => {
		before => q{INSERT INTO work VALUES ('rollback to savepoint'); SAVEPOINT s; SELECT zk_lock_acquire('L')},
		release => q{ROLLBACK TO SAVEPOINT s},
		returns => '',
	},
	'warning' => {
		before => q{SET LOCAL zklock.on_lost_lock = warning; SELECT zk_lock_acquire('L')},
		release => q{SELECT zk_lock_release('L')},
		returns => 'f',
	},
);
for my $round (1 .. 3)
{
	for my $case (sort keys %cases)
	{
		my $c = $cases{$case};
		my $name = "$case, round $round";
		my $holder = session($node_a, 'holder');
		$holder->query_safe('\set VERBOSITY verbose');
		$holder->query_safe("BEGIN; $c->{before}; INSERT INTO work VALUES ('$case')");

		my $worker = worker_pid($node_a);
		my $t0 = time;
		kill 'STOP', $worker;
		is($other->query_safe(q{SELECT zk_lock_acquire('L', 20000)}), 't',
			"$name: the other node is granted the lock while the worker is stopped");
		note sprintf("$name: granted %.2f s after the stop", time - $t0);

		send_query($holder, $c->{release}, 'released');
		sleep_for(0.3);
		kill 'CONT', $worker;
		my $out = wait_marker($holder, 'released');
		$out =~ s/\s*released\s*$//;
		is($out, $c->{returns}, "$name: what the release returns");
		my $warns = $c->{warns} // qr/zklock lock "L" may have been lost before it was released/;
		like($holder->{stderr}, qr/WARNING:  08006: $warns/,
			"$name: the release warns that the lock may have been lost");
		$holder->{stderr} = '';

		send_query($holder, 'COMMIT', 'committed');
		wait_marker($holder, 'committed');
		if ($case eq 'warning')
		{
			like($holder->{stderr}, qr/WARNING:  40001: zklock lock "L" was lost before the transaction committed/,
				"$name: on_lost_lock = warning: the COMMIT warns");
			is(rows($case), $round, "$name: and commits");
		}
		else
		{
			like($holder->{stderr}, qr/ERROR:  40001: zklock lock "L" was lost before the transaction committed/,
				"$name: the COMMIT fails with 40001");
			is(rows($case), 0, "$name: nothing of the transaction was committed");
		}
		$holder->quit;
		$other->query_safe(q{SELECT zk_lock_release('L')});
		ok(defined wait_worker_session($node_a), "$name: node_a's worker has a new session");
	}
}
$other->quit;

finish_checks($zk, [ $node_a, $node_b ]);
done_testing();
