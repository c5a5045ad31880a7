
# Every path that ends the session closes the commit gate, in the same hold
# of the mutex in which it counts the commits under way (issue 41, item 3).
# The worker's exit counted them, let go of the mutex and then closed the
# session: a backend could pass the guard in between, and the session was
# ended at once under it, so another server was granted the lock before the
# holder's commit record was written.
#
# The window is forced: gdb holds node_a's worker at close_session (on the
# old code: after it counted, before it closed) while its session is being
# ended by SIGTERM, by a FATAL inside a ZooKeeper client callback, by a
# reload that changes zklock.session_timeout or zklock.hosts, or by a
# backend's write-off.  Then the
# holder commits: it passes the guard (proven by its young acquire) or is
# refused there, and is held before its commit record, in PreCommit_Notify,
# by NOTIFY's lock, which another transaction holds (committed and waiting
# for a standby that is not there).  node_b waits for the same lock.
#
# Unsafe: node_b's grant (clock_timestamp() when its acquire returns) is
# earlier than the holder's commit (pg_xact_commit_timestamp of its row).
# With the gate closed first, either the holder's COMMIT is refused (40001)
# or the worker sees it and leaves the session to expire.

use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

use ZklockTest;

my $session_timeout_ms = 10000;
my $zk = start_zk();
my $proxied = $zk->start_proxy;
# With WAL senders, so that a commit can wait for a synchronous standby.
my $node_a = zk_node('node_a', $zk, allows_streaming => 1,
	'zklock.session_timeout' => $session_timeout_ms,
	'track_commit_timestamp' => 'on');
my $node_b = zk_node('node_b', $zk);
$node_a->safe_psql('postgres', 'CREATE TABLE work (what text)');
# Commits that write wait for a standby that is not there, but with
# synchronous_commit = local.
$node_a->append_conf('postgresql.conf', "synchronous_standby_names = 'nobody'\n");
$node_a->reload;

my $observer = session($node_a, 'observer');
my $other = session($node_b, 'other');

# wait_event_type/wait_event/state of the backend named $app.
sub activity
{
	my ($app) = @_;
	return $observer->query_safe(qq{
SELECT coalesce(wait_event_type, '') || '/' || coalesce(wait_event, '') || '/' || state
  FROM pg_stat_activity WHERE application_name = '$app'});
}

sub wait_activity
{
	my ($app, $want) = @_;
	my $t0 = time;
	my $seen = '';
	while (time - $t0 < 30)
	{
		$seen = activity($app);
		last if $seen =~ $want;
		sleep_for(0.02);
	}
	return $seen;
}

sub change_setting
{
	my ($name, $value) = @_;
	$node_a->append_conf('postgresql.conf', "$name = '$value'\n");
	$node_a->reload;
	return;
}

my $unsafe = 0;
my $rounds = 0;

# One round.  $arm attaches gdb to the worker and returns it (after the
# holder's acquire, whose reply is the guard's proof at COMMIT: young
# enough, within two thirds of the session timeout); $close makes the worker
# end its session and returns once gdb holds it at close_session.
sub round
{
	my ($path, $lock, $arm, $close) = @_;
	ok(defined wait_worker_session($node_a), "$path: node_a's session is connected");
	my $holder = session($node_a, 'holder');
	my $blocker = session($node_a, 'blocker');
	$holder->query_safe('SET synchronous_commit = local');
	my $worker = worker_pid($node_a);
	$holder->query_safe(qq{BEGIN; SELECT zk_lock_acquire('$lock');
INSERT INTO work VALUES ('$lock'); NOTIFY zk057});
	my $gdb = $arm->($worker);
	send_query($other,
		qq{SELECT zk_lock_acquire('$lock', 60000), extract(epoch FROM clock_timestamp())},
		'granted');
	ok(wait_for_wait_event($node_b, 'other'), "$path: node_b waits for the lock");
	send_query($blocker, q{BEGIN; INSERT INTO work VALUES ('blocker'); NOTIFY zk057; COMMIT},
		'blocker_done');
	like(wait_activity('blocker', qr{^IPC/SyncRep/}), qr{^IPC/SyncRep/},
		"$path: another transaction holds NOTIFY's lock (committed, waiting for a standby)");

	ok($close->($gdb), "$path: the worker ends its session and is held at close_session")
	  or diag $gdb->{out};
	send_query($holder, 'COMMIT', 'committed');
	my $seen = wait_activity('holder', qr{^Lock/object/active$|/idle$});
	like($seen, qr{^Lock/object/active$|/idle$},
		"$path: the holder's COMMIT passed the guard (held before its commit record) or was refused");
	my $passed = $seen =~ /^Lock/;
	my $t0 = time;
	gdb_let_go($gdb);
	# The old code ends the session now, and node_b is granted the lock at
	# once (the next worker, on the FATAL path); the holder goes on later.
	sleep_for(3);
	$observer->query_safe(
		q{SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE application_name = 'blocker'});
	wait_marker($blocker, 'blocker_done');
	wait_marker($holder, 'committed');
	my $committed = $node_a->safe_psql('postgres',
		"SELECT extract(epoch FROM pg_xact_commit_timestamp(xmin)) FROM work WHERE what = '$lock'");
	my ($granted) = wait_marker($other, 'granted') =~ /^t\|([0-9.]+)$/m;
	ok(defined $granted, "$path: node_b is granted the lock");
	$granted //= 0;
	if ($passed)
	{
		is($holder->{stderr}, '', "$path: the holder committed");
	}
	else
	{
		like($holder->{stderr}, qr/ERROR:  zklock lock "\Q$lock\E" was lost before the transaction committed/,
			"$path: the holder's COMMIT was refused (40001)");
		is($committed, '', "$path: and its row is not there");
	}
	my $bad = $committed ne '' && $granted < $committed;
	$unsafe += $bad;
	$rounds++;
	note sprintf("$path: holder %s; node_b granted %.2f s after the worker was let go%s%s",
		$passed ? 'passed the guard' : 'refused at the guard',
		$granted - $t0,
		$committed ne '' ? sprintf(', holder committed %.2f s after', $committed - $t0) : '',
		$bad ? ': UNSAFE' : '');
	ok(!$bad, "$path: node_b was not granted the lock before the holder's commit");
	$other->query_safe(qq{SELECT zk_lock_release('$lock')});
	$holder->quit;
	$blocker->quit;
	return;
}

my $arm_close = sub { return gdb_break($_[0], 'close_session') };

# The worker's exit by SIGTERM.
for my $i (1 .. 3)
{
	round("SIGTERM $i", "sigterm-$i", $arm_close,
		sub {
			my ($gdb) = @_;
			kill 'TERM', $gdb->{pid};
			return gdb_wait_hit($gdb);
		});
}

# The worker's exit by FATAL in a client callback (as in 054): gdb raises it
# where the reply of another backend's create is handled.
{
	my $trigger = session($node_a, 'trigger');
	round('FATAL in a callback', 'fatal',
		sub { return gdb_break($_[0], 'create_done') },
		sub {
			my ($gdb) = @_;
			send_query($trigger, q{SELECT zk_lock_acquire('trigger', 30000)}, 'trigger_done');
			return 0 unless gdb_wait_hit($gdb);
			$gdb->{in} .= "break close_session\n"
			  . "call (void) ((char (*)(int, const char *)) errstart)(22, 0)\n"
			  . "call (void) ((int (*)(const char *, ...)) errmsg)(\"fault injected in a ZooKeeper client callback\")\n"
			  . "call ((void (*)(const char *, int, const char *)) errfinish)(\"057\", 1, \"create_done\")\n";
			return gdb_wait_hit($gdb, 30, 2);
		});
	wait_marker($trigger, 'trigger_done');
	$trigger->quit;
}

# A reload that changes the session's settings (request_close).
round('reload of zklock.session_timeout', 'reload-timeout', $arm_close,
	sub {
		change_setting('zklock.session_timeout', $session_timeout_ms + 1000);
		return gdb_wait_hit($_[0]);
	});
round('reload of zklock.hosts', 'reload-hosts', $arm_close,
	sub {
		change_setting('zklock.hosts', $proxied);
		return gdb_wait_hit($_[0]);
	});

# A backend's write-off (request_close too), as the guard does when it gets
# no reply in time: gdb calls bridge_write_off in an idle backend.
round('write-off', 'write-off', $arm_close,
	sub {
		my $pid = $observer->query_safe('SELECT pg_backend_pid() FROM zk_session()');
		my $out = '';
		IPC::Run::run([ 'gdb', '-p', $pid, '-batch', '-nx',
				'-ex', 'call (void) bridge_write_off(zk_shared->generation)' ],
			'<', \undef, '>', \$out, '2>&1');
		note $out;
		return gdb_wait_hit($_[0]);
	});
ok($node_a->log_contains('a backend got no reply in time and wrote it off'),
	'the worker closed the session written off');

is($unsafe, 0, "$rounds rounds, 0 unsafe");

$other->quit;
$observer->quit;
finish_checks($zk, [ $node_a, $node_b ]);
done_testing();
