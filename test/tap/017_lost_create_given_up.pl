
# Fault injection 4b: a create whose reply is lost, by an acquisition that
# then gives up before it can reconnect (after zklock.connect_timeout, which
# bounds the call's own round trips, with 08006).  The node may exist, owned by the
# backend's still-live session; nobody waits for it any more, so it must be
# found by its tag and deleted once the session is connected again, or it
# would block the lock until the backend disconnects.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep time);

use ZklockTest;

my $zk = start_zk();
my $proxied = $zk->start_proxy;
my $node_a = zk_node('node_a', $zk,
	'zklock.hosts' => $proxied,
	'zklock.connect_timeout' => 1500,
	'zklock.session_timeout' => 10000);
my $node_b = zk_node('node_b', $zk);

my $holder = session($node_b, 'holder');
$holder->query_safe(q{SELECT zk_lock_acquire('gave_up')});

my $s = session($node_a, 'quitter');
# A try (which fails) makes the server know the lock's parent exists, so
# that the lock node's create is the next create, not a parent's.
is($s->query_safe(q{SELECT zk_lock_try_acquire('gave_up')}), 'f', 'the lock is held');
my $session_id = zk_session_field($s, 'session_id');

$zk->proxy_signal('HUP');     # no reconnecting for now
# Lose the reply to the next create (the next request may be the session
# worker's ping, which would leave the create unsent).
$zk->proxy_signal('WINCH');
$s->query(q{SELECT zk_lock_acquire('gave_up', 60000)});
like($s->{stderr}, qr/ERROR:  ZooKeeper did not answer within 1500 ms while acquiring a lock/,
	'the acquisition gives up while it cannot reconnect, after connect_timeout');
$s->{stderr} = '';
my $queue = queue_nodes($zk, 'gave_up');
is(scalar @$queue, 2, 'the create happened: its node sits behind the holder');

$zk->proxy_signal('HUP');     # let it reconnect
ok(defined wait_session_state($s, 'connected', 20), 'the backend reconnects');
is(zk_session_field($s, 'session_id'), $session_id, 'with the same session');
my $left = $zk->wait_until_empty(
	sub { [ grep { $_ ne $queue->[0] } @{ queue_nodes($zk, 'gave_up') } ] }, 10);
is_deeply($left, [], "the given-up node is deleted, though its session lives on");

$holder->query_safe(q{SELECT zk_lock_release('gave_up')});
is($s->query_safe(q{SELECT zk_lock_try_acquire('gave_up')}), 't',
	'so the lock is free for the next one');
$s->query_safe(q{SELECT zk_lock_release('gave_up')});
$s->quit;
$holder->quit;

finish_checks($zk, [ $node_a, $node_b ]);
done_testing();
