
# The queue in ZooKeeper: each waiter watches exactly its predecessor, and
# nothing else (a release wakes one waiter, no herd); a waiter that gives up,
# by timeout or cancel, leaves the queue and takes its watch with it; the
# waiters are granted in queue order across nodes.
#
# Runs alone: it measures the CPU time of waiting backends.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep time);

use ZklockTest;

my $zk = start_zk();
my ($node_a, $node_b) = map { zk_node($_, $zk) } qw(node_a node_b);
my $parent = ZK_ROOT . '/queue';

# Children of the lock's parent, in queue order.
sub queue
{
	my @nodes = grep { $_->[0] =~ m{^\Q$parent\E/} } @{ $zk->ephemerals(ZK_ROOT) };
	return [ sort { substr($a, -10) <=> substr($b, -10) } map { $_->[0] } @nodes ];
}

# Wait until the queue has n nodes.
sub queue_of
{
	my ($n) = @_;
	my $deadline = time + 20;
	my $q = queue();
	while (@$q != $n && time < $deadline)
	{
		sleep 0.05;
		$q = queue();
	}
	return $q;
}

# The session (of the PostgreSQL server) that owns each node of the queue.
sub owners
{
	return { map { $_->[0] => lc $_->[1] } @{ $zk->ephemerals(ZK_ROOT) } };
}

# Check that watches on the queue are exactly: each node's owner on its own
# node (to learn if another client deletes it), and each waiter on its
# predecessor, nothing else.  A ZooKeeper server keeps one watch per session
# and path, and a PostgreSQL server has one session: a waiter on the same
# server as its predecessor's owner shares that watch.
sub watches_ok
{
	my ($q, $what) = @_;
	my $deadline = time + 10;
	my ($got, $want);
	do
	{
		my $w = $zk->watches;
		my $owner = owners();
		$got = { map { $_ => join(',', sort @{ $w->{$_} }) } grep { m{^\Q$parent\E} } keys %$w };
		$want = {
			map {
				my %sids = ($owner->{ $q->[$_] } => 1);
				$sids{ $owner->{ $q->[ $_ + 1 ] } } = 1 if $_ < $#$q;
				($q->[$_] => join(',', sort keys %sids))
			} 0 .. $#$q
		};
		return is_deeply($got, $want, $what) if _same($got, $want);
		sleep 0.1;
	} while (time < $deadline);
	is_deeply($got, $want, $what);
}

sub _same
{
	my ($x, $y) = @_;
	return join(',', map {"$_=$x->{$_}"} sort keys %$x) eq
	  join(',', map {"$_=$y->{$_}"} sort keys %$y);
}

my $holder = $node_a->background_psql('postgres');
$holder->query_safe(q{SELECT zk_lock_acquire('queue')});

# Five waiters, alternating between the nodes, each queued before the next.
my @waiters;
for my $i (1 .. 5)
{
	my $node = $i % 2 ? $node_b : $node_a;
	my $w = $node->background_psql('postgres', timeout => 120, on_error_stop => 0);
	$w->query_safe("SET application_name = 'waiter$i'");
	$w->{stdin} .= "SELECT 'granted', zk_lock_acquire('queue');\n";
	$w->{run}->pump_nb;
	my $q = queue_of($i + 1);
	is(scalar @$q, $i + 1, "waiter$i queued");
	push @waiters, { session => $w, node => $node, name => "waiter$i", znode => $q->[-1] };
}
my $q = queue();
watches_ok($q, 'each of 5 waiters watches only its predecessor (and its own node)');

# CPU spent by the waiting backends over a second: no polling.  Their run
# time as the scheduler counts it (schedstat): utime and stime are sampled
# by the clock tick and miss most of a process that wakes for microseconds.
my @pids = map {
	$_->{node}->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE application_name = '$_->{name}'")
} @waiters;
my $cpu_ms = sub {
	my $ns = 0;
	for my $file (map { glob "/proc/$_/task/*/schedstat" } @pids)
	{
		open my $fh, '<', $file or next;
		my ($run) = split ' ', <$fh>;
		$ns += $run;
	}
	return $ns / 1e6;
};
my $before = $cpu_ms->();
sleep_for(1);
my $used = $cpu_ms->() - $before;
cmp_ok($used, '<=', 20, sprintf('5 waiting backends used at most 20 ms of CPU in 1 s (%.2f ms)', $used));

# Waiter 3 gives up (cancel): its node and its watch go; waiter 4 now
# watches waiter 2.
my $gone = $waiters[2];
$gone->{node}->safe_psql('postgres',
	"SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE application_name = '$gone->{name}'");
$q = queue_of(5);
ok(!(grep { $_ eq $gone->{znode} } @$q), 'cancelled waiter left the queue');
watches_ok($q, 'its watch went with it; the next waiter watches the one before');

# A sixth waiter gives up by lock_timeout while queued: same.
my $late = $node_b->background_psql('postgres', on_error_stop => 0);
$late->query_safe("SET application_name = 'late'");
$late->query(q{SET lock_timeout = '300ms'; SELECT zk_lock_acquire('queue')});
like($late->{stderr}, qr/canceling statement due to lock timeout/, 'late waiter timed out');
$q = queue_of(5);
watches_ok($q, 'a timed-out waiter leaves neither node nor watch');
$late->quit;

# Release: the remaining waiters get the lock in queue order, one at a time.
my @remaining = grep { $_ != $gone } @waiters;
$holder->query_safe(q{SELECT zk_lock_release('queue')});
for my $k (0 .. $#remaining)
{
	my $w = $remaining[$k];
	my $out = $w->{session}->query_until(qr/granted/, '');
	like($out, qr/granted\|t/, "$w->{name} granted, in queue order");
	# Nobody behind it has been granted meanwhile.
	is(scalar @{ queue() }, scalar(@remaining) - $k, 'one holder, the rest still queued');
	$w->{session}->query_safe(q{SELECT zk_lock_release('queue')});
}
$_->{session}->quit for @waiters;
$holder->quit;

is_deeply([ grep { m{^\Q$parent\E} } keys %{ $zk->watches } ], [],
	'no watch left once every waiter is done');
finish_checks($zk, [ $node_a, $node_b ]);
done_testing();
