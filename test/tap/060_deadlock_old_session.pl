
# No false deadlock behind a backend's own node of a lost session (issue 41,
# item 7).  A session judged lost by the local clock is replaced at once,
# but the server keeps its nodes until it expires it, about a session
# timeout later (a new leader gives every session a fresh timeout).  The
# names of a backend's nodes did not change with the session, so the
# detector took the backend's leftover node, at the head of the queue, and
# its new waiting node for one member that holds and waits, and failed the
# wait with 40P01 (38 times in 9 minutes of a randomized fault run).  A
# member is a backend in one session: the names carry the session now.
#
# A backend holds a lock; every ZooKeeper server is frozen until the
# worker's clock judges the session lost, the leader is killed and the
# others resumed: the worker opens a new session while the old one's node
# is still there, with a fresh timeout.  The backend then acquires the lock
# again with deadlock_timeout = 100ms: it queues behind its own leftover
# node, looks for a deadlock while it waits, and is granted once the old
# session expires, with no 40P01.

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

my $x = session($node, 'x');
my $probe = session($node, 'probe');
$x->query_safe(q{SELECT zk_lock_acquire('leftover')});
my $old_node = $x->query_safe(q{SELECT znode FROM zk_locks WHERE name = 'leftover'});
my $old_session = zk_session_field($x, 'session_id');

# Frozen until the client notices the silence (after 2/3 of the timeout)
# and the timeout has passed since: the worker judges the session lost by
# its clock, closes it (no server hears that) and opens another once a
# server answers.
my $offset = -s $node->logfile;
my $leader = $zk->leader;
$zk->signal($_, 'STOP') for $zk->running;
ok($node->wait_for_log(qr/ZooKeeper session 0x[0-9a-f]+ is lost/, $offset),
	'the session is judged lost by the local clock');

# A new leader, with a fresh timeout for the old session and its node.
$zk->kill9($leader);
$zk->signal($_, 'CONT') for $zk->running;
$zk->wait_serving;
my $back = time;
ok(defined wait_worker_session($node, 60), 'the worker has a new session');
isnt(zk_session_field($probe, 'session_id'), $old_session, 'another session than the old one');
is_deeply(queue_nodes($zk, 'leftover'), [$old_node], "the old session's node is still there");

# The backend hears its lock was lost, and asks for it again.
$x->query('SELECT count(*) FROM zk_locks');
like($x->{stderr}, qr/zklock lock "leftover" was lost/, 'the backend is told its lock was lost');
$x->{stderr} = '';
my $looks0 = $probe->query_safe('SELECT deadlock_checks FROM zk_session_stats');
my $t0 = time;
send_query($x, q{SELECT zk_lock_acquire('leftover', 30000) AS granted}, 'acquired');
ok(wait_for_wait_event($node, 'x'), 'it waits');
my $queue = queue_nodes($zk, 'leftover');
is(scalar @$queue, 2, 'behind its own node of the old session') or diag explain $queue;
is($queue->[0], $old_node, '... which is at the head of the queue');
my %owner = map { $_->[0] => $_->[1] } @{ $zk->ephemerals(ZK_ROOT) };
isnt($owner{ $queue->[0] }, $owner{ $queue->[1] // '' }, 'the two nodes belong to two sessions');
ok($node->poll_query_until('postgres',
		"SELECT deadlock_checks >= $looks0 + 3 FROM zk_session_stats"),
	'the waiter looks for a deadlock while it waits');

my $out = wait_marker($x, 'acquired');
my $waited = time - $t0;
note sprintf('granted after %.1f s (%.1f s after the servers came back): %s',
	$waited, time - $back, $x->{stderr});
unlike($x->{stderr}, qr/deadlock detected/, 'no false 40P01');
like($out, qr/^t$/m, 'granted once the old session expired');
is($probe->query_safe('SELECT deadlocks FROM zk_session_stats'), '0', 'zk_session_stats counts no deadlock');

$x->query_safe(q{SELECT zk_lock_release_all()});
$x->quit;
$probe->quit;
finish_checks($zk, [$node]);
done_testing();
