
# Mutual exclusion across two PostgreSQL nodes sharing one ZooKeeper:
# several backends on each node loop over a critical section under one lock,
# half with session locks, half with transaction locks, and no two critical
# sections ever overlap.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;

use ZklockTest;

my $zk = start_zk();
my @nodes = map { zk_node($_, $zk) } qw(node_a node_b);
install_cs_log($_) for @nodes;

my $workers_per_node = 4;
my $iterations = 30;

# Start every worker before any of them begins, so that they really contend.
my @sessions;
for my $node (@nodes)
{
	for my $w (1 .. $workers_per_node)
	{
		my $style = $w % 2 ? 'session' : 'xact';
		my $session = $node->background_psql('postgres', timeout => 300);
		$session->query_safe(q{SELECT zk_lock_try_acquire('warmup') AND zk_lock_release('warmup')});
		push @sessions, [ $session, $node->name . "/w$w", $style ];
	}
}
for (@sessions)
{
	my ($session, $worker, $style) = @$_;
	$session->{stdin} .= "CALL cs_loop('$worker', $iterations, '$style');\n\\echo done\n";
	$session->{run}->pump_nb;
}
for (@sessions)
{
	my ($session, $worker) = @$_;
	$session->query_until(qr/done/, '');
	$session->quit;
}

my $count = check_critical_sections(@nodes);
is($count, 2 * $workers_per_node * $iterations, 'every iteration ran');

# Every node drew critical sections, and both kinds of lock were used.
for my $node (@nodes)
{
	my $n = $node->safe_psql('postgres', 'SELECT count(DISTINCT worker) FROM cs');
	is($n, $workers_per_node, $node->name . ': all workers took the lock');
}

finish_checks($zk, \@nodes);
done_testing();
