
# What bounds a look for a deadlock, and what spaces looks (issue 48.3 and
# 48.4).
#
#  1. A look's round trips are bounded by zklock.connect_timeout, like every
#     round trip of a call.  A waiter looks (deadlock_timeout = 500ms), then
#     ZooKeeper falls silent (SIGSTOP; the client believes it is connected
#     for two thirds of the 30 s session timeout): each later look is cut
#     short after C = 2 s and counted in deadlock_checks, and the wait goes
#     on.  1.6 waited for the look's reply without a bound: no look ended
#     while ZooKeeper was silent.
#  2. The pause between looks is counted in 64 bits.  deadlock_timeout
#     times 2, 4, 8 and 16 overflowed an int above about 37 hours, and the
#     looks ran back to back.  gdb sets the waiter's deadlock_timeout to
#     2,147,000,000 ms after its first look (a SET cannot reach a waiting
#     backend, and the first look comes only after deadlock_timeout): its
#     second look is the last for weeks.  1.6 looked again at once, without
#     end.
#
# Runs alone: a look is bounded at 4 s for 2.5 s of work.

use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

use ZklockTest;

my $c_ms = 2000;
my $zk = start_zk();
my $node = zk_node('node_a', $zk,
	deadlock_timeout => '500ms',
	'zklock.connect_timeout' => $c_ms,
	'zklock.session_timeout' => 30000);
my $probe = session($node, 'probe');

sub looks
{
	return $probe->query_safe('SELECT deadlock_checks FROM zk_session_stats');
}

# Poll until deadlock_checks reaches $n, $timeout seconds at most; returns
# the seconds it took, or undef.
sub wait_for_looks
{
	my ($n, $timeout) = @_;
	my $t0 = time;
	while (time - $t0 < $timeout)
	{
		return time - $t0 if looks() >= $n;
		sleep_for(0.05);
	}
	return undef;
}

my $holder = session($node, 'holder');
$holder->query_safe(q{SELECT zk_lock_acquire('silent'), zk_lock_acquire('spaced')});

# 1. Looks while ZooKeeper is silent.
{
	my $waiter = session($node, 'silent_waiter');
	my $looks0 = looks();
	send_query($waiter, q{SELECT zk_lock_acquire('silent')}, 'granted');
	ok(defined wait_for_looks($looks0 + 1, 30), 'the waiter looked for a deadlock');
	$zk->signal($_, 'STOP') for $zk->running;
	my $stopped = time;
	my $looks1 = looks();
	my $first = wait_for_looks($looks1 + 1, 8);
	my $second = defined $first ? wait_for_looks($looks1 + 2, 8) : undef;
	my $silence = time - $stopped;
	$zk->signal($_, 'CONT') for $zk->running;
	ok(defined $first, sprintf('a look ended while ZooKeeper was silent (%.2f s after the stop)', $first // -1));
	cmp_ok($first // 99, '<', ($c_ms + 500) / 1000 + 1.5,
		'within its round trip\'s connect_timeout of the look\'s start');
	ok(defined $second, sprintf('another one ended, after another deadlock_timeout and round trip (%.2f s of silence)', $silence));
	ok(still_waits($node, "application_name = 'silent_waiter'"), 'the wait goes on');
	$holder->query_safe(q{SELECT zk_lock_release('silent')});
	like(wait_marker($waiter, 'granted'), qr/^t$/m, 'and is granted once the holder lets go');
	is($waiter->{stderr}, '', 'without an error');
	$waiter->query_safe(q{SELECT zk_lock_release('silent')});
	$waiter->quit;
}

# 2. deadlock_timeout near INT_MAX.
{
	my $waiter = session($node, 'spaced_waiter');
	$waiter->query_safe(q{SET deadlock_timeout = '5s'});
	my $pid = $waiter->query_safe('SELECT pg_backend_pid()');
	my $looks0 = looks();
	send_query($waiter, q{SELECT zk_lock_acquire('spaced')}, 'granted');
	ok(defined wait_for_looks($looks0 + 1, 30), 'the waiter looked once, after 5 s');
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'gdb', '-q', '-nx', '-batch', '-p', $pid,
			'-ex', 'set var *(int *) &DeadlockTimeout = 2147000000',
			'-ex', 'print *(int *) &DeadlockTimeout' ],
		'>', \$out, '2>', \$err, IPC::Run::timeout(60));
	like($out, qr/= 2147000000$/m, 'gdb set its deadlock_timeout to 2,147,000,000 ms')
	  or diag "$out\n$err";
	is(looks(), $looks0 + 1, 'before its second look');
	ok(defined wait_for_looks($looks0 + 2, 20), 'it looked a second time, 5 s after the first');
	sleep_for(2);
	my $more = looks() - ($looks0 + 2);
	is($more, 0, "and not again in the next 2 s ($more looks; 1.6 looked back to back)");
	ok(still_waits($node, "pid = $pid"), 'it still waits');
	$holder->query_safe(q{SELECT zk_lock_release('spaced')});
	like(wait_marker($waiter, 'granted'), qr/^t$/m, 'and is granted once the holder lets go');
	$waiter->query_safe(q{SELECT zk_lock_release('spaced')});
	$waiter->quit;
}

$holder->quit;
$probe->quit;
finish_checks($zk, [$node]);
done_testing();
