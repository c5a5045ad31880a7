
# A session lost under a barrier (issue 49, item 3): the session worker
# restarted (SIGTERM) fails a member waiting in enter and a waiter at a
# gate as it fails a lock waiter (08006, the same DETAIL); a reload that
# changes the session's settings fails a member waiting in leave with the
# DETAIL that says so; a member inside learns at its next call that it is
# no longer one, once, and is forgotten.  The gate, nobody's, stays closed
# across sessions.  And an enter that times out as the last member comes
# returns true, its node gone (it was counted).

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

use ZklockTest;

my $zk = start_zk();
my $node = zk_node('node_a', $zk, 'zklock.session_timeout' => 4000);

sub member
{
	my ($name) = @_;
	my $s = session($node, $name);
	$s->{stdin} .= "\\set VERBOSITY verbose\n";
	return $s;
}

# A failed call's value (undef), its ERROR line and its DETAIL line.
sub failed
{
	my ($s, $tag) = @_;
	my ($value, $err) = call_result($s, $tag);
	my ($error) = $err =~ /(ERROR:.*)$/m;
	my ($detail) = $err =~ /(DETAIL:.*)$/m;
	return ($value, $error // '', $detail // '');
}

# 1. The worker restarted: a member waiting in enter, a waiter at a gate,
#    and a lock waiter for comparison.
my $enterer = member('enterer');
my $gate_waiter = member('gate_waiter');
my $holder = member('holder');
my $lock_waiter = member('lock_waiter');
$holder->query_safe(q{SELECT zk_lock_acquire('l'), zk_gate_close('g')});
send_call($enterer, 'enter', q{zk_barrier_enter('w', 2)});
send_call($gate_waiter, 'wait', q{zk_gate_wait('g')});
send_call($lock_waiter, 'lock', q{zk_lock_acquire('l')});
ok(wait_for_wait_event($node, $_), "$_ waits")
  for qw(enterer gate_waiter lock_waiter);
my $old = worker_pid($node);
kill 'TERM', $old;
my ($value, $enter_error, $enter_detail) = failed($enterer, 'enter');
is($value, undef, 'worker restarted: the enter fails');
like($enter_error, qr/^ERROR:  08006: ZooKeeper session was lost while at a zklock barrier or gate$/,
	'worker restarted: the enter fails with 08006');
($value, my $gate_error, my $gate_detail) = failed($gate_waiter, 'wait');
is($value, undef, 'worker restarted: the gate wait fails');
is($gate_error, $enter_error, 'worker restarted: the gate waiter gets the same error');
($value, my $lock_error, my $lock_detail) = failed($lock_waiter, 'lock');
is($value, undef, 'worker restarted: the lock waiter fails');
like($lock_error, qr/^ERROR:  08006: ZooKeeper session was lost while waiting for a lock$/,
	'worker restarted: the lock waiter fails with 08006');
is($enter_detail, $lock_detail, "worker restarted: the member's DETAIL is the lock waiter's");
is($gate_detail, $lock_detail, "worker restarted: so is the gate waiter's");
ok(defined wait_worker_session($node), 'a new session');
is($node->safe_psql('postgres', q{SELECT count(*) FROM zk_barrier_members('w')}), '0',
	'the member node went with the old session');
is($node->safe_psql('postgres', q{SELECT closed FROM zk_gates('g')}), 't',
	'the gate, nobody\'s, is still closed');
$holder->quit;
$holder = member('holder');
is($holder->query_safe(q{SELECT zk_gate_open('g')}), 't', 'and opens');

# 2. A reload that changes the session: a member waiting in leave fails,
#    naming the settings; the member inside learns it at its next call.
send_call($enterer, 'enter', q{zk_barrier_enter('r', 2)});
send_call($gate_waiter, 'enter', q{zk_barrier_enter('r', 2)});
is(call_result($_, 'enter'), 't', 'reload: two members entered') for $enterer, $gate_waiter;
send_call($enterer, 'leave', q{zk_barrier_leave('r')});
ok(wait_for_wait_event($node, 'enterer'), 'reload: one waits in leave');
ok(reconfigure($node, 'zklock.session_timeout' => 5000), 'reload: a new session');
($value, my $leave_error, my $leave_detail) = failed($enterer, 'leave');
is($value, undef, 'reload: the leave fails');
like($leave_error, qr/^ERROR:  08006: ZooKeeper session was lost while at a zklock barrier or gate$/,
	'reload: 08006');
like($leave_detail, qr/closed the session because zklock.hosts, zklock.session_timeout or zklock.auth changed at a reload/,
	'reload: the DETAIL says why');
send_call($gate_waiter, 'leave', q{zk_barrier_leave('r')});
($value, my $inside_error) = failed($gate_waiter, 'leave');
is($value, undef, 'reload: the member inside: its leave fails');
like($inside_error, qr/^ERROR:  08006: this session is no longer a member of zklock barrier "r"$/,
	'reload: 08006, no longer a member');
send_call($gate_waiter, 'leave', q{zk_barrier_leave('r')});
($value, $inside_error) = failed($gate_waiter, 'leave');
is($value, undef, 'reload: asked again');
like($inside_error, qr/^ERROR:  55000: this session is not a member of zklock barrier "r"$/,
	'reload: forgotten: 55000, not a member');
send_call($gate_waiter, 'enter', q{zk_barrier_enter('r', 1)});
is(call_result($gate_waiter, 'enter'), 't', 'reload: it may enter again');
send_call($gate_waiter, 'leave', q{zk_barrier_leave('r')});
is(call_result($gate_waiter, 'leave'), 't', 'reload: and leave');

# 3. An enter that runs out of time as the last member comes: its node is
#    deleted, but ready came first (it was counted): true, a member whose
#    node is gone, whose leave waits for the others.  gdb holds the timed-out
#    member just before it deletes its node (bridge_release_held) while the
#    other enters.
my $pid = $enterer->query_safe('SELECT pg_backend_pid()');
my $gdb = gdb_break($pid, 'bridge_release_held');
send_call($enterer, 'enter', q{zk_barrier_enter('counted', 2, 500)});
ok(gdb_wait_hit($gdb, 30), 'counted: the member ran out of time, and stops before deleting its node');
is($holder->query_safe(q{SELECT zk_barrier_enter('counted', 2, 5000)}), 't',
	'counted: the second member enters, counting the first');
gdb_let_go($gdb);
is(call_result($enterer, 'enter'), 't', 'counted: the first member\'s enter is true all the same');
is($holder->query_safe(q{SELECT count(*) FROM zk_barrier_members('counted')}), '1',
	'counted: its node is gone');
send_call($enterer, 'leave', q{zk_barrier_leave('counted', 10000)});
ok(wait_for_wait_event($node, 'enterer'), 'counted: its leave waits for the other member');
is($holder->query_safe(q{SELECT zk_barrier_leave('counted')}), 't', 'counted: the other leaves');
is(call_result($enterer, 'leave'), 't', 'counted: and so does the first');

$_->quit for $enterer, $gate_waiter, $holder, $lock_waiter;
finish_checks($zk, [$node]);
done_testing();
