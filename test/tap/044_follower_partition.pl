
# A follower cut off from its leader (issue 25.2).  It keeps answering its
# clients' pings and reads by itself for syncLimit x tickTime (here 5 s),
# while the leader expires their sessions after the session timeout (2 s)
# and grants their locks to others.  Node A talks only to that follower and
# holds a lock inside a writing transaction, while another backend of its
# server reads the lock's holders every 0.3 s (fresh replies, all from the
# follower).  Node B, through the other two servers, is granted the lock;
# A's COMMIT must then fail with 40001: only a write's reply, which a
# quorum committed, proves that the session lives, and the guard's set of
# a held node is one.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

use ZklockTest;

my $rounds = 20;
my $session_timeout_ms = 2000;
my $zk = start_zk(servers => 3, partitionable => 1, tick_ms => 500);
is($zk->leader, 3, 'server 3 leads');
is($zk->mode(1), 'follower', 'server 1 follows it, through the link that will be cut');

my $node_a = zk_node('node_a', $zk,
	'zklock.hosts' => $zk->hosts(1),
	'zklock.session_timeout' => $session_timeout_ms);
my $node_b = zk_node('node_b', $zk,
	'zklock.hosts' => $zk->hosts(2, 3),
	'zklock.session_timeout' => $session_timeout_ms);
$node_a->safe_psql('postgres', 'CREATE TABLE work (round int)');

my $other = session($node_b, 'other');
my ($unsafe, $refused) = (0, 0);
for my $round (1 .. $rounds)
{
	my $session_id = $node_a->safe_psql('postgres', 'SELECT session_id FROM zk_session()');
	my $holder = session($node_a, 'holder');
	$holder->query_safe('\set VERBOSITY verbose');
	$holder->query_safe(qq{BEGIN; SELECT zk_lock_acquire('P'); INSERT INTO work VALUES ($round)});

	my $reader = session($node_a, 'reader');
	send_query($reader, q{DO $$
BEGIN
  FOR i IN 1..40 LOOP
    PERFORM * FROM zk_lock_holders('P');
    PERFORM pg_sleep(0.3);
  END LOOP;
END $$}, 'reader-done');
	sleep_for(0.3);

	my $t0 = time;
	$zk->cut_link;
	my $granted = $other->query_safe(q{SELECT zk_lock_acquire('P', 20000)});
	my $granted_after = time - $t0;

	send_query($holder, 'COMMIT', 'committed');
	wait_marker($holder, 'committed');
	my $committed = $node_a->safe_psql('postgres', "SELECT count(*) FROM work WHERE round = $round");
	if ($granted eq 't' && $committed ne '0')
	{
		$unsafe++;
		diag "round $round: node_b granted after ${granted_after}s and node_a committed: $holder->{stderr}";
	}
	$refused++ if $holder->{stderr} =~ /ERROR:  40001: zklock lock "P" was lost before the transaction committed/;
	note sprintf('round %d: node_b granted (%s) %.2f s after the cut; node_a %s',
		$round, $granted, $granted_after, $committed eq '0' ? 'rolled back' : 'COMMITTED');
	is($granted, 't', "round $round: node_b is granted the lock") if $round == 1;

	$zk->heal_link;
	$other->query_safe(q{SELECT zk_lock_release('P')});
	$node_a->safe_psql('postgres',
		q{SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE application_name = 'reader'});
	wait_marker($reader, 'reader-done');
	$reader->quit;
	$holder->quit;
	# The leader expired node_a's session: the follower must rejoin it for
	# node_a to open another.
	my $t1 = time;
	my $again = $node_a->poll_query_until('postgres', qq{
SELECT state = 'connected' AND session_id <> '$session_id' FROM zk_session()});
	ok($again, "round $round: node_a has a new session once the link is healed")
	  if !$again || $round == 1 || $round == $rounds;
	last unless $again;
	note sprintf('round %d: node_a has a new session %.2f s after the heal', $round, time - $t1);
}
is($unsafe, 0, "no COMMIT on node_a after node_b was granted, in $rounds rounds");
is($refused, $rounds, 'every such COMMIT failed with 40001');
$other->quit;

finish_checks($zk, [ $node_a, $node_b ]);
done_testing();
