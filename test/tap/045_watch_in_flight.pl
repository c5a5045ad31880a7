
# A waiter's watch removed under it (issue 25.6).  Readers of one server
# waiting behind the same writer watch the same node, which the server's
# session watches once for all of them.  When one of them gives up, the
# session's watch may be removed only if no other waiter of the server
# still wants it, counting one whose request is still on its way: the
# server would set that watch and then remove it, and its waiter would
# sleep through the writer's release (its node then blocking every later
# writer).  Replies reach node A 100 ms late (a proxy), so that a watch is
# in flight for 100 ms; the first reader's timeout is spread over that
# window.  Ten lanes of 50 rounds each.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

use ZklockTest;

my $lanes = 10;
my $rounds = 50;
my $zk = start_zk();
my $delayed = $zk->start_proxy(delay_ms => 100);
my $node_a = zk_node('node_a', $zk, 'zklock.hosts' => $delayed);
my $node_b = zk_node('node_b', $zk);

my (@writer, @first, @second);
for my $l (1 .. $lanes)
{
	push @writer, session($node_b, "writer$l");
	push @first, session($node_a, "first$l");
	push @second, session($node_a, "second$l");
}

srand(25);
my ($stuck, $gave_up, $rounds_run) = (0, 0, 0);
for my $round (1 .. $rounds)
{
	for my $l (0 .. $lanes - 1)
	{
		$writer[$l]->query_safe("SELECT zk_lock_acquire('R$l')");
	}
	for my $l (0 .. $lanes - 1)
	{
		my $timeout = 200 + int(rand(250));
		send_query($first[$l], "SELECT zk_lock_acquire_shared('R$l', $timeout)", 'first-done');
	}
	sleep_for(0.15);
	my $t0 = time;
	send_query($second[$_], "SELECT zk_lock_acquire_shared('R$_', 5000)", 'second-done')
	  for 0 .. $lanes - 1;
	for my $l (0 .. $lanes - 1)
	{
		my $out = wait_marker($first[$l], 'first-done');
		$gave_up++ if $out =~ /^f/;
		$first[$l]->query_safe("SELECT zk_lock_release_shared('R$l')") if $out =~ /^t/;
	}
	sleep_for(0.5 - (time - $t0)) if time - $t0 < 0.5;
	$writer[$_]->query_safe("SELECT zk_lock_release('R$_')") for 0 .. $lanes - 1;
	for my $l (0 .. $lanes - 1)
	{
		my $out = wait_marker($second[$l], 'second-done');
		if ($out !~ /^t/)
		{
			$stuck++;
			diag "round $round, lane $l: the second reader was not woken by the release";
			next;
		}
		$second[$l]->query_safe("SELECT zk_lock_release_shared('R$l')");
	}
	$rounds_run += $lanes;
	last if $stuck >= 10;
}
note "$gave_up of $rounds_run first readers gave up while the second waited";
cmp_ok($gave_up, '>', $rounds_run / 4, 'the first reader mostly gave up while the second was queueing');
is($stuck, 0, "every second reader was woken by the writer's release, in $rounds_run rounds");
is($node_a->safe_psql('postgres',
		q{SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Extension' AND backend_type = 'client backend'}),
	'0', 'no waiter left waiting');

$_->quit for @writer, @first, @second;
finish_checks($zk, [ $node_a, $node_b ]);
done_testing();
