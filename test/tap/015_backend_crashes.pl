
# Fault injection 6: backends that die without running their exit hooks.
# A waiter killed with kill -9 and a holder killed with kill -9: the
# postmaster restarts every backend and the session worker, whose successor
# ends the server's old session at once, so the next waiter gets the lock
# well before the session timeout.  A holder whose PostgreSQL is shut down
# in immediate mode and stays down: its node stays until the server's
# session expires, then goes, and the next waiter gets the lock within the
# session timeout.  None lingers.
#
# Runs alone: grants after crashes are bounded at half the session timeout.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep time);

use ZklockTest;

my $session_timeout_ms = 6000;
my $timeout_s = $session_timeout_ms / 1000;
my $zk = start_zk(servers => 3);
my ($node_a, $node_b) = map {
	zk_node($_, $zk,
		'zklock.session_timeout' => $session_timeout_ms,
		'restart_after_crash' => 'on')
} qw(node_a node_b);
install_cs_log($_) for $node_a, $node_b;

sub backend_pid
{
	my ($node, $appname) = @_;
	return $node->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE application_name = '$appname'");
}

# The waiter's lock comes after a crash restart once the node's new worker
# is up: well before the session timeout (at_once); else between 2/3 of the
# session timeout after the death (the server may have last heard from the
# dead one a third of it earlier) and the timeout plus a margin.
sub granted_ok
{
	my ($waiter, $t_death, $what, $at_once) = @_;
	wait_marker($waiter, 'waiter-done');
	my $elapsed = elapsed_since($t_death);
	is($waiter->{stderr}, '', "$what: the waiter got the lock") or diag $waiter->{stderr};
	if ($at_once)
	{
		cmp_ok($elapsed, '<', $timeout_s / 2,
			sprintf("$what: %.2f s after the death, well before the session timeout of %.0f s",
				$elapsed, $timeout_s));
	}
	else
	{
		cmp_ok($elapsed, '>', $timeout_s * 2 / 3 - 0.5,
			sprintf("$what: not before the dead session expired (%.2f s)", $elapsed));
		cmp_ok($elapsed, '<', $timeout_s + 3,
			sprintf("$what: within the session timeout of %.1f s and a margin", $timeout_s));
	}
	note sprintf('%s: lock free again %.2f s after the death', $what, $elapsed);
	return;
}

sub node_back_ok
{
	my ($node) = @_;
	ok($node->poll_query_until('postgres', 'SELECT true'),
		$node->name . ' accepts connections again');
	return;
}

# 1. kill -9 of a waiting backend: the waiter queued behind it gets the lock
#    once the dead waiter's node is gone, with node_b's old session.
{
	my $holder = session($node_a, 'holder1');
	$holder->query_safe(q{SELECT zk_lock_acquire('crash1')});
	my $doomed = session($node_b, 'doomed1');
	send_query($doomed, q{SELECT zk_lock_acquire('crash1')}, 'doomed-done');
	ok(wait_for_wait_event($node_b, 'doomed1'), 'a waiter on node_b queued');
	my $waiter = session($node_a, 'waiter1');
	send_query($waiter, cs_waiter_sql('crash1', 'waiter1'), 'waiter-done');
	ok(wait_for_wait_event($node_a, 'waiter1'), 'a waiter on node_a queued behind it');

	my $t_death = time;
	kill 'KILL', backend_pid($node_b, 'doomed1');
	$holder->query_safe(q{SELECT zk_lock_release('crash1')});
	granted_ok($waiter, $t_death, 'waiter killed', 1);
	$holder->quit;
	$waiter->quit;
	eval { $doomed->quit };
	node_back_ok($node_b);
}

# 2. kill -9 of the holding backend.
{
	my $holder = session($node_a, 'holder2');
	$holder->query_safe(q{SELECT zk_lock_acquire('crash2')});
	my $waiter = session($node_b, 'waiter2');
	send_query($waiter, cs_waiter_sql('crash2', 'waiter2'), 'waiter-done');
	ok(wait_for_wait_event($node_b, 'waiter2'), 'a waiter on node_b queued');
	my $t_death = time;
	kill 'KILL', backend_pid($node_a, 'holder2');
	granted_ok($waiter, $t_death, 'holder killed', 1);
	$waiter->quit;
	eval { $holder->quit };
	node_back_ok($node_a);
}

# 3. Immediate shutdown of the holder's PostgreSQL, restarted only after the
#    waiter got the lock.
{
	my $holder = session($node_a, 'holder3');
	$holder->query_safe(q{SELECT zk_lock_acquire('crash3')});
	my $waiter = session($node_b, 'waiter3');
	send_query($waiter, cs_waiter_sql('crash3', 'waiter3'), 'waiter-done');
	ok(wait_for_wait_event($node_b, 'waiter3'), 'a waiter on node_b queued');
	my $t_death = time;
	$node_a->stop('immediate');
	granted_ok($waiter, $t_death, 'immediate shutdown', 0);
	$waiter->quit;
	eval { $holder->quit };
	$node_a->start;
	is($node_a->safe_psql('postgres',
		q{SELECT zk_lock_acquire('crash3', 5000) AND zk_lock_release('crash3')}),
		't', 'node_a locks again after its restart');
}

check_critical_sections($node_a, $node_b);
finish_checks($zk, [ $node_a, $node_b ]);
done_testing();
