
# A crash frees the server's locks at once (issue 18, item 3): after kill -9
# of a holder's backend (the postmaster reinitializes), and after an
# immediate shutdown, the restarted server's session worker reattaches to
# the session its predecessor left and closes it, so the waiter on the other
# node gets the lock as soon as that worker is up, well before the session
# timeout (10 s here, the default).  The time is noted, for the record.
#
# Runs alone: grants after kill -9 are bounded at 5 s, a crash restart
# included.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

use ZklockTest;

my $session_timeout_ms = 10000;
my $zk = start_zk();
my ($node_a, $node_b) = map {
	zk_node($_, $zk,
		'zklock.session_timeout' => $session_timeout_ms,
		'restart_after_crash' => 'on')
} qw(node_a node_b);

# A holder on node_a, a waiter on node_b.
sub hold_and_queue
{
	my ($label) = @_;
	my $holder = $node_a->background_psql('postgres');
	$holder->query_safe(qq{SELECT zk_lock_acquire('crash')});
	my $holder_pid = $holder->query_safe('SELECT pg_backend_pid()');
	my $waiter = $node_b->background_psql('postgres', timeout => 60);
	$waiter->query_safe(qq{SET application_name = 'waiter_$label'});
	$waiter->{stdin} .= "SELECT 'granted', zk_lock_acquire('crash');\n";
	$waiter->{run}->pump_nb;
	ok(wait_for_wait_event($node_b, "waiter_$label"), "$label: waiter queued behind the holder");
	return ($holder, $holder_pid, $waiter);
}

my $timeout_s = $session_timeout_ms / 1000;

# kill -9 of the holder's backend.
my ($holder, $holder_pid, $waiter) = hold_and_queue('kill9');
my $t0 = time;
kill 'KILL', $holder_pid;
my $out = $waiter->query_until(qr/granted/, '');
my $elapsed = elapsed_since($t0);
like($out, qr/granted\|t/, 'kill -9: the waiter got the lock');
cmp_ok($elapsed, '<', $timeout_s / 2,
	sprintf('kill -9: granted %.2f s after the kill, well before the session timeout of %.0f s',
		$elapsed, $timeout_s));
note sprintf('kill -9 of a holder to the other node\'s grant: %.2f s', $elapsed);
$waiter->query_safe(q{SELECT zk_lock_release('crash')});
$waiter->quit;
eval { $holder->quit };
ok($node_a->poll_query_until('postgres', 'SELECT true'), 'node_a is back after the crash restart');
is($node_a->safe_psql('postgres', q{SELECT zk_lock_acquire('crash', 5000), zk_lock_release('crash')}),
	't|t', 'node_a can lock again');

# An immediate shutdown, and a start a second later.
($holder, $holder_pid, $waiter) = hold_and_queue('immediate');
$t0 = time;
$node_a->stop('immediate');
eval { $holder->quit };
sleep_for(1);
$node_a->start;
my $t1 = time;
$out = $waiter->query_until(qr/granted/, '');
$elapsed = elapsed_since($t0);
my $after_start = elapsed_since($t1);
like($out, qr/granted\|t/, 'immediate shutdown: the waiter got the lock');
cmp_ok($elapsed, '<', $timeout_s / 2 + 1,
	sprintf('immediate shutdown: granted %.2f s after it (%.2f s after the start), before the session timeout',
		$elapsed, $after_start));
# The reaper (started with the postmaster, before recovery) or the next
# session worker, whichever claims it first, ended it.
my $log = slurp_file($node_a->logfile);
my @closers = $log =~ /\[(\d+)\] LOG:  zklock: closed ZooKeeper session 0x[0-9a-f]+; the locks it held are free/g;
is(scalar @closers, 2, 'the sessions left by the crash and by the immediate shutdown were ended');
note('ended by ' . join(', ', map { $log =~ /\[$_\] LOG:  zklock session worker started/ ? 'the worker' : 'the reaper' } @closers));
$waiter->quit;

finish_checks($zk, [ $node_a, $node_b ]);
done_testing();
