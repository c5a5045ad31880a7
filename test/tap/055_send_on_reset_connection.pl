
# A connection lost while the session worker sends a request.  A request
# the worker hands the client outside zookeeper_process (a create from its
# queue) whose send fails makes the client close the socket and mark the
# handle not connected, without a session event, and none comes for the
# reconnects that fail after it.  The worker went on publishing
# "connected": with ZooKeeper unreachable the session was never judged
# silent for too long, never replaced, and the backends waiting on it waited
# forever (seen once in 032, a waiter stuck for five minutes).  Now the
# worker takes the client's own state over the last event.
#
# The window is forced with gdb: the worker is held at the start of a turn's
# sending (worker_drain_queue) while the proxy resets its connection and a
# backend queues a create; let go, it sends the create on the reset socket.

use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

use ZklockTest;

my $session_timeout_ms = 3000;
my $zk = start_zk();
my $proxied = $zk->start_proxy;
my $node_a = zk_node('node_a', $zk);
my $node_b = zk_node('node_b', $zk,
	'zklock.hosts' => $proxied,
	'zklock.session_timeout' => $session_timeout_ms);

my $holder = session($node_b, 'holder');
is($holder->query_safe(q{SELECT zk_lock_acquire('held')}), 't', 'node_b holds a lock');
my $waiter = session($node_a, 'waiter');
send_query($waiter, q{SELECT zk_lock_acquire('held', 120000)}, 'granted');
ok(wait_for_wait_event($node_a, 'waiter'), 'node_a waits for it');

# Held at the next worker_drain_queue.
my $worker = worker_pid($node_b);
my $gdb_in = '';
my $gdb_out = '';
my $gdb = IPC::Run::start([ 'gdb', '-q', '-nx', '-p', $worker ],
	'<', \$gdb_in, '>', \$gdb_out, '2>&1');
$gdb_in .= "set pagination off\nbreak worker_drain_queue\ncontinue\n";
# gdb reports the hit ("Breakpoint 1, worker_drain_queue ...") only once
# the worker stopped there, which may come before any look sees it running.
my $t0 = time;
my $held = 0;
while (time - $t0 < 60)
{
	$gdb->pump_nb;
	my ($traced, $stopped) = traced_state($worker);
	$held = 1, last if $traced && $stopped && $gdb_out =~ /Breakpoint 1, /;
	sleep_for(0.05);
}
ok($held, 'the worker is held where a turn starts sending') or diag $gdb_out;

# Meanwhile its connection is reset (and new ones refused), and a backend
# queues a create.
$zk->proxy_signal('HUP');
$zk->proxy_signal('USR1');
my $other = session($node_b, 'other');
send_query($other, q{SELECT zk_lock_acquire('other', 60000)}, 'other_done');
ok(wait_for_wait_event($node_b, 'other'), 'a backend of node_b waits for its create');

my $t_reset = time;
$gdb_in .= "delete\ndetach\nquit\n";
$gdb->finish;

ok( $node_b->poll_query_until('postgres',
		q{SELECT state <> 'connected' FROM zk_session()}),
	'node_b\'s session is not taken for connected');
like(wait_marker($waiter, 'granted'), qr/^t$/m,
	'node_a is granted the lock once node_b\'s session expired');
wait_marker($other, 'other_done');
like($other->{stderr}, qr/ZooKeeper session was lost while acquiring a lock|could not connect to ZooKeeper/,
	'the waiting backend of node_b is told its session is gone');
$other->{stderr} = '';
my $took = elapsed_since($t_reset);
cmp_ok($took, '<', 30, sprintf('%.2f s after the reset', $took));
ok($node_b->log_contains('was lost while sending a request'), 'the log says what happened');

$zk->proxy_signal('HUP');
ok(defined wait_worker_session($node_b), 'node_b has a new session once ZooKeeper is reachable');
$holder->query('SELECT zk_lock_release_all()');
like($holder->{stderr}, qr/WARNING:  zklock lock "held" was lost/, 'the holder is told its lock was lost');
is($other->query_safe(q{SELECT zk_lock_acquire('other', 10000) AND zk_lock_release('other')}),
	't', 'node_b locks again');
$waiter->query_safe(q{SELECT zk_lock_release('held')});
$_->quit for $holder, $waiter, $other;

finish_checks($zk, [ $node_a, $node_b ]);
done_testing();
