
# Gates and double barriers across two PostgreSQL servers (issue 49, items
# 1 to 3): members on both servers, none of them through enter before the
# last one has entered nor through leave before the last one has left, two
# rounds on one name; the views from either server; waits shown in
# pg_stat_activity and counted; a gate closed on one server and opened on
# the other; and how a membership ends: pg_cancel_backend,
# pg_terminate_backend, kill -9 of a member inside (its node goes through
# the crash restart's reaper), a whole server gone (its members go within
# the session timeout).
#
# Runs alone: grants are bounded at 3 s after kill -9.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

use ZklockTest;

my $session_timeout_ms = 4000;
my $timeout_s = $session_timeout_ms / 1000;
my $zk = start_zk();
my ($node_a, $node_b) = map {
	zk_node($_, $zk,
		'zklock.session_timeout' => $session_timeout_ms,
		'restart_after_crash' => 'on')
} qw(node_a node_b);
my %node = (a => $node_a, b => $node_b);
my $barriers = ZK_ROOT . '/%barriers';

# A member session on node $n ('a' or 'b'), errors with their SQLSTATE.
sub member
{
	my ($n, $name) = @_;
	my $s = session($node{$n}, $name);
	$s->{stdin} .= "\\set VERBOSITY verbose\n";
	$s->{node} = $n;
	$s->{name} = $name;
	return $s;
}

# The member nodes of barrier $name now, as ZooKeeper has them.
sub member_nodes
{
	my ($name) = @_;
	return [ grep { !m{/ready$} }
		  map { $_->[0] } @{ $zk->tree("$barriers/$name") } ];
}

sub wait_members
{
	my ($name, $n, $secs) = @_;
	my $t0 = time;
	while (time - $t0 < ($secs // 20))
	{
		return 1 if @{ member_nodes($name) } == $n;
		sleep_for(0.05);
	}
	return 0;
}

sub waiting
{
	my ($n, $kind) = @_;
	return $node{$n}->safe_psql('postgres',
		"SELECT waiting FROM zk_barrier_stats WHERE kind = '$kind'");
}

# ---------------------------------------------------------------------------
# 1. Four members, two on each server, two rounds on one name.
my @members = (
	member('a', 'm_a1'), member('a', 'm_a2'),
	member('b', 'm_b1'), member('b', 'm_b2'));
for my $round (1 .. 2)
{
	my $label = "round $round";
	send_call($_, 'enter', q{zk_barrier_enter('job', 4, 60000)}) for @members[ 0 .. 2 ];
	ok(wait_for_wait_event($node{ $_->{node} }, $_->{name}),
		"$label: $_->{name} waits in enter, shown in pg_stat_activity") for @members[ 0 .. 2 ];
	ok(wait_members('job', 3), "$label: three member nodes");
	sleep_for(1);
	ok(!call_returned($_, 'enter'), "$label: $_->{name} is not through enter before the fourth (1 s)")
	  for @members[ 0 .. 2 ];

	# The views, from either server: the others' members without a state.
	is( $node_b->safe_psql('postgres', q{
SELECT string_agg(coalesce(state, '-') || ':' || coalesce(cluster_name, '?') || ':' || parties, ',' ORDER BY cluster_name, state)
  FROM zk_barrier_members('job')}),
		'-:node_a:4,-:node_a:4,entering:node_b:4',
		"$label: node_b sees node_a's members (no state) and its own (entering)");
	is($node_a->safe_psql('postgres', q{SELECT members, parties, ready FROM zk_barriers('job')}),
		'3|4|f', "$label: zk_barriers: 3 members of 4, no ready");
	is(waiting('a', 'enter') . waiting('b', 'enter'), '21',
		"$label: zk_barrier_stats counts the waits, per server");

	my $t_last = time;
	send_call($members[3], 'enter', q{zk_barrier_enter('job', 4, 60000)});
	is(call_result($_, 'enter'), 't', "$label: $_->{name} is through enter") for @members;
	my $took = time - $t_last;
	cmp_ok($took, '<', 5, sprintf("$label: all through %.3f s after the fourth entered", $took));
	is($node_a->safe_psql('postgres', q{
SELECT string_agg(coalesce(state, '-') || ':' || before_ready, ',' ORDER BY state)
  FROM zk_barrier_members('job')}),
		'inside:true,inside:true,-:true,-:true', "$label: node_a sees all four inside, before ready");

	# Leaving: three leave, none through before the fourth has left.
	send_call($_, 'leave', q{zk_barrier_leave('job', 60000)}) for @members[ 0 .. 2 ];
	ok(wait_for_wait_event($node{ $_->{node} }, $_->{name}),
		"$label: $_->{name} waits in leave") for @members[ 0 .. 2 ];
	is($node_b->safe_psql('postgres', q{SELECT ready FROM zk_barriers('job')}),
		'f', "$label: ready is gone with the first leave");
	sleep_for(1);
	ok(!call_returned($_, 'leave'), "$label: $_->{name} is not through leave before the fourth (1 s)")
	  for @members[ 0 .. 2 ];
	$t_last = time;
	send_call($members[3], 'leave', q{zk_barrier_leave('job', 60000)});
	is(call_result($_, 'leave'), 't', "$label: $_->{name} is through leave") for @members;
	$took = time - $t_last;
	cmp_ok($took, '<', 5, sprintf("$label: all through %.3f s after the fourth left", $took));
	ok(wait_members('job', 0), "$label: no member node left");
	is($node_a->safe_psql('postgres', q{SELECT count(*) FROM zk_barriers('job') WHERE ready}),
		'0', "$label: no ready left");
}
is($node_a->safe_psql('postgres', q{SELECT passed FROM zk_barrier_stats WHERE kind = 'enter'}),
	'4', 'node_a counted its four enters');

# ---------------------------------------------------------------------------
# 2. A gate closed on node_a, waiters on both servers, opened on node_b.
{
	is($node_a->safe_psql('postgres', q{SELECT zk_gate_close('nightly')}), 't', 'gate: closed on node_a');
	is($node_b->safe_psql('postgres', q{SELECT closed, cluster_name FROM zk_gates('nightly')}),
		't|node_a', 'gate: node_b sees it closed by node_a');
	send_call($members[0], 'gate', q{zk_gate_wait('nightly')});
	send_call($members[2], 'gate', q{zk_gate_wait('nightly', 60000)});
	ok(wait_for_wait_event($node_a, 'm_a1'), 'gate: a waiter on node_a');
	ok(wait_for_wait_event($node_b, 'm_b1'), 'gate: a waiter on node_b');
	sleep_for(0.5);
	ok(!call_returned($_, 'gate'), "gate: $_->{name} waits while it is closed") for @members[ 0, 2 ];
	my $t0 = time;
	is($node_b->safe_psql('postgres', q{SELECT zk_gate_open('nightly')}), 't', 'gate: opened on node_b');
	is(call_result($_, 'gate'), 't', "gate: $_->{name} passes") for @members[ 0, 2 ];
	cmp_ok(time - $t0, '<', 5, 'gate: both within 5 s of the opening');
	is($node_a->safe_psql('postgres', q{SELECT count(*) FROM zk_cluster_gates}), '0',
		'gate: no gate left');
}

# ---------------------------------------------------------------------------
# 3. A waiting member cancelled, another terminated: their nodes go, the
#    others wait on.
{
	send_call($members[0], 'enter', q{zk_barrier_enter('ends', 4, 60000)});
	send_call($members[2], 'enter', q{zk_barrier_enter('ends', 4, 60000)});
	send_call($members[3], 'enter', q{zk_barrier_enter('ends', 4, 60000)});
	ok(wait_members('ends', 3), 'ends: three members wait');
	ok(wait_for_wait_event($node_b, 'm_b2'), 'ends: m_b2 waits');
	my $pid = $node_b->safe_psql('postgres',
		q{SELECT pid FROM pg_stat_activity WHERE application_name = 'm_b2'});
	is($node_b->safe_psql('postgres', "SELECT pg_cancel_backend($pid)"), 't', 'ends: m_b2 cancelled');
	my ($value, $err) = call_result($members[3], 'enter');
	is($value, undef, 'ends: its enter fails');
	like($err, qr/ERROR:  57014: canceling statement due to user request/, 'ends: 57014');
	ok(wait_members('ends', 2), 'ends: its node is gone');
	is($node_b->safe_psql('postgres', q{SELECT cancels FROM zk_barrier_stats WHERE kind = 'enter'}),
		'1', 'ends: counted as cancelled');

	$pid = $node_a->safe_psql('postgres',
		q{SELECT pid FROM pg_stat_activity WHERE application_name = 'm_a1'});
	is($node_a->safe_psql('postgres', "SELECT pg_terminate_backend($pid)"), 't', 'ends: m_a1 terminated');
	ok(wait_members('ends', 1), 'ends: its node is gone');
	is(waiting('a', 'enter'), '0', 'ends: node_a counts no wait any more');
	ok(!call_returned($members[2], 'enter'), 'ends: m_b1 waits on');
	eval { $members[0]->quit };
	$members[0] = member('a', 'm_a1');
	send_call($members[0], 'enter', q{zk_barrier_enter('ends', 3, 60000)});
	($value, $err) = call_result($members[0], 'enter');
	is($value, undef, 'ends: other parties than a member inside: refused');
	like($err, qr/ERROR:  22023: zklock barrier "ends" is in use with 4 parties, not 3/,
		'ends: 22023');
	ok(wait_members('ends', 1), 'ends: and leaves no node');
	$pid = $node_b->safe_psql('postgres',
		q{SELECT pid FROM pg_stat_activity WHERE application_name = 'm_b1'});
	$node_b->safe_psql('postgres', "SELECT pg_cancel_backend($pid)");
	is(call_result($members[2], 'enter'), undef, 'ends: m_b1 cancelled too');
	ok(wait_members('ends', 0), 'ends: no node left');
}

# ---------------------------------------------------------------------------
# 4. kill -9 of a member inside the barrier: node_a's crash restart ends its
#    session at once (the reaper or the next worker), so the other members'
#    leave goes through well before the session timeout.
{
	send_call($_, 'enter', q{zk_barrier_enter('crash', 4, 60000)}) for @members;
	is(call_result($_, 'enter'), 't', "crash: $_->{name} entered") for @members;
	my $pid = $node_a->safe_psql('postgres',
		q{SELECT pid FROM pg_stat_activity WHERE application_name = 'm_a1'});
	send_call($_, 'leave', q{zk_barrier_leave('crash', 60000)}) for @members[ 2, 3 ];
	ok(wait_for_wait_event($node_b, 'm_b2'), 'crash: node_b\'s members wait in leave');
	my $t0 = time;
	kill 'KILL', $pid;
	is(call_result($_, 'leave'), 't', "crash: $_->{name} is through leave") for @members[ 2, 3 ];
	my $took = time - $t0;
	cmp_ok($took, '<', $timeout_s / 2 + 1,
		sprintf('crash: %.2f s after the kill, before the session timeout', $took));
	note sprintf('kill -9 of a member inside to the others through leave: %.2f s', $took);
	eval { $_->quit } for @members[ 0, 1 ];
	ok($node_a->poll_query_until('postgres', 'SELECT true'), 'crash: node_a is back');
	ok(wait_members('crash', 0), 'crash: no member node left');
	@members[ 0, 1 ] = (member('a', 'm_a1'), member('a', 'm_a2'));
}

# ---------------------------------------------------------------------------
# 5. A whole server gone silent (every process stopped, as a stalled VM):
#    its members go once its session expires, within the session timeout;
#    resumed, its member learns at its next call that it is no longer one.
{
	ok(defined wait_worker_session($node_a), 'stalled: node_a has its session again');
	send_call($_, 'enter', q{zk_barrier_enter('stalled', 4, 60000)}) for @members;
	is(call_result($_, 'enter'), 't', "stalled: $_->{name} entered") for @members;
	send_call($_, 'leave', q{zk_barrier_leave('stalled', 60000)}) for @members[ 0, 1 ];
	ok(wait_for_wait_event($node_a, 'm_a2'), 'stalled: node_a\'s members wait in leave');
	my @pids = ($node_b->{_pid},
		map { (split ' ')[0] } split /\n/, `ps -o pid= --ppid $node_b->{_pid}`);
	my $t0 = time;
	kill 'STOP', @pids;
	is(call_result($_, 'leave'), 't', "stalled: $_->{name} is through leave") for @members[ 0, 1 ];
	my $took = time - $t0;
	cmp_ok($took, '<', $timeout_s + 2,
		sprintf('stalled: %.2f s after the stop, within the session timeout (and a tick)', $took));
	note sprintf('node_b stopped to node_a\'s members through leave: %.2f s', $took);
	kill 'CONT', @pids;
	ok(defined wait_worker_session($node_b, 60), 'stalled: node_b has a new session');
	send_call($members[2], 'leave', q{zk_barrier_leave('stalled')});
	my ($value, $err) = call_result($members[2], 'leave');
	is($value, undef, 'stalled: node_b\'s member: leave fails');
	like($err, qr/ERROR:  08006: this session is no longer a member of zklock barrier "stalled"/,
		'stalled: 08006, no longer a member');
	send_call($members[2], 'leave', q{zk_barrier_leave('stalled')});
	($value, $err) = call_result($members[2], 'leave');
	is($value, undef, 'stalled: asked again');
	like($err, qr/ERROR:  55000: this session is not a member of zklock barrier "stalled"/,
		'stalled: 55000, not a member (forgotten)');
	ok(wait_members('stalled', 0), 'stalled: no member node left');
}

$_->quit for @members;
finish_checks($zk, [ $node_a, $node_b ]);
done_testing();
