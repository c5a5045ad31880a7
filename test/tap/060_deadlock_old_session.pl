
# No false deadlock behind nodes of a lost session (issue 41, item 7).  A
# session judged lost by the local clock is replaced at once, but the
# server keeps its nodes until it expires it, about a session timeout later
# (a new leader gives every session a fresh timeout).  The names of a
# backend's nodes did not change with the session, so the detector took a
# backend's leftover node and its new waiting node for one member that
# holds and waits: 38 acquisitions failed with 40P01 in 9 minutes of a
# randomized fault run with one lock, where no cycle is possible.  A member
# is a backend in one session: the names carry the session now.
#
# Backend A holds a lock and B waits for it.  Every ZooKeeper server is
# frozen until the worker's clock judges the session lost (B's wait fails),
# the leader is killed and the others resumed: the worker opens a new
# session while the old one's two nodes are still there, with a fresh
# timeout.  A, then B, acquire the lock again with deadlock_timeout = 100ms.
# In the old naming B's look saw a cycle: B waits for A, whose old node
# holds; A waits (with its new node) for B's old node.  Now both wait, look,
# and are granted in turn once the old session expires, with no 40P01.
#
# Runs alone: the reconnect and six looks must end within a new leader's 6
# s.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

use ZklockTest;

my $timeout_ms = 6000;
my $zk = start_zk(servers => 3);
my $node = zk_node('node_a', $zk,
	'zklock.session_timeout' => $timeout_ms,
	'deadlock_timeout' => '100ms');

my $sa = session($node, 'a');
my $sb = session($node, 'b');
my $probe = session($node, 'probe');
$sa->query_safe(q{SELECT zk_lock_acquire('leftover')});
send_query($sb, q{SELECT zk_lock_acquire('leftover', 60000)}, 'b_old');
ok(wait_for_wait_event($node, 'b'), 'B waits behind A');
my $old_nodes = queue_nodes($zk, 'leftover');
is(scalar @$old_nodes, 2, 'two nodes in the old session');
my $old_session = zk_session_field($probe, 'session_id');

# Frozen until the client notices the silence (after 2/3 of the timeout)
# and the timeout has passed since: the worker judges the session lost by
# its clock, closes it (no server hears that) and opens another once a
# server answers.
my $offset = -s $node->logfile;
my $leader = $zk->leader;
$zk->signal($_, 'STOP') for $zk->running;
ok($node->wait_for_log(qr/ZooKeeper session 0x[0-9a-f]+ is lost/, $offset),
	'the session is judged lost by the local clock');
wait_marker($sb, 'b_old');
like($sb->{stderr}, qr/ERROR/, "B's wait ends with an error");
$sb->{stderr} = '';

# A new leader, with a fresh timeout for the old session and its nodes.
$zk->kill9($leader);
$zk->signal($_, 'CONT') for $zk->running;
$zk->wait_serving;
my $back = time;
ok(defined wait_worker_session($node, 60), 'the worker has a new session');
isnt(zk_session_field($probe, 'session_id'), $old_session, 'another session than the old one');
is_deeply(queue_nodes($zk, 'leftover'), $old_nodes, "the old session's nodes are still there");

# A hears its lock was lost; A, then B, ask for it again.
$sa->query('SELECT count(*) FROM zk_locks');
like($sa->{stderr}, qr/zklock lock "leftover" was lost/, 'A is told its lock was lost');
$sa->{stderr} = '';
my $looks0 = $probe->query_safe('SELECT deadlock_checks FROM zk_session_stats');
send_query($sa, q{SELECT zk_lock_acquire('leftover', 30000) AND zk_lock_release('leftover') AS a_granted}, 'a_new');
ok(wait_for_wait_event($node, 'a'), 'A waits');
send_query($sb, q{SELECT zk_lock_acquire('leftover', 30000) AS b_granted}, 'b_new');
ok(wait_for_wait_event($node, 'b'), 'B waits');
my $queue = queue_nodes($zk, 'leftover');
is_deeply([ @$queue[0, 1] ], $old_nodes, 'behind the old nodes') or diag explain $queue;
is(scalar @$queue, 4, '... A and B have a new node each');
my %owner = map { $_->[0] => $_->[1] } @{ $zk->ephemerals(ZK_ROOT) };
isnt($owner{ $queue->[0] }, $owner{ $queue->[2] // '' }, 'the old and new nodes belong to two sessions');
ok($node->poll_query_until('postgres',
		"SELECT deadlock_checks >= $looks0 + 6 FROM zk_session_stats"),
	'both look for a deadlock while they wait');

my $out_a = wait_marker($sa, 'a_new');
my $out_b = wait_marker($sb, 'b_new');
note sprintf('granted %.1f s after the servers came back; A: %s B: %s',
	time - $back, $sa->{stderr}, $sb->{stderr});
unlike($sa->{stderr} . $sb->{stderr}, qr/deadlock detected/, 'no false 40P01');
like($out_a, qr/^t$/m, 'A is granted once the old session expired');
like($out_b, qr/^t$/m, '... and B after A');
is($probe->query_safe('SELECT deadlocks FROM zk_session_stats'), '0', 'zk_session_stats counts no deadlock');
$sb->{stderr} = '';

$sb->query_safe(q{SELECT zk_lock_release_all()});
$sa->quit;
$sb->quit;
$probe->quit;
finish_checks($zk, [$node]);
done_testing();
