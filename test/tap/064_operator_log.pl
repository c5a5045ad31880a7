
# What an operator reads in the server log after normal events (issue 42,
# items 3, 7 and 16).  The session reaper, which ends the session a crashed
# server left, logged 'background worker "zklock session reaper" (PID ...)
# exited with exit code 1' at every start and crash restart; now it exits 0
# once (no line at LOG), and a crash restart's session worker does its work:
# after two kill -9 crashes in a row, the other node is granted the killed
# backend's lock at once both times, not after the session timeout.  The
# ZooKeeper client's own lines (ZOO_WARN "System error" after the postmaster
# was killed, ZOO_ERROR "errno=116(Stale file handle)" at an expiry) do not
# reach the log at the default zklock.log_level; zklock writes a line of its
# own for each of these events.  And item 7's figures: when the old session
# is closed on each path, against the log's redo, end-of-recovery checkpoint
# and "ready to accept connections", with some WAL to replay.
#
# Runs alone: grants are bounded at 6 s, crash recovery included.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use Time::Local qw(timegm);

use ZklockTest;

my $session_timeout_ms = 10000;
my $timeout_s = $session_timeout_ms / 1000;
my $zk = start_zk();
my $node_a = zk_node('node_a', $zk,
	'zklock.session_timeout' => $session_timeout_ms,
	'restart_after_crash' => 'on',
	'checkpoint_timeout' => '1h',
	'max_wal_size' => '4GB');
my $node_b = zk_node('node_b', $zk);
$node_a->safe_psql('postgres', 'CREATE TABLE filler (i int)');

my $reaper_exit = qr/background worker "zklock session reaper" \(PID \d+\) exited with exit code/;
my $client_lines = qr/ZOO_(?:ERROR|WARN|INFO|DEBUG)\@/;

ok(defined wait_worker_session($node_a), 'node_a\'s session worker is connected');
unlike(slurp_file($node_a->logfile), $reaper_exit,
	'start: the reaper ended without an "exited with exit code" line');

# The time of the first line after $offset of node_a's log matching $re, in
# seconds (log_line_prefix begins with %m), or undef.
sub log_time
{
	my ($log, $re) = @_;
	for my $line (split /\n/, $log)
	{
		next unless $line =~ $re;
		$line =~ /^(\d{4})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(\.\d+)/ or next;
		return timegm($6, $5, $4, $3, $2 - 1, $1) + $7;
	}
	return undef;
}

# A holder on node_a with some WAL written since the last checkpoint (for
# the redo to take a while), a waiter on node_b; $crash($holder_pid) takes
# node_a down and returns the time to count the grant from, $after (if any)
# runs once the waiter was granted.  Returns the seconds to the grant and
# node_a's log from before the crash.
sub crash_round
{
	my ($label, $crash, $after) = @_;
	my $holder = $node_a->background_psql('postgres', on_error_stop => 0);
	$holder->query_safe(q{SELECT zk_lock_acquire('crash')});
	my $holder_pid = $holder->query_safe('SELECT pg_backend_pid()');
	$node_a->safe_psql('postgres', 'INSERT INTO filler SELECT generate_series(1, 1500000)');
	my $waiter = $node_b->background_psql('postgres', timeout => 60);
	$waiter->query_safe(qq{SET application_name = 'waiter_$label'});
	$waiter->{stdin} .= "SELECT 'granted', zk_lock_acquire('crash');\n";
	$waiter->{run}->pump_nb;
	ok(wait_for_wait_event($node_b, "waiter_$label"), "$label: waiter queued behind the holder");

	my $offset = -s $node_a->logfile;
	my $t0 = $crash->($holder_pid);
	my $out = $waiter->query_until(qr/granted/, '');
	my $elapsed = elapsed_since($t0);
	like($out, qr/granted\|t/, "$label: the waiter got the lock");
	cmp_ok($elapsed, '<', $timeout_s * 0.6,
		sprintf('%s: granted %.2f s after the crash, before the session timeout of %d s',
			$label, $elapsed, $timeout_s));
	$waiter->query_safe(q{SELECT zk_lock_release('crash')});
	$waiter->quit;
	eval { $holder->quit };
	$after->() if $after;
	ok($node_a->poll_query_until('postgres', 'SELECT true'), "$label: node_a is back");
	ok(defined wait_worker_session($node_a), "$label: its session worker is connected");
	return ($elapsed, slurp_file($node_a->logfile, $offset));
}

# Whether process $pid is gone: none, or one that exited (a zombie).
sub gone
{
	my ($pid) = @_;
	return 1 unless kill 0, $pid;
	my $stat = eval { slurp_file("/proc/$pid/stat") } // '';
	return $stat =~ /\) [ZX] /;
}

# Item 7's figures: each event's time after the first, from the log.
sub note_figures
{
	my ($label, $elapsed, $log, $from) = @_;
	my $t0 = log_time($log, $from);
	my @events = (
		[ 'redo starts', qr/LOG:  redo starts at/ ],
		[ 'redo done', qr/LOG:  redo done at/ ],
		[ 'end-of-recovery checkpoint complete', qr/LOG:  checkpoint complete/ ],
		[ 'ready to accept connections', qr/LOG:  database system is ready to accept connections/ ],
		[ 'old session closed', qr/LOG:  zklock: closed ZooKeeper session/ ]);
	my @figures = map {
		my $t = log_time($log, $_->[1]);
		sprintf('%s %s', $_->[0], defined $t && defined $t0 ? sprintf('+%.2f s', $t - $t0) : 'not logged')
	} @events;
	note sprintf('%s: granted on node_b %.2f s after it; in node_a\'s log: %s',
		$label, $elapsed, join(', ', @figures));
	return;
}

for my $round (1, 2)
{
	my ($elapsed, $log) = crash_round("kill -9 of a backend, $round",
		sub { my $t0 = time; kill 'KILL', $_[0]; return $t0; });
	like($log, qr/LOG:  zklock: closed ZooKeeper session 0x[0-9a-f]+; the locks it held are free/,
		"kill -9 $round: the session the crash left was closed");
	unlike($log, $reaper_exit, "kill -9 $round: no \"exited with exit code\" line of the reaper");
	note_figures("kill -9 of a backend, $round", $elapsed, $log, qr/was terminated by signal 9/);
}

# Counted from the start, which returns once recovery is done.
my ($elapsed, $log) = crash_round('immediate shutdown and start', sub {
	$node_a->stop('immediate');
	my $t0 = time;
	$node_a->start;
	return $t0;
});
like($log, qr/LOG:  zklock: closed ZooKeeper session 0x[0-9a-f]+; the locks it held are free/,
	'immediate shutdown: the session it left was closed');
unlike($log, $reaper_exit, 'immediate shutdown: no "exited with exit code" line of the reaper');
note_figures('immediate shutdown, start at once', $elapsed, $log, qr/LOG:  starting PostgreSQL/);

# kill -9 of the postmaster: its session worker sees it gone and closes the
# session (the client said "System error (-1)" while it waited for the
# reply), and the next postmaster starts.
my @children;
($elapsed, $log) = crash_round('kill -9 of the postmaster', sub {
	my $pm = $node_a->{_pid};
	@children = ($pm, split /\n/, `pgrep -P $pm`);
	my $t0 = time;
	kill 'KILL', $pm;
	return $t0;
}, sub {
	my $pm = $children[0];
	my $t0 = time;
	while (time - $t0 < 30 && grep { !gone($_) } @children)
	{
		sleep_for(0.1);
	}
	# A dead postmaster that nobody reaped still answers kill 0, to the
	# next postmaster's checks of its lock files too.
	unlink $node_a->data_dir . '/postmaster.pid', $node_a->host . '/.s.PGSQL.' . $node_a->port . '.lock'
	  if gone($pm);
	$node_a->_update_pid(-1);
	$node_a->start;
});
like($log, qr/LOG:  zklock: the postmaster died; closing ZooKeeper session 0x[0-9a-f]+/,
	'kill -9 of the postmaster: zklock says that it closes the session');
unlike($log, $client_lines, 'kill -9 of the postmaster: no line of the ZooKeeper client in the log')
  or diag join "\n", grep { /$client_lines/ } split /\n/, $log;

# An expiry: the session worker stopped for longer than the session timeout.
my $node_c = zk_node('node_c', $zk, 'zklock.session_timeout' => 2000);
ok(defined wait_worker_session($node_c), 'node_c\'s session worker is connected');
my $old = $node_c->safe_psql('postgres', 'SELECT session_id FROM zk_session()');
my $offset = -s $node_c->logfile;
my $worker = worker_pid($node_c);
kill 'STOP', $worker;
sleep_for(5);
kill 'CONT', $worker;
my $t0 = time;
my $new = $old;
while (time - $t0 < 30 && $new eq $old)
{
	sleep_for(0.1);
	$new = $node_c->safe_psql('postgres', q{SELECT coalesce(session_id::text, '') FROM zk_session() WHERE state = 'connected'});
	$new = $old if $new eq '';
}
isnt($new, $old, 'node_c has a new session after the old one expired');
$log = slurp_file($node_c->logfile, $offset);
like($log, qr/LOG:  zklock: ZooKeeper session 0x[0-9a-f]+ is lost: /,
	'expiry: zklock says the session is lost');
unlike($log, $client_lines, 'expiry: no line of the ZooKeeper client in the log')
  or diag join "\n", grep { /$client_lines/ } split /\n/, $log;

unlike(slurp_file($node_a->logfile), $client_lines,
	'no line of the ZooKeeper client in node_a\'s log, from start to end');

finish_checks($zk, [ $node_a, $node_b, $node_c ]);
done_testing();
