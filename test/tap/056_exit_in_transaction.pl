
# A backend that exits with an open transaction holding a zklock lock
# (issue 41, item 2).  Its exit callback (bridge_detach) runs before
# PostgreSQL's own (ShutdownPostgres), which aborts the transaction: the
# worker had freed the lock's shared record by then, and the abort wrote into
# it (released, refs, release_verdict) and dropped a reference to it again.
# Reused by another backend's lock meanwhile, that backend's release was
# judged unproven ("may have been lost before it was released") and its
# writing COMMIT failed with 40001.  Now the backend lets go of every shared
# record at detach and zklock does nothing in it after that; a record used
# after it was freed fails loudly (PANIC), which the checks below would see.
#
# 1. The order forced with gdb: X (a transaction lock held, idle in its
#    transaction) is terminated and held where ShutdownPostgres begins the
#    abort, after bridge_detach; V takes a lock then (its record takes the
#    freed chunk), X is let go, then V writes, releases and commits.
# 2. The load: clients that connect, take a transaction lock and disconnect
#    mid-transaction, beside clients that cycle acquire/release on their own
#    locks: no release judged unproven, no node and no shared record left.
# 3. A backend that made a temporary table before its first zklock call:
#    the exit callback that drops the table (registered earlier, so it runs
#    after bridge_detach) aborts the open transaction and commits one of its
#    own.  That commit passed the commit guard of a detached backend, whose
#    mark (committing) nobody cleared: the next close of the session waited
#    for it, then dropped the connection and left every lock of the server
#    to the session timeout.
#
# Runs alone: 1,000 connections and four busy loops in 25 s phases.

use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

use ZklockTest;

my $zk = start_zk();
my $node = zk_node('node_a', $zk, max_connections => 60);
$node->safe_psql('postgres', q{
CREATE TABLE written (who text, at timestamptz DEFAULT clock_timestamp());
CREATE TABLE cycled (client text, releases int, unproven int);
CREATE PROCEDURE cycle(client text, seconds float8)
LANGUAGE plpgsql AS $$
DECLARE
  stop timestamptz := clock_timestamp() + seconds * interval '1 second';
  n int := 0;
  bad int := 0;
BEGIN
  WHILE clock_timestamp() < stop LOOP
    PERFORM zk_lock_acquire('cycle-' || client);
    IF NOT zk_lock_release('cycle-' || client) THEN
      bad := bad + 1;
    END IF;
    n := n + 1;
    COMMIT;
  END LOOP;
  INSERT INTO cycled VALUES (client, n, bad);
END $$;
});

# Padding that puts both backends' records in the same size class.
my $pad = 'p' x 40;

sub backend_gone
{
	my ($pid) = @_;
	return $node->poll_query_until('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE pid = $pid", '0');
}

# 1. Four rounds of the forced order.
my $rounds = 4;
my ($release_true, $commit_ok) = (0, 0);
for my $round (1 .. $rounds)
{
	my $x = session($node, "x_$round$pad");
	my $v = session($node, "v_$round$pad");
	# V has used zklock before: its attach allocates nothing later.
	$v->query_safe(q{SELECT zk_lock_acquire('warm') AND zk_lock_release('warm')});
	is($x->query_safe(qq{BEGIN; SELECT zk_lock_xact_acquire('xlock$round')}), 't',
		"round $round: X holds a transaction lock, its transaction open");
	my $xpid = $x->query_safe('SELECT pg_backend_pid()');

	my $gdb_in = '';
	my $gdb_out = '';
	my $gdb = IPC::Run::start([ 'gdb', '-q', '-nx', '-p', $xpid ],
		'<', \$gdb_in, '>', \$gdb_out, '2>&1');
	$gdb_in .= "set pagination off\n"
	  . "handle SIGTERM SIGINT SIGUSR1 SIGUSR2 SIGURG SIGALRM nostop noprint pass\n"
	  . "break AbortOutOfAnyTransaction\ncontinue\n";
	my $t0 = time;
	my $armed = 0;
	while (time - $t0 < 60)
	{
		$gdb->pump_nb;
		my ($traced, $stopped) = traced_state($xpid);
		$armed = 1, last if $traced && !$stopped && $gdb_out =~ /Continuing/;
		sleep_for(0.05);
	}
	ok($armed, "round $round: gdb waits for X's abort") or diag $gdb_out;

	$node->safe_psql('postgres', "SELECT pg_terminate_backend($xpid)");
	$t0 = time;
	my $held = 0;
	while (time - $t0 < 60)
	{
		$gdb->pump_nb;
		my ($traced, $stopped) = traced_state($xpid);
		$held = 1, last if $traced && $stopped && $gdb_out =~ /Breakpoint 1, /;
		sleep_for(0.05);
	}
	ok($held, "round $round: X exits, held where its transaction is aborted")
	  or diag $gdb_out;
	is($node->safe_psql('postgres',
			"SELECT count(*) FROM zk_cluster_locks WHERE lock_name = 'xlock$round'"),
		'0', "round $round: X's node is deleted before the abort");

	# V's lock record is allocated while X is held.
	is($v->query_safe(qq{BEGIN; SELECT zk_lock_acquire('vlock$round')}), 't',
		"round $round: V takes a lock");
	$gdb_in .= "delete\ndetach\nquit\n";
	$gdb->finish;
	ok(backend_gone($xpid), "round $round: X is gone");

	$v->query_safe(q{INSERT INTO written (who) VALUES ('v')});
	my $released = $v->query(qq{SELECT zk_lock_release('vlock$round')});
	$release_true++ if $released eq 't';
	is($released, 't', "round $round: V's release is proven");
	is($v->{stderr}, '', "round $round: no WARNING") or diag $v->{stderr};
	$v->{stderr} = '';
	$v->query('COMMIT');
	$commit_ok++ if $v->{stderr} eq '';
	is($v->{stderr}, '', "round $round: V's writing COMMIT succeeds")
	  or diag $v->{stderr};
	$v->quit;
	eval { $x->quit };
}
note "forced order: V's release proven in $release_true of $rounds rounds, "
  . "its COMMIT passed in $commit_ok of $rounds";
is($node->safe_psql('postgres', q{SELECT count(*) FROM written WHERE who = 'v'}),
	$rounds, "every round's row is committed");
ok($node->poll_query_until('postgres', 'SELECT count(*) FROM zk_cluster_locks', '0'),
	'no lock is held after the rounds');

# 2. The load.
my $seconds = 25;
my $clients = 4;
my $records0 = $node->safe_psql('postgres', 'SELECT shared_records FROM zk_session_stats');
my @conn = ('-h', $node->host, '-p', $node->port, '-d', 'postgres');
my $script = "$PostgreSQL::Test::Utils::tmp_check/056_disconnect.sql";
open my $fh, '>', $script or die "$script: $!";
print $fh "\\connect\nBEGIN;\nSELECT zk_lock_xact_acquire('gone-' || :'client');\n" for 1 .. 50;
close $fh;
# The load runs in phases of $seconds until it has made at least 1,000
# such exits (at most 6 phases): how many a phase makes depends on how the
# machine shares its cores between the two kinds of clients.
my ($disconnects, $warnings, $phases) = (0, 0, 0);
while ($disconnects < 1000 && $phases < 6)
{
	$phases++;
	my $stop_at = time + $seconds;
	my @leaving;
	for my $k (1 .. $clients)
	{
		my $out = '';
		my $loop = qq{n=0; while [ \$(date +%s) -lt } . int($stop_at) . qq{ ]; do }
		  . qq{psql -X -q -v client=$k @conn -f '$script' >/dev/null || exit 1; n=\$((n+50)); done; echo \$n};
		push @leaving, [ IPC::Run::start([ 'bash', '-c', $loop ], '>', \$out, '2>&1'), \$out ];
	}
	my @cycling;
	for my $k (1 .. $clients)
	{
		my $err = '';
		push @cycling, [
			IPC::Run::start(
				[ 'psql', '-X', '-q', @conn, '-c', "CALL cycle('$k', $seconds)" ],
				'>', \my $out, '2>', \$err),
			\$err ];
	}
	for my $c (@leaving)
	{
		$c->[0]->finish;
		my ($n) = ${ $c->[1] } =~ /\A(\d+)\s*\z/;
		diag ${ $c->[1] } unless defined $n;
		$disconnects += $n // 0;
	}
	for my $c (@cycling)
	{
		$c->[0]->finish;
		my $err = ${ $c->[1] };
		$warnings += () = $err =~ /WARNING:/g;
		diag join "\n", (split /\n/, $err)[ 0 .. 2 ] if $err ne '';
	}
}
my ($releases, $unproven) = split /\|/,
  $node->safe_psql('postgres', 'SELECT sum(releases), sum(unproven) FROM cycled');
note "load: $disconnects disconnects in a transaction, $releases releases, "
  . "$unproven unproven, $warnings warnings in $phases phases of $seconds s";
cmp_ok($disconnects, '>=', 1000, "$disconnects backends exited in a transaction holding a lock");
cmp_ok($releases, '>=', 5000, "$releases releases");
is($unproven, 0, 'no release judged unproven');
is($warnings, 0, 'no WARNING');
ok($node->poll_query_until('postgres', 'SELECT count(*) FROM zk_cluster_locks', '0'),
	'no lock is held after the load');
is_deeply($zk->wait_no_ephemerals(ZK_ROOT, 20), [], 'no node is left while the server runs');
ok($node->poll_query_until('postgres', 'SELECT shared_records FROM zk_session_stats', $records0),
	"the shared area's live records are back at $records0")
  or diag $node->safe_psql('postgres', 'SELECT shared_records FROM zk_session_stats');

# 3. Temporary tables first.
{
	my $t = session($node, 'temp_first');
	$t->query_safe(q{CREATE TEMP TABLE scratch (i int)});
	$t->query_safe(q{SELECT zk_lock_acquire('temp-s')});
	$t->query_safe(q{BEGIN; SELECT zk_lock_xact_acquire('temp-x')});
	my $pid = $t->query_safe('SELECT pg_backend_pid()');
	$t->quit;
	ok(backend_gone($pid), 'a backend with a temporary table exits in its transaction');
	# The next backend takes its PGPROC (a free list, last in first out)
	# and with it its zklock slot, which a backend clears only when it
	# uses zklock: this one does not.
	my $next = $node->background_psql('postgres');
	my $offset = -s $node->logfile;
	my $t0 = time;
	ok(reconfigure($node, 'zklock.session_timeout' => 9000), 'a reload replaces the session');
	note sprintf('the session was replaced %.2f s after the reload', elapsed_since($t0));
	ok(!$node->log_contains('has not finished committing', $offset),
		'ended at once: no backend is taken for committing');
	ok($node->poll_query_until('postgres', 'SELECT count(*) FROM zk_cluster_locks', '0'),
		'its locks are free');
	$next->quit;
}
ok(!$node->log_contains('PANIC'), 'no PANIC in the log');

finish_checks($zk, [$node]);
done_testing();
