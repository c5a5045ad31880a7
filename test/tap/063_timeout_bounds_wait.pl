
# timeout_ms bounds only the wait behind others (issue 42.1 and 42.8).
#
# Every reply of ZooKeeper reaches node_a 30 ms late (a proxy), so that a
# create and its listing take longer than a timeout of 1 or 10 ms.  A free
# lock is granted whatever timeout_ms, as with Curator's acquire(time) and
# PostgreSQL's lock_timeout: the call's own round trips are bounded by
# zklock.connect_timeout, not by timeout_ms.  A lock held elsewhere is still
# refused at once with a small timeout, and nothing of the attempt is left.
#
# A release with ZooKeeper stopped gives up on its delete's answer after
# zklock.connect_timeout (2 s here), not the session timeout (10 s): false
# with the 08006 WARNING; the delete still goes out once ZooKeeper is back.
#
# Runs alone: calls are bounded at 2 s for 0.2 s of work.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

use ZklockTest;

my $delay_ms = 30;
my $connect_timeout_ms = 2000;
my $zk = start_zk();
my $delayed = $zk->start_proxy(delay_ms => $delay_ms);
my $node_a = zk_node('node_a', $zk,
	'zklock.hosts' => $delayed,
	'zklock.connect_timeout' => $connect_timeout_ms,
	'zklock.session_timeout' => 10000);
my $node_b = zk_node('node_b', $zk);

my $s = session($node_a, 'acquirer');
$s->query_safe('\set VERBOSITY verbose');
# The session is open: what follows is timed by round trips alone.
is($s->query_safe(q{SELECT zk_lock_try_acquire('warm') AND zk_lock_release('warm')}),
	't', 'locking works through the delaying proxy');

# Each call on a free lock, granted and released; the lock names are new, so
# the first one's parent is created in the same round trip too.
my @free = (
	[ q{zk_lock_acquire('free1', 1)}, q{zk_lock_release('free1')} ],
	[ q{zk_lock_acquire('free1', 10)}, q{zk_lock_release('free1')} ],
	[ q{zk_lock_acquire('free2', 1)}, q{zk_lock_release('free2')} ],
	[ q{zk_lock_acquire_shared('free3', 1)}, q{zk_lock_release_shared('free3')} ],
	[ q{zk_lock_acquire_shared('free3', 10)}, q{zk_lock_release_shared('free3')} ],
	[ q{zk_semaphore_acquire('free4', 2, 1)}, q{zk_semaphore_release('free4')} ],
	[ q{zk_semaphore_acquire('free4', 2, 10)}, q{zk_semaphore_release('free4')} ],
	[ q{zk_semaphore_acquire('free5', 1, 5)}, q{zk_semaphore_release('free5')} ]);
for my $call (@free)
{
	my ($acquire, $release) = @$call;
	my $t0 = time;
	my $got = $s->query_safe("SELECT $acquire");
	my $took = elapsed_since($t0);
	is($got, 't', sprintf("free lock: $acquire is granted (%.0f ms)", $took * 1000));
	$s->query_safe("SELECT $release") if $got eq 't';
}
is($s->query_safe(q{SELECT zk_lock_xact_acquire('free6', 1)}), 't',
	'free lock: a transaction lock with timeout_ms 1 is granted');

# Held elsewhere: refused within about the round trips, nothing left.
my $holder = session($node_b, 'holder');
$holder->query_safe(q{SELECT zk_lock_acquire('held'), zk_semaphore_acquire('held_sem', 1)});
for my $acquire (q{zk_lock_acquire('held', 1)}, q{zk_lock_acquire('held', 0)},
	q{zk_lock_acquire('held', 10)}, q{zk_semaphore_acquire('held_sem', 1, 10)})
{
	my $t0 = time;
	my $got = $s->query_safe("SELECT $acquire");
	my $took = elapsed_since($t0);
	is($got, 'f', "held lock: $acquire is refused");
	cmp_ok($took, '<', $connect_timeout_ms / 1000,
		sprintf('promptly (%.0f ms), within connect_timeout', $took * 1000));
}
is(scalar @{ queue_nodes($zk, 'held') }, 1, "only the holder's node is queued");
is(scalar @{ queue_nodes($zk, 'held_sem') }, 1, "only the holder's lease is there, no gate node");
is($s->{stderr}, '', 'no error on the way') or diag $s->{stderr};

# A waiter behind a holder that lets go in time is still granted.
send_query($s, q{SELECT zk_lock_acquire('held', 30000) AS got}, 'waited');
ok(still_waits($node_a, "application_name = 'acquirer'"), 'a waiter with a long timeout waits');
$holder->query_safe(q{SELECT zk_lock_release('held')});
like(wait_marker($s, 'waited'), qr/^t$/m, 'and is granted once the holder releases');
$s->query_safe(q{SELECT zk_lock_release('held')});
$holder->query_safe(q{SELECT zk_semaphore_release('held_sem')});

# Release with ZooKeeper stopped: bounded by connect_timeout.
$s->query_safe(q{SELECT zk_lock_acquire('release_down')});
my $session_id = zk_session_field($s, 'session_id');
$zk->stop;
my $t0 = time;
my $released = $s->query(q{SELECT zk_lock_release('release_down')});
my $took = elapsed_since($t0);
is($released, 'f', 'release with ZooKeeper stopped returns false');
like($s->{stderr}, qr/WARNING:  08006: zklock lock "release_down" may have been lost before it was released/,
	'with the 08006 WARNING');
cmp_ok($took, '<', 5,
	sprintf('after about connect_timeout (%.2f s), not the session timeout', $took));
$s->{stderr} = '';

$zk->start;
ok(defined wait_session_state($s, 'connected', 30), 'ZooKeeper back: the session reconnects');
note(zk_session_field($s, 'session_id') eq $session_id
	? 'on the same session: the delete was sent again'
	: 'on a new session: the old one expired with its node');
my $left = $zk->wait_until_empty(sub { queue_nodes($zk, 'release_down') }, 20);
is_deeply($left, [], 'the released node is deleted once ZooKeeper is back');
is($s->query_safe('SELECT count(*) FROM zk_locks'), '0', 'nothing held');

$s->quit;
$holder->quit;
finish_checks($zk, [ $node_a, $node_b ]);
done_testing();
