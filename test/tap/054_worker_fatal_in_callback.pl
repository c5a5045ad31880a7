
# The session worker ends by FATAL inside one of the ZooKeeper client's
# callbacks (issue 27, item 7): out of memory while it handles a reply, say.
# zookeeper_close called from there only notes the close for when the
# callback returns, which it never does, so no closeSession is sent.  The
# worker used to delete its session file all the same: the next worker could
# not end the old session, and the server's locks stayed held in ZooKeeper
# until the session expired.  The file now stays until a close was sent:
# the next worker ends the old session, and another node gets the lock at
# once, long before the session timeout.
#
# The fault is injected with gdb at a known point: a breakpoint in the
# callback that handles a create's reply raises FATAL there, as ereport
# would.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

use ZklockTest;

my $session_timeout_ms = 30000;
my $zk = start_zk();
my %settings = ('zklock.session_timeout' => $session_timeout_ms);
my $node_a = zk_node('node_a', $zk, %settings);
my $node_b = zk_node('node_b', $zk, %settings);

my $holder = session($node_a, 'holder');
is($holder->query_safe(q{SELECT zk_lock_acquire('kept')}), 't', 'node_a holds a lock');
my $waiter = session($node_b, 'waiter');
send_query($waiter, q{SELECT zk_lock_acquire('kept', 120000)}, 'granted');
ok(wait_for_wait_event($node_b, 'waiter'), 'node_b waits for it');

my $worker = worker_pid($node_a);
my $gdb_out = "$PostgreSQL::Test::Utils::tmp_check/054_gdb.out";
my $gdb = IPC::Run::start(
	[
		'gdb', '-p', $worker, '-batch', '-nx',
		'-ex', 'break create_done',
		'-ex', 'continue',
		'-ex', 'call (void) ((char (*)(int, const char *)) errstart)(22, 0)',
		'-ex', 'call (void) ((int (*)(const char *, ...)) errmsg)("fault injected in a ZooKeeper client callback")',
		'-ex', 'call ((void (*)(const char *, int, const char *)) errfinish)("054", 1, "create_done")',
	],
	'<', \undef, '>', $gdb_out, '2>&1');
# Attached (traced), and let go on (not in a tracing stop): the breakpoint
# is in place.
my $t0 = time;
my $armed = 0;
while (time - $t0 < 60)
{
	my ($traced, $stopped) = traced_state($worker);
	$armed = 1, last if $traced && !$stopped;
	sleep_for(0.1);
}
ok($armed, 'gdb waits in the callback for a create\'s reply')
  or diag slurp_file($gdb_out);

# A create, whose reply the worker handles in create_done.
my $t_fault = time;
my $other = session($node_a, 'other');
$other->query(q{SELECT zk_lock_acquire('trigger', 10000)});
$other->quit;
$gdb->finish;
note slurp_file($gdb_out);
ok($node_a->wait_for_log(qr/FATAL:  fault injected in a ZooKeeper client callback/),
	'the worker ended by FATAL inside the callback');

like(wait_marker($waiter, 'granted'), qr/^t$/m, 'node_b is granted the lock');
my $took = elapsed_since($t_fault);
cmp_ok($took, '<', $session_timeout_ms / 1000 / 2,
	sprintf('%.2f s after the fault, long before the session timeout (%d s)',
		$took, $session_timeout_ms / 1000));
note sprintf('worker ended by FATAL in a callback: lock granted elsewhere %.2f s later', $took);
ok($node_a->log_contains(qr/closed ZooKeeper session 0x[0-9a-f]+; the locks it held are free/),
	'the next worker ended the old session, as the log says');

$waiter->query_safe(q{SELECT zk_lock_release('kept')});
$waiter->quit;
eval { $holder->quit };
ok(defined wait_worker_session($node_a), 'node_a has a new session');
is($node_a->safe_psql('postgres',
	q{SELECT zk_lock_acquire('kept', 5000) AND zk_lock_release('kept')}),
	't', 'and locks again');

finish_checks($zk, [ $node_a, $node_b ], 10);
done_testing();
