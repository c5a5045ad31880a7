
# Barriers beside Curator (Java) and Kazoo (Python) on one absolute path
# (issue 49, item 4): zklock members on two PostgreSQL servers, a Curator
# DistributedDoubleBarrier member and a Kazoo DoubleBarrier member.  Two
# rounds, the last member a different client each time; a ready left
# behind, then a mixed round; a Kazoo member killed inside; a gate closed
# and opened by each client in turn.  The other side is
# test/interop/CuratorBarrier.java and test/interop/kazoo_barrier.py, each
# bounded by a lifetime of its own and by every wait here.
#
# Facts checked on the way (Curator 5.4.0 as Debian ships it, Kazoo 2.8):
# both clients count every child of the path as a member when they enter,
# ready included; Curator passes at once when ready exists, Kazoo counts it.

use strict;
use warnings;

use FindBin;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep time);

use ForeignProgram;
use ZklockTest;

my $interop = "$FindBin::Bin/../interop";
my $curator_cp = $ForeignProgram::curator_cp;
clients_installed_ok();

my $zk = start_zk();
my ($node_a, $node_b) = map {
	zk_node($_, $zk, 'zklock.session_timeout' => 4000)
} qw(node_a node_b);
my $path = '/interop_barrier/job';
my $gate = '/interop_barrier/gate';

# ---------------------------------------------------------------------------
# The other side (test/perl/ForeignProgram.pm), connected to $at.
sub program_start
{
	my ($lib, $at) = @_;
	my @cmd = $lib eq 'curator'
	  ? ('java', '-Xmx128m', '-XX:+UseSerialGC', '-cp', $curator_cp,
		"$interop/CuratorBarrier.java")
	  : ('/usr/bin/python3', "$interop/kazoo_barrier.py");
	my $p = program_run([ @cmd, $zk->hosts, $at, 240 ], $lib);
	$p->{lib} = $lib;
	ok(program_take($p, qr/^ready$/m, 60), "$lib is connected")
	  or program_diag($p);
	return $p;
}

sub program_quit
{
	my ($p) = @_;
	program_send($p, 'quit');
	return program_end($p);
}

# ---------------------------------------------------------------------------
# zklock members: a session on each server.

# The children of $at, as ZooKeeper has them.
sub children_of
{
	my ($at) = @_;
	return [ map { $_->[0] =~ m{^\Q$at\E/([^/]+)$} ? ($1) : () } @{ $zk->tree($at) } ];
}

sub wait_children
{
	my ($at, $n, $secs) = @_;
	my $deadline = time + ($secs // 20);
	while (time < $deadline)
	{
		return 1 if @{ children_of($at) } == $n;
		sleep 0.05;
	}
	diag explain children_of($at);
	return 0;
}

my $za = session($node_a, 'zk_a');
my $zb = session($node_b, 'zk_b');
$_->{stdin} .= "\\set VERBOSITY verbose\n" for $za, $zb;
my $curator = program_start('curator', $path);
my $kazoo = program_start('kazoo', $path);

# One round: the members enter in @order, the last one last; none is
# through enter before the last has entered (1 s), all are after; then
# they leave in the same order, none through before the last has left.
sub round
{
	my ($label, @order) = @_;
	my %member = (zk_a => $za, zk_b => $zb, curator => $curator, kazoo => $kazoo);
	my $last = $order[-1];
	for my $m (@order[ 0 .. $#order - 1 ])
	{
		if ($m =~ /^zk_/)
		{
			send_call($member{$m}, 'enter', qq{zk_barrier_enter('$path', 4, 60000)});
			ok(wait_for_wait_event($m eq 'zk_a' ? $node_a : $node_b, $m),
				"$label: zklock $m waits in enter");
		}
		else
		{
			program_send($member{$m}, 'enter 4');
		}
	}
	ok(wait_children($path, 3), "$label: three members before the last");
	sleep_for(1);
	for my $m (@order[ 0 .. $#order - 1 ])
	{
		ok($m =~ /^zk_/ ? !call_returned($member{$m}, 'enter')
			: !program_said($member{$m}, qr/^entered/m),
			"$label: $m is not through enter before $last (1 s)");
	}
	my $t0 = time;
	if ($last =~ /^zk_/)
	{
		send_call($member{$last}, 'enter', qq{zk_barrier_enter('$path', 4, 60000)});
	}
	else
	{
		program_send($member{$last}, 'enter 4');
	}
	for my $m (@order)
	{
		if ($m =~ /^zk_/)
		{
			is(call_result($member{$m}, 'enter'), 't', "$label: zklock $m is through enter");
		}
		else
		{
			my $ms = program_take($member{$m}, qr/^entered true (\d+)$/m, 30);
			ok(defined $ms, "$label: $m is through enter") or program_diag($member{$m});
			cmp_ok(($ms // 0) / 1000, '>=', $t0 - 0.01, "$label: $m through after $last entered, not before");
		}
	}
	note sprintf("$label: all through enter %.3f s after the last entered", time - $t0);
	# zklock's view of the round: four members, all before ready.
	is($node_a->safe_psql('postgres', qq{
SELECT count(*), count(*) FILTER (WHERE before_ready), count(parties),
       count(*) FILTER (WHERE data ~ '-[0-9]+\$')
  FROM zk_barrier_members('$path')}),
		'4|4|2|1', "$label: four members before ready: two zklock's (parties), Kazoo's (fqdn-pid)");

	for my $m (@order[ 0 .. $#order - 1 ])
	{
		if ($m =~ /^zk_/)
		{
			send_call($member{$m}, 'leave', qq{zk_barrier_leave('$path', 60000)});
		}
		else
		{
			program_send($member{$m}, 'leave');
		}
	}
	sleep_for(1.5);
	for my $m (@order[ 0 .. $#order - 1 ])
	{
		ok($m =~ /^zk_/ ? !call_returned($member{$m}, 'leave')
			: !program_said($member{$m}, qr/^left/m),
			"$label: $m is not through leave before $last (1.5 s)");
	}
	$t0 = time;
	if ($last =~ /^zk_/)
	{
		send_call($member{$last}, 'leave', qq{zk_barrier_leave('$path', 60000)});
	}
	else
	{
		program_send($member{$last}, 'leave');
	}
	for my $m (@order)
	{
		if ($m =~ /^zk_/)
		{
			is(call_result($member{$m}, 'leave'), 't', "$label: zklock $m is through leave");
		}
		else
		{
			ok(defined program_take($member{$m}, qr/^left true (\d+)$/m, 30),
				"$label: $m is through leave") or program_diag($member{$m});
		}
	}
	note sprintf("$label: all through leave %.3f s after the last left", time - $t0);
	ok(wait_children($path, 0), "$label: no member and no ready left");
	return;
}

# 1. Two rounds on one path, the last member another client each time.
round('round 1 (zklock last)', qw(curator zk_a kazoo zk_b));
round('round 2 (Curator last)', qw(zk_b kazoo zk_a curator));
round('round 3 (Kazoo last)', qw(zk_a curator zk_b kazoo));

# 2. A ready left behind: all four enter, and go without leaving.
{
	my $label = 'leftover';
	program_send($curator, 'enter 4');
	program_send($kazoo, 'enter 4');
	send_call($za, 'enter', qq{zk_barrier_enter('$path', 4, 60000)});
	send_call($zb, 'enter', qq{zk_barrier_enter('$path', 4, 60000)});
	ok(defined program_take($_, qr/^entered true (\d+)$/m, 30), "$label: $_->{lib} entered")
	  for $curator, $kazoo;
	is(call_result($_, 'enter'), 't', "$label: zklock entered") for $za, $zb;
	program_quit($_) for $curator, $kazoo;
	$za->quit;
	$zb->quit;
	ok(wait_children($path, 1, 20), "$label: only ready is left once the members went");
	is($node_a->safe_psql('postgres', qq{SELECT members, ready, ready_stale FROM zk_barriers('$path')}),
		'0|t|t', "$label: zk_barriers: no member, ready left behind (stale)");

	# What the clients make of it, on another path (the facts the issue
	# names): Curator passes at once with one member of four; Kazoo counts
	# ready as a member, and one of its members waits for good.
	my $copy = '/interop_barrier/copy';
	$node_a->safe_psql('postgres', qq{SELECT zk_barrier_enter('$copy', 1)});
	ok(wait_children($copy, 1, 20), "$label: a ready left on $copy too");
	my $c = program_start('curator', $copy);
	program_send($c, 'enter 4 3000');
	is(program_take($c, qr/^entered (true|false) \d+$/m, 30), 'true',
		"$label: Curator alone of four passes at once on a ready left behind");
	program_quit($c);
	ok(wait_children($copy, 1, 20), "$label: Curator's node went with its session, ready stays");
	my @k = map { program_start('kazoo', $copy) } 1 .. 2;
	program_send($k[0], 'enter 3');
	ok(wait_children($copy, 2, 20), "$label: Kazoo's first member is in");
	sleep_for(0.5);
	program_send($k[1], 'enter 3');
	ok(defined program_take($k[1], qr/^entered true \d+$/m, 30),
		"$label: Kazoo's second member of three passes, counting ready as the third")
	  or program_diag($k[1]);
	sleep_for(1);
	ok(!program_said($k[0], qr/^entered/m),
		"$label: Kazoo's first member waits for a ready that exists already (its watch fires on a creation only)");
	program_quit($k[1]);
	program_kill($k[0]);
	ok(wait_children($copy, 1, 20), "$label: ready is still there");
	is($node_a->safe_psql('postgres', qq{SELECT zk_barrier_reset('$copy')}), '1', "$label: reset deletes it");

	# The mixed round that follows: a zklock member comes first, takes the
	# old ready for what it is (older than every member), deletes it, and
	# the round is a round again: Curator and Kazoo, next, wait for the
	# fourth (round() checks it).
	$za = session($node_a, 'zk_a');
	$zb = session($node_b, 'zk_b');
	$curator = program_start('curator', $path);
	$kazoo = program_start('kazoo', $path);
	round("$label: next round", qw(zk_a curator kazoo zk_b));
	ok($node_a->log_contains('deleted a ready node older than every member of barrier "/interop_barrier/job"'),
		"$label: zklock's log says it deleted the old ready");
}

# 3. A member killed inside: the Kazoo process (SIGKILL); the others'
#    leave goes through once its session expired.
{
	my $label = 'killed';
	program_send($_, 'enter 4') for $curator, $kazoo;
	send_call($_, 'enter', qq{zk_barrier_enter('$path', 4, 60000)}) for $za, $zb;
	ok(defined program_take($_, qr/^entered true \d+$/m, 30), "$label: $_->{lib} entered")
	  for $curator, $kazoo;
	is(call_result($_, 'enter'), 't', "$label: zklock entered") for $za, $zb;
	send_call($_, 'leave', qq{zk_barrier_leave('$path', 60000)}) for $za, $zb;
	program_send($curator, 'leave');
	sleep_for(0.5);
	my $t0 = time;
	program_kill($kazoo);
	is(call_result($_, 'leave'), 't', "$label: zklock is through leave") for $za, $zb;
	ok(defined program_take($curator, qr/^left true \d+$/m, 30), "$label: Curator is through leave")
	  or program_diag($curator);
	note sprintf("$label: the others through leave %.2f s after the kill (session timeout 4 s)", time - $t0);
	ok(wait_children($path, 0), "$label: no member and no ready left");
	$kazoo = program_start('kazoo', $path);
}

# 4. A gate closed and opened by each client in turn, waiters of the
#    others on it.
{
	my $cg = program_start('curator', $gate);
	my $kg = program_start('kazoo', $gate);
	my %close = (
		zklock => sub { $node_a->safe_psql('postgres', qq{SELECT zk_gate_close('$gate')}) },
		curator => sub { program_send($cg, 'close'); program_take($cg, qr/^closed \d+$/m, 30) },
		kazoo => sub { program_send($kg, 'close'); program_take($kg, qr/^closed \d+$/m, 30) });
	my %open = (
		zklock => sub { $node_b->safe_psql('postgres', qq{SELECT zk_gate_open('$gate')}) },
		curator => sub { program_send($cg, 'open'); program_take($cg, qr/^opened \d+$/m, 30) },
		kazoo => sub { program_send($kg, 'open'); program_take($kg, qr/^opened true \d+$/m, 30) });
	for my $turn ([ 'zklock', 'curator' ], [ 'curator', 'kazoo' ], [ 'kazoo', 'zklock' ])
	{
		my ($closer, $opener) = @$turn;
		my $label = "gate closed by $closer, opened by $opener";
		ok($close{$closer}->(), "$label: closed");
		is($node_b->safe_psql('postgres', qq{SELECT closed FROM zk_gates('$gate')}), 't',
			"$label: zk_gates says closed");
		send_call($zb, 'wait', qq{zk_gate_wait('$gate', 60000)});
		ok(wait_for_wait_event($node_b, 'zk_b'), "$label: zklock waits");
		my @waiters = grep { $_->{lib} ne $closer && $_->{lib} ne $opener } $cg, $kg;
		program_send($_, 'wait 60000') for @waiters;
		sleep_for(1);
		ok(!call_returned($zb, 'wait'), "$label: zklock waits while it is closed (1 s)");
		ok(!program_said($_, qr/^passed/m), "$label: $_->{lib} waits while it is closed (1 s)") for @waiters;
		ok($open{$opener}->(), "$label: opened");
		is(call_result($zb, 'wait'), 't', "$label: zklock passes");
		ok(defined program_take($_, qr/^passed true \d+$/m, 30), "$label: $_->{lib} passes") for @waiters;
		is($node_a->safe_psql('postgres', qq{SELECT closed FROM zk_gates('$gate')}), 'f',
			"$label: open");
	}
	program_quit($_) for $cg, $kg;
}

program_quit($_) for $curator, $kazoo;
$_->quit for $za, $zb;
my $left = $zk->wait_no_ephemerals('/interop_barrier', 20);
is_deeply($left, [], 'no member node left under /interop_barrier') or diag explain $left;
finish_checks($zk, [ $node_a, $node_b ]);
done_testing();
