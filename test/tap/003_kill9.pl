
# A holder that dies without closing its ZooKeeper session (kill -9 of its
# backend) keeps the lock until the session expires: the waiter on the other
# node gets it after about zklock.session_timeout, not before and not much
# later, and no node is left behind.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

use ZklockTest;

my $session_timeout_ms = 3000;
my $zk = start_zk();
my ($node_a, $node_b) = map {
	zk_node($_, $zk,
		'zklock.session_timeout' => $session_timeout_ms,
		'restart_after_crash' => 'on')
} qw(node_a node_b);

my $holder = $node_a->background_psql('postgres');
$holder->query_safe(q{SELECT zk_lock_acquire('crash')});
my $holder_pid = $holder->query_safe('SELECT pg_backend_pid()');

my $waiter = $node_b->background_psql('postgres', timeout => 60);
$waiter->query_safe(q{SET application_name = 'crash_waiter'});
$waiter->{stdin} .= "SELECT 'granted', zk_lock_acquire('crash');\n";
$waiter->{run}->pump_nb;
ok(wait_for_wait_event($node_b, 'crash_waiter'), 'waiter queued behind the holder');

my $t0 = time;
kill 'KILL', $holder_pid;
my $out = $waiter->query_until(qr/granted/, '');
my $elapsed = elapsed_since($t0);
like($out, qr/granted\|t/, 'waiter got the lock after the holder was killed');

# The server expires a session once it has heard nothing for the timeout; the
# client pings every third of it, so expiry comes between 2/3 of the timeout
# and the timeout plus a tick after the kill.
my $timeout_s = $session_timeout_ms / 1000;
cmp_ok($elapsed, '>', $timeout_s / 2,
	sprintf('not before the session expired (%.2f s)', $elapsed));
cmp_ok($elapsed, '<', $timeout_s + 3,
	sprintf('soon after the session timeout of %.1f s', $timeout_s));
$waiter->quit;
eval { $holder->quit };

# kill -9 of a backend makes the postmaster restart node_a; it comes back.
ok($node_a->poll_query_until('postgres', 'SELECT true'), 'node_a is back after the crash restart');
is($node_a->safe_psql('postgres', q{SELECT zk_lock_acquire('crash', 5000)}),
	't', 'node_a can lock again');

finish_checks($zk, [ $node_a, $node_b ]);
done_testing();
