
# Release requests on a 3-server ensemble, the holder's server and the
# asker's being different ones: a follower serves reads from its own copy,
# which may lag behind the server that granted the lock.  A holder granted
# before zk_lock_request_release began is asked nonetheless (the asker's
# server catches up with the leader before it lists the queue), 400 times
# over, with the holder on the leader and on a follower.
#
# A server of this test ensemble now and then answers nothing for a few
# seconds under such a loop (seen without release requests too: a release
# waiting 6.7 s for its delete); the waits here are long enough for that, and
# a request that fails with the connection is asked again.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

use ZklockTest;

my $zk = start_zk(servers => 3);
my $leader = $zk->leader;
my @followers = grep { $_ != $leader } 1 .. 3;
my $one = sub { '127.0.0.1:' . $zk->client_port($_[0]) };

for my $case ([ 'holder on the leader', $leader, $followers[0] ],
	[ 'holder on a follower', $followers[0], $followers[1] ])
{
	my ($what, $holder_server, $asker_server) = @$case;
	my $node_a = zk_node("node_a_$holder_server", $zk,
		'zklock.hosts' => $one->($holder_server),
		'zklock.connect_timeout' => '30s');
	my $node_b = zk_node("node_b_$asker_server", $zk,
		'zklock.hosts' => $one->($asker_server),
		'zklock.connect_timeout' => '30s');
	my $holder = session($node_a, 'holder');
	my $asker = session($node_b, 'asker');

	my ($missed, $unheard, $retried) = (0, 0, 0);
	for my $i (1 .. 200)
	{
		$holder->query_safe(q{SELECT zk_lock_acquire('lagging')});
		my ($asked, $err);
		for (1 .. 3)
		{
			($asked, $err) = $asker->query(q{SELECT zk_lock_request_release('lagging')});
			last if $asker->{stderr} eq '';
			note "request $i failed: $asker->{stderr}";
			$asker->{stderr} = '';
			$retried++;
		}
		$missed++ unless $asked eq '1';
		my $t0 = time;
		poll_query($holder, q{SELECT zk_lock_release_requested('lagging')}, 't', 30) eq 't'
		  or $unheard++;
		note sprintf('request %d heard after %.1f s', $i, time - $t0) if time - $t0 > 1;
		$holder->query_safe(q{SELECT zk_lock_release('lagging')});
	}
	note "$what: $retried requests failed with the connection and were repeated";
	is($missed, 0, "$what: every one of 200 fresh holders was asked from another server");
	is($unheard, 0, "$what: and heard it");

	$holder->quit;
	$asker->quit;
	no_orphans_ok($zk, "$what: no znode without a live owner");
	$_->stop for $node_a, $node_b;
}

tree_empty_ok($zk, 'no lock node left once the nodes are stopped');
$zk->stop;
done_testing();
