
# A ZooKeeper server that leaves requests unanswered.  A 3.8.0 follower
# whose data tree had lost a semaphore's gate node after a resync with its
# leader (the nemesis met one) listed that node as missing and failed every
# reply to a create under it, while the leader carried the creates out.  A
# waiter that looked for its node after each lost reply never found it and
# created another, some 12 a second, all in the live session and all ahead
# of every other waiter: the call never returned, and the nodes stayed
# after it was cancelled, so nobody got the semaphore again.
#
# test/zk/tcpproxy.py --faulty answers as that server did for the gate's
# parent.  The session worker must take the skipped reply as the server's
# fault and close the session: the waiter gets 08006 at once, ZooKeeper
# removes every node of the session, the creates that went unanswered
# included, and the semaphore works again once the server is sound.  Three
# rounds; in the last, a backend of the same server holds a lock meanwhile
# and is told it lost it.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

use ZklockTest;

my $session_timeout_ms = 4000;
my $gate = ZK_ROOT . '/S/locks';

my $zk = start_zk();
my $proxied = $zk->start_proxy(faulty => $gate);
my $node_a = zk_node('node_a', $zk,
	'zklock.hosts' => $proxied,
	'zklock.session_timeout' => $session_timeout_ms);
my $node_b = zk_node('node_b', $zk);    # straight to ZooKeeper

my $holder = session($node_b, 'holder');
my $waiter = session($node_a, 'waiter');
my $bystander = session($node_a, 'bystander');
$waiter->query_safe("SET statement_timeout = '20s'");
$waiter->query_safe('\\set VERBOSITY verbose');

# Nodes of node A's sessions under the semaphore.
sub nodes_of_a
{
	my $a_session = shift;
	return [ grep { $_->[0] =~ m{^\Q${\ ZK_ROOT}\E/S/} && lc $_->[1] eq lc $a_session }
		  @{ $zk->ephemerals(ZK_ROOT) } ];
}

for my $round (1 .. 3)
{
	ok(defined wait_worker_session($node_a), "round $round: node A has a session");
	my $a_session = zk_session_field($waiter, 'session_id');
	is($holder->query_safe(q{SELECT zk_semaphore_acquire('S', 1)}), 't',
		"round $round: B holds the semaphore");
	is($bystander->query_safe(q{SELECT zk_lock_acquire('elsewhere')}), 't',
		"round $round: a backend of A holds another lock")
	  if $round == 3;

	$zk->proxy_signal('TTOU');
	my $t0 = time;
	send_call($waiter, "w$round", q{zk_semaphore_acquire('S', 1, 10000)});
	my ($got, $err) = call_result($waiter, "w$round");
	my $took = time - $t0;
	note sprintf('round %d: the waiter returned after %.2f s: %s', $round, $took, $err);
	like($err, qr/ERROR:  08006: ZooKeeper session was lost/,
		"round $round: the waiter gets 08006, not an endless wait");
	cmp_ok($took, '<', 8, "round $round: at once, not at statement_timeout");

	# The server stays faulty meanwhile: what it lists cannot help.
	my $left = $zk->wait_until_empty(sub { nodes_of_a($a_session) },
		$session_timeout_ms / 1000 + 10);
	is_deeply($left, [], "round $round: no node of A's session is left under the semaphore")
	  or diag explain $left;
	$zk->proxy_signal('TTOU');

	if ($round == 3)
	{
		send_call($bystander, 'lost', q{zk_lock_release('elsewhere')});
		my ($released, $lost) = call_result($bystander, 'lost');
		like($lost, qr/zklock lock "elsewhere" was lost/,
			'round 3: the other lock of A is lost with the session');
		like($lost, qr/left a request unanswered/, 'round 3: its holder is told why');
	}

	is($holder->query_safe(q{SELECT zk_semaphore_release('S')}), 't',
		"round $round: B lets go");
	ok(defined wait_worker_session($node_a), "round $round: node A has a new session");
	is($waiter->query_safe(q{SELECT zk_semaphore_acquire('S', 1, 10000)}), 't',
		"round $round: A's waiter gets the semaphore once the server is sound");
	is($waiter->query_safe(q{SELECT zk_semaphore_release('S')}), 't',
		"round $round: and lets go");
}

my $log = slurp_file($node_a->logfile);
my $faults = () = $log =~ /is lost: its server \S+ left a request unanswered/g;
my $recreated = () = $log =~ /was lost and the node does not exist; creating it again/g;
note "$faults sessions closed for the server's fault, $recreated nodes created again";
is($faults, 3, 'the worker logged each fault');
cmp_ok($recreated, '<=', 3, 'no create was made again more than once a round');
like($log, qr/A new session is opened in 1 s/, 'the first reopen waits 1 s');
like($log, qr/A new session is opened in 2 s/, 'the next, in a row, waits longer');

$_->quit for $holder, $waiter, $bystander;
finish_checks($zk, [ $node_a, $node_b ]);
done_testing();
