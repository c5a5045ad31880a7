
# What zklock leaves in ZooKeeper, and how long its waits can last.
#
# 1. Nothing lives forever: a semaphore's parent and every node of an
#    absolute path are containers, so once released the server removes all
#    of them (and zklock.root), not just the lock nodes.
# 2. A handle closed with deletes still pending (its session lost while they
#    were retried) leaves no count behind: COMMIT and ROLLBACK of the next
#    session wait for nothing, even with zklock.connect_timeout raised (any
#    user may), and never longer than the session timeout in the callbacks.
# 3. lock_timeout counts once per acquisition: a semaphore waiter that first
#    waits at the gate, then for a lease, is cancelled after lock_timeout,
#    not after up to twice that.
# 4. Reading a lock queue gives up after zklock.connect_timeout when the
#    server does not answer, instead of waiting for the session timeout.
# 5. A lock whose parent the server removed since this server saw it (its
#    minute as an empty container) is acquired again in two round trips: a
#    failed create, then the whole path's creates in front of the node's.
#    Counted in creates: four whether the root went too or only the parent
#    (five before, in three round trips), and five for a server that never
#    saw the parent, with the root gone (six before).
#
# Runs alone: waits are bounded at 1 s and at their timeouts plus 0.5 s.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep time);

use ZklockTest;

my $zk = start_zk();
my $proxied = $zk->start_proxy;
my $node_a = zk_node('node_a', $zk);
my $node_b = zk_node('node_b', $zk,
	'zklock.hosts' => $proxied,
	'zklock.session_timeout' => 3000);

# Every node under these paths, persistent ones included.
sub nodes_under
{
	my @paths = @_;
	return [ map { $_->[0] } grep {
			my $p = $_->[0];
			grep { $p eq $_ || index($p, "$_/") == 0 } @paths
	} @{ $zk->tree('/') } ];
}

# 1. Containers all the way.
{
	my $s = session($node_a, 'containers');
	$s->query_safe(q{SELECT zk_semaphore_acquire('sem25', 2)});
	$s->query_safe(q{SELECT zk_lock_acquire('/abs25/deep/path')});
	$s->query_safe(q{SELECT zk_lock_acquire('plain25')});
	cmp_ok(scalar @{ nodes_under(ZK_ROOT, '/abs25') }, '>=', 8, 'the locks and their parents exist');
	$s->query_safe(q{SELECT zk_lock_release_all()});
	my $left = $zk->wait_until_empty(sub { nodes_under(ZK_ROOT, '/abs25') }, 15);
	is_deeply($left, [], 'once released, every node of theirs is removed by the server, parents too')
	  or diag explain $left;
	$s->quit;
}

# 2. Deletes pending when the handle is closed.
{
	my $s = session($node_b, 'pending');
	$s->query_safe(q{SET zklock.connect_timeout = '20s'});
	$s->query_safe(q{
DO $$ BEGIN
  FOR i IN 1..300 LOOP PERFORM zk_lock_acquire('pend' || i); END LOOP;
END $$});
	my $lost_before = $s->query_safe(q{SELECT sessions_lost FROM zk_session_stats});
	# Cut off: the releases are retried on every failed reconnect.
	$zk->proxy_signal('HUP');
	$zk->proxy_signal('USR1');
	is($s->query(q{SELECT zk_lock_release_all()}), '300', 'all 300 are released');
	like($s->{stderr},
		qr/WARNING:  zklock lock "pend\d+" and 299 other locks may have been lost before they were released/,
		'with one WARNING: no server confirmed their deletes');
	$s->{stderr} = '';
	# The worker replaces a lost session at once, so "lost" in zk_session()
	# lasts a moment: the count of lost sessions is what stays.
	ok($node_b->poll_query_until('postgres',
			"SELECT sessions_lost > $lost_before FROM zk_session_stats"),
		'the session is lost with its deletes pending');
	$zk->proxy_signal('HUP');
	# Let the worker's next session through: this call waits for it.
	$s->query(q{SELECT zk_lock_try_acquire('after')});
	is(zk_session_field($s, 'state'), 'connected', 'a new session is open');
	$s->{stderr} = '';
	my $slowest = 0;
	for my $i (1 .. 5)
	{
		my $t0 = time;
		$s->query_safe(qq{BEGIN; SELECT zk_lock_xact_acquire('commit$i'); COMMIT});
		my $t1 = time;
		$s->query_safe(qq{BEGIN; SELECT zk_lock_xact_acquire('abort$i'); ROLLBACK});
		my $t2 = time;
		$slowest = $t1 - $t0 if $t1 - $t0 > $slowest;
		$slowest = $t2 - $t1 if $t2 - $t1 > $slowest;
	}
	cmp_ok($slowest, '<', 1,
		sprintf('COMMIT and ROLLBACK of the new session wait for nothing of the old one (slowest %.2f s)', $slowest));
	$s->query_safe(q{SELECT zk_lock_release_all()});
	$s->quit;
}

# 3. One lock_timeout for a semaphore's gate and lease.
{
	my $holder = session($node_a, 'sem_holder');
	my $first = session($node_a, 'sem_first');
	my $second = session($node_a, 'sem_second');
	$holder->query_safe(q{SELECT zk_semaphore_acquire('sem_lt', 1)});
	send_query($first, q{SELECT zk_semaphore_acquire('sem_lt', 1)}, 'first_done');
	ok(wait_for_wait_event($node_a, 'sem_first'), 'a first waiter heads the gate');
	$second->query_safe(q{SET lock_timeout = '2s'});
	my $t0 = time;
	send_query($second, q{SELECT zk_semaphore_acquire('sem_lt', 1)}, 'second_done');
	sleep_for(1.5);
	# The first waiter gets the lease and leaves the gate: the second now
	# waits for a lease.
	$holder->query_safe(q{SELECT zk_semaphore_release('sem_lt')});
	wait_marker($first, 'first_done');
	wait_marker($second, 'second_done');
	my $took = time - $t0;
	like($second->{stderr}, qr/canceling statement due to lock timeout/, 'the second waiter times out');
	cmp_ok($took, '<', 2.7, sprintf('after lock_timeout counted from its first wait (%.2f s)', $took));
	$first->query_safe(q{SELECT zk_semaphore_release('sem_lt')});
	$_->quit for $holder, $first, $second;
}

# 4. A queue read bounded by connect_timeout.
{
	my $s = session($node_a, 'queue_read');
	$s->query_safe(q{SELECT zk_lock_acquire('q25')});
	$s->query_safe(q{SET zklock.connect_timeout = 1000});
	$zk->signal($_, 'STOP') for $zk->running;
	my $t0 = time;
	$s->query(q{SELECT count(*) FROM zk_lock_holders('q25')});
	my $took = time - $t0;
	$zk->signal($_, 'CONT') for $zk->running;
	like($s->{stderr}, qr/ZooKeeper did not answer within 1000 ms while reading a lock queue/,
		'reading a queue from a server that does not answer fails');
	cmp_ok($took, '<', 2.5, sprintf('after zklock.connect_timeout (%.2f s; the session timeout is 10 s)', $took));
	$s->{stderr} = '';
	ok(defined wait_session_state($s, 'connected', 20), 'the session comes back');
	is($s->query_safe(q{SELECT count(*) FROM zk_lock_holders('q25')}), '1', 'and reads the queue');
	$s->query_safe(q{SELECT zk_lock_release_all()});
	$s->quit;
}

# 5. A parent removed since it was seen.
{
	my $s = session($node_a, 'reaped');
	my $creates = sub {
		my ($sess) = @_;
		return $sess->query_safe(q{SELECT creates FROM zk_session_stats});
	};
	my $acquire_counting = sub {
		my ($sess, $name) = @_;
		my $before = $creates->($sess);
		$sess->query_safe(qq{SELECT zk_lock_acquire('$name')});
		is(scalar @{ $zk->ephemerals(ZK_ROOT . "/$name") }, 1, "$name is held");
		return $creates->($sess) - $before;
	};
	my $gone = sub {
		my @paths = @_;
		return $zk->wait_until_empty(sub { nodes_under(@paths) }, 15);
	};

	$s->query_safe(q{SELECT zk_lock_acquire('reap25'); SELECT zk_lock_release('reap25')});
	is_deeply($gone->(ZK_ROOT), [], 'released, the lock and zklock.root are removed');
	is($acquire_counting->($s, 'reap25'), 4,
		'acquired again: a failed create, then the root, the parent and the node');

	$s->query_safe(q{SELECT zk_lock_acquire('keep25'); SELECT zk_lock_release('reap25')});
	is_deeply($gone->(ZK_ROOT . '/reap25'), [], 'released beside a held lock, only its parent is removed');
	is($acquire_counting->($s, 'reap25'), 4,
		'acquired again: a failed create, then the root (it exists), the parent and the node');
	$s->query_safe(q{SELECT zk_lock_release_all()});
	is_deeply($gone->(ZK_ROOT), [], 'all released, the tree is removed');

	my $cold = session($node_b, 'reaped_cold');
	is($acquire_counting->($cold, 'cold25'), 5,
		'a parent never seen, below a root that is gone: the parent and the node, then the root, the parent and the node');
	$cold->query_safe(q{SELECT zk_lock_release_all()});
	$_->quit for $s, $cold;
}

finish_checks($zk, [ $node_a, $node_b ]);
done_testing();
