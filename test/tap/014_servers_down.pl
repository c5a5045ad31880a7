
# Fault injection 5: every server of the ensemble goes down under a backend
# that has a session.  Acquiring fails with a class 08 error within
# zklock.connect_timeout: 08006 while the session may still be alive, 08001
# once it is lost and the session worker cannot open a new one.  When the
# servers come back, the same PostgreSQL session locks again, on the
# worker's new ZooKeeper session.
#
# A transaction that wrote under a lock cannot commit once the session is
# gone: a COMMIT made while the session may still live waits only for the
# rest of its timeout (and fails at once if it wakes only after the session
# worker gave the session up and began the next one), and one made after
# the session was given up fails at once with 40001.
#
# Runs alone: failures are bounded at the connect timeout plus 1.5 s, some
# at 1 s.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep time);

use ZklockTest;

my $session_timeout_ms = 4000;
my $connect_timeout_ms = 1500;
my $zk = start_zk(servers => 3);
my $node = zk_node('node_a', $zk,
	'zklock.session_timeout' => $session_timeout_ms,
	'zklock.connect_timeout' => $connect_timeout_ms);

my $s = session($node, 'client');
$s->query_safe('\set VERBOSITY verbose');
is($s->query_safe(q{SELECT zk_lock_acquire('down') AND zk_lock_release('down')}),
	't', 'locking works');
my $old_session = zk_session_field($s, 'session_id');
my $hosts = $zk->hosts;

# Two transactions that wrote under a lock, to commit after the fall.
$s->query_safe('CREATE TABLE work (x int)');
my @writers;
for my $i (1, 2)
{
	my $w = session($node, "writer$i");
	$w->query_safe('\set VERBOSITY verbose');
	$w->query_safe(qq{SELECT zk_lock_acquire('doomed$i')});
	$w->query_safe('BEGIN');
	$w->query_safe('INSERT INTO work VALUES (1)');
	push @writers, $w;
}

# The COMMIT $w ran failed because $lock was lost.
sub commit_failed_ok
{
	my ($w, $lock, $what) = @_;
	like($w->{stderr},
		qr/ERROR:  40001: zklock lock "$lock" was lost before the transaction committed/,
		"$what: the COMMIT fails with 40001");
	$w->{stderr} = '';
	return;
}

sub commit_fails_ok
{
	my ($w, $lock, $what) = @_;
	$w->query('COMMIT');
	commit_failed_ok($w, $lock, $what);
	return;
}

sub acquire_fails_ok
{
	my ($sqlstate, $message, $what) = @_;
	my $t0 = time;
	$s->query(q{SELECT zk_lock_acquire('down')});
	my $elapsed = elapsed_since($t0);
	like($s->{stderr}, qr/ERROR:  $sqlstate: \Q$message\E/, "$what: $sqlstate");
	cmp_ok($elapsed, '<', $connect_timeout_ms / 1000 + 1.5,
		sprintf("$what: within connect_timeout (%.2f s)", $elapsed));
	$s->{stderr} = '';
	return;
}

my $t_down = time;
$zk->stop;
# The client moves to the servers still up while the others stop: the
# session falls with the last one.
my $t_fall = time;
note sprintf('all servers stopped in %.2f s', $t_fall - $t_down);
acquire_fails_ok('08006', qq{lost connection to ZooKeeper at "$hosts"},
	'servers down, session maybe alive');
is(zk_session_field($s, 'state'), 'suspended', 'session suspended');

# The COMMIT waits for the session's verdict.  Stopped across it, its
# backend wakes only after the session worker gave the session up and began
# the next one: it must see its session gone, not wait on for the next one.
my $writer1_pid = $writers[0]->query_safe('SELECT pg_backend_pid()');
send_query($writers[0], 'COMMIT', 'commit1-done');
ok(wait_for_wait_event($node, 'writer1'), 'the COMMIT waits for the session');
kill 'STOP', $writer1_pid;
ok(defined wait_session_state($s, 'connecting', 30),
	'the session worker gave the session up while the COMMIT was stopped');
note sprintf('session given up %.2f s after the servers went down', elapsed_since($t_down));
kill 'CONT', $writer1_pid;
my $t_cont = time;
wait_marker($writers[0], 'commit1-done');
my $woke_in = elapsed_since($t_cont);
commit_failed_ok($writers[0], 'doomed1', 'COMMIT while the session may live');
cmp_ok($woke_in, '<', 1.0,
	sprintf('a COMMIT that wakes after its session was replaced fails at once (%.2f s)', $woke_in));
my $lost_after = elapsed_since($t_fall);
cmp_ok($lost_after, '<', $session_timeout_ms / 1000 + 1.5,
	sprintf('the COMMIT waited only for the rest of the session timeout (%.2f s after the last server stopped)',
		$lost_after));

# The session worker gave the session up once its timeout had passed, and
# opens a new one, which no server accepts yet.
acquire_fails_ok('08001', qq{could not connect to ZooKeeper at "$hosts"},
	'servers down, session lost');
is(zk_session_field($s, 'state'), 'connecting', 'the session worker is opening a new session meanwhile');
my $t_commit = time;
commit_fails_ok($writers[1], 'doomed2', 'COMMIT after the session was given up');
my $known_in = elapsed_since($t_commit);
cmp_ok($known_in, '<', 1.0,
	sprintf('a COMMIT whose loss is known fails at once (%.2f s)', $known_in));
is($writers[1]->query_safe('SELECT count(*) FROM work'), '0', 'neither write committed');
$_->quit for @writers;
is($s->query_safe('SELECT count(*) FROM zk_locks'), '0', 'nothing held');

my $t_up = time;
$zk->start;
note sprintf('servers back, serving after %.2f s', elapsed_since($t_up));
ok(defined wait_worker_session($node), 'the session worker gets its new session');
is($s->query_safe(q{SELECT zk_lock_acquire('down')}), 't',
	'the same PostgreSQL session locks again');
note sprintf('first lock %.2f s after the servers were started', elapsed_since($t_up));
my $new_session = zk_session_field($s, 'session_id');
isnt($new_session, $old_session, 'on a new ZooKeeper session');
my $log = slurp_file($node->logfile);
like($log,
	qr/LOG:  zklock: ZooKeeper session $old_session is lost: no ZooKeeper server was heard from for longer than its timeout/,
	'the server log says why the session was given up');
like($log,
	qr/LOG:  zklock: ZooKeeper session $new_session established with 127\.0\.0\.1:\d+ \(timeout \d+ ms\), replacing session $old_session/,
	'and which session the new one replaces');
is(scalar @{ queue_nodes($zk, 'down') }, 1, 'exactly one node for the lock');
$s->query_safe(q{SELECT zk_lock_release('down')});
$s->quit;

# The servers restored the old session from disk: it expires on its own.
finish_checks($zk, [$node], 2 * $session_timeout_ms / 1000 + 10);
done_testing();
