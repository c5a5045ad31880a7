
# The server's ZooKeeper session, held by the session worker (issue 18).
#
# 1. Without shared_preload_libraries zklock refuses to run: 55000, with a
#    hint naming the setting.
# 2. Its settings are server-wide: SET fails at once (55P02); a reload that
#    changes zklock.hosts closes the session, the locks held in it are lost
#    (zk_locks says so, COMMIT of a transaction that wrote fails with
#    40001), and are free for the other nodes at once.
# 3. Hosts that do not answer, do not resolve, or name a chroot that does
#    not exist: clear errors, within zklock.connect_timeout.
# 4. The worker killed with SIGKILL: the postmaster restarts the server, the
#    new worker ends the old session, the other node gets the lock at once.
# 5. The worker stopped with SIGSTOP past the session timeout: the holders'
#    COMMITs fail with 40001, the other node gets the locks; resumed, the
#    worker opens a new session.
# 6. A backend stopped with SIGSTOP past the session timeout: its locks stay
#    held, like advisory locks, and it goes on when resumed.
#
# Runs alone: failures are bounded at 0.5 s and 3 s.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

use ZklockTest;

my $session_timeout_ms = 4000;
my $timeout_s = $session_timeout_ms / 1000;
my $zk = start_zk();
my $hosts = $zk->hosts;

# 1. Not preloaded.
{
	my $plain = zk_node('plain', $zk, shared_preload_libraries => '');
	my ($ret, $out, $err) = $plain->psql('postgres',
		"\\set VERBOSITY verbose\nSELECT zk_lock_acquire('x')");
	like($err, qr/ERROR:  55000: zklock must be loaded via shared_preload_libraries/,
		'not preloaded: 55000');
	like($err, qr/HINT:  Add zklock to shared_preload_libraries and restart the server\./,
		'with a hint naming shared_preload_libraries');
	for my $sql ('SELECT * FROM zk_session()', 'SELECT * FROM zk_lock_stats',
		'SELECT * FROM zk_cluster_locks')
	{
		($ret, $out, $err) = $plain->psql('postgres', $sql);
		like($err, qr/zklock must be loaded via shared_preload_libraries/, "not preloaded: $sql fails too");
	}
	$plain->stop;
}

my $node_a = do {
	local $ENV{LD_PRELOAD} = fakedns_lib();
	zk_node('node_a', $zk,
		'zklock.session_timeout' => $session_timeout_ms,
		'restart_after_crash' => 'on');
};
my $node_b = zk_node('node_b', $zk);
$node_a->safe_psql('postgres', 'CREATE TABLE done (what text)');

# 2. Settings.
my $s = session($node_a, 'settings');
$s->query_safe('\set VERBOSITY verbose');
$s->query(q{SET zklock.hosts = '127.0.0.1:2181'});
like($s->{stderr}, qr/ERROR:  55P02: parameter "zklock.hosts" cannot be changed now/,
	'SET zklock.hosts fails at once: 55P02');
$s->{stderr} = '';
my $old_session = zk_session_field($s, 'session_id');
$s->query_safe(q{SELECT zk_lock_acquire('moved')});
$s->query_safe(q{BEGIN});
$s->query_safe(q{INSERT INTO done VALUES ('while moved was held')});
my $proxied = $zk->start_proxy;
ok(reconfigure($node_a, 'zklock.hosts' => $proxied), 'a reload with new hosts closes the session');
is($node_b->safe_psql('postgres', q{SELECT zk_lock_try_acquire('moved')}), 't',
	'its lock is free for the other node at once');
is($s->query_safe(q{SELECT state FROM zk_locks WHERE name = 'moved'}), 'lost',
	'zk_locks says the lock is lost');
$s->query(q{COMMIT});
like($s->{stderr}, qr/ERROR:  40001: zklock lock "moved" was lost before the transaction committed/,
	'COMMIT of the transaction that wrote under it fails with 40001');
$s->{stderr} = '';
is($node_a->safe_psql('postgres', q{SELECT count(*) FROM done}), '0', 'and its row is rolled back');
ok(defined wait_worker_session($node_a), 'the worker has a new session');
isnt(zk_session_field($s, 'session_id'), $old_session, 'another one');
is($s->query_safe(q{SELECT zk_lock_try_acquire('moved') AND zk_lock_release('moved')}), 't',
	'and the lock is taken again in it');

# 3. Hosts that do not work.
$s->query_safe(q{SET zklock.connect_timeout = 1500});
for my $case (
	[ 'unreachable', '127.0.0.1:1', qr/DETAIL:  No server accepted a session within 1500 ms\./ ],
	[ 'unresolvable', 'gone.zklock.test:2181',
		qr/DETAIL:  The ZooKeeper client rejected the connection string \(no host name resolves\)\./ ])
{
	my ($what, $bad, $detail) = @$case;
	$node_a->append_conf('postgresql.conf', "zklock.hosts = '$bad'\n");
	$node_a->reload;
	# Until the worker has taken the new hosts, the errors may be the old ones.
	my $seen = 0;
	for (1 .. 20)
	{
		$s->query(q{SELECT zk_lock_try_acquire('nowhere') AND zk_lock_release('nowhere')});
		$seen = $s->{stderr} =~ $detail;
		$s->{stderr} = '';
		last if $seen;
		sleep_for(0.2);
	}
	ok($seen, "$what hosts: the worker takes them");
	my $t0 = time;
	$s->query(q{SELECT zk_lock_acquire('nowhere')});
	my $took = elapsed_since($t0);
	like($s->{stderr}, qr/ERROR:  08001: could not connect to ZooKeeper at "\Q$bad\E"/,
		"$what hosts: 08001 naming them");
	like($s->{stderr}, $detail, "$what hosts: saying why");
	if ($what eq 'unresolvable')
	{
		# Known to the worker: no wait for the connect_timeout.
		cmp_ok($took, '<', 0.5, sprintf("$what hosts: at once (%.2f s)", $took));
	}
	else
	{
		cmp_ok($took, '<', 1.5 + 1.5, sprintf("$what hosts: within connect_timeout (%.2f s)", $took));
	}
	$s->{stderr} = '';
}
ok(reconfigure($node_a, 'zklock.hosts' => "$hosts/no/such/chroot"), 'a missing chroot');
ok(defined wait_worker_session($node_a), 'connects');
$s->query(q{SELECT zk_lock_acquire('chrooted')});
like($s->{stderr}, qr/ERROR:  .*the chroot in zklock.hosts does not exist/, 'a missing chroot is named');
$s->{stderr} = '';
# The cluster-wide listing says so too, rather than look empty.
$s->query(q{SELECT count(*) FROM zk_cluster_locks});
like($s->{stderr}, qr/ERROR:  55000: the chroot in zklock.hosts does not exist/,
	'zk_cluster_locks: 55000, a missing chroot named, not 0 rows');
$s->{stderr} = '';
ok(reconfigure($node_a, 'zklock.hosts' => $hosts), 'back to the ensemble');
ok(defined wait_worker_session($node_a), 'connected again');
is($s->query_safe(q{SELECT count(*) FROM zk_locks}), '0', 'nothing held after all that');
$s->quit;

# A holder on node_a and a waiter on node_b, for the lock $lock.
sub holder_and_waiter
{
	my ($lock, $label) = @_;
	my $holder = session($node_a, "holder_$label");
	$holder->query_safe(qq{SELECT zk_lock_acquire('$lock')});
	my $waiter = session($node_b, "waiter_$label");
	send_query($waiter, qq{SELECT zk_lock_acquire('$lock', 60000)}, 'granted');
	ok(wait_for_wait_event($node_b, "waiter_$label"), "$label: a waiter on node_b");
	return ($holder, $waiter);
}

# 4. The worker killed.
{
	my ($holder, $waiter) = holder_and_waiter('worker_killed', 'sigkill');
	my $t0 = time;
	kill 'KILL', worker_pid($node_a);
	like(wait_marker($waiter, 'granted'), qr/^t$/m, 'worker killed: the waiter is granted');
	my $took = elapsed_since($t0);
	cmp_ok($took, '<', $timeout_s / 2 + 1,
		sprintf('%.2f s after the kill, before the session timeout', $took));
	note sprintf('session worker killed with SIGKILL: lock granted elsewhere %.2f s later', $took);
	$waiter->query_safe(q{SELECT zk_lock_release('worker_killed')});
	$waiter->quit;
	eval { $holder->quit };
	ok($node_a->poll_query_until('postgres', 'SELECT true'), 'node_a is back');
	is($node_a->safe_psql('postgres',
		q{SELECT zk_lock_acquire('worker_killed', 5000) AND zk_lock_release('worker_killed')}),
		't', 'and locks again');
}

# 5. The worker stopped past the session timeout.
{
	ok(defined wait_worker_session($node_a), 'node_a has a session');
	my $worker = worker_pid($node_a);
	my ($holder, $waiter) = holder_and_waiter('worker_stopped', 'sigstop');
	my $xact = session($node_a, 'xact_holder');
	$xact->query_safe(q{BEGIN});
	$xact->query_safe(q{SELECT zk_lock_xact_acquire('worker_stopped_x')});
	$xact->query_safe(q{INSERT INTO done VALUES ('xact lock')});
	$holder->query_safe(q{BEGIN});
	$holder->query_safe(q{INSERT INTO done VALUES ('session lock')});

	my $t0 = time;
	kill 'STOP', $worker;
	like(wait_marker($waiter, 'granted'), qr/^t$/m,
		'worker stopped: the other node gets the lock');
	my $took = elapsed_since($t0);
	cmp_ok($took, '>', $timeout_s * 2 / 3 - 0.5, sprintf('once the session expired (%.2f s)', $took));
	is($node_b->safe_psql('postgres', q{SELECT zk_lock_try_acquire('worker_stopped_x')}), 't',
		'and the transaction lock');
	sleep_for(1);
	send_query($_, 'COMMIT', 'committed') for $holder, $xact;
	sleep_for(0.5);
	kill 'CONT', $worker;
	for my $h ($holder, $xact)
	{
		wait_marker($h, 'committed');
		like($h->{stderr}, qr/ERROR:  zklock lock "worker_stopped(_x)?" was lost before the transaction committed/,
			'the holder\'s COMMIT fails (40001)');
		$h->{stderr} = '';
	}
	is($node_a->safe_psql('postgres', q{SELECT count(*) FROM done}), '0',
		'nothing they wrote is committed');
	ok(defined wait_worker_session($node_a), 'resumed, the worker has a new session');
	is($holder->query_safe(q{SELECT count(*) FROM zk_locks}), '0', 'the lost lock is forgotten');
	$waiter->query_safe(q{SELECT zk_lock_release('worker_stopped')});
	is($holder->query_safe(q{SELECT zk_lock_acquire('worker_stopped', 5000)}), 't',
		'and taken again on it');
	$holder->query_safe(q{SELECT zk_lock_release('worker_stopped')});
	$_->quit for $holder, $waiter, $xact;
}

# 6. A backend stopped past the session timeout.
{
	my $holder = session($node_a, 'paused');
	my $pid = $holder->query_safe('SELECT pg_backend_pid()');
	$holder->query_safe(q{SELECT zk_lock_acquire('paused')});
	$holder->query_safe(q{BEGIN});
	$holder->query_safe(q{INSERT INTO done VALUES ('paused')});
	kill 'STOP', $pid;
	sleep_for($timeout_s * 1.5);
	is($node_b->safe_psql('postgres', q{SELECT zk_lock_try_acquire('paused')}), 'f',
		'a stopped backend keeps its lock past the session timeout');
	kill 'CONT', $pid;
	$holder->query_safe(q{COMMIT});
	is($node_a->safe_psql('postgres', q{SELECT count(*) FROM done}), '1', 'resumed, it commits');
	is($holder->query_safe(q{SELECT state FROM zk_locks WHERE name = 'paused'}), 'held',
		'and still holds the lock');
	$holder->query_safe(q{SELECT zk_lock_release('paused')});
	$holder->quit;
}

finish_checks($zk, [ $node_a, $node_b ]);
done_testing();
