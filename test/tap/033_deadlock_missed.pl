
# Deadlocks the detector used to miss, and waits it used to fail.
#
# 1. Two cycles through one member, whose other members looked before it had
#    published its wait: B then A hold X shared, V holds Y and Z; A waits
#    for Y, V for X, B for Z (A and B with a short deadlock_timeout, V with
#    a long one).  Once V found only B's cycle, and A's cycle with V was
#    seen by nobody until lock_timeout; then by A's own look again, 3 times
#    A's deadlock_timeout after V's.  Now V's look, when it publishes,
#    deals with every cycle through V: V is the newest waiter of A's cycle,
#    and its 40P01 breaks both at once (one victim, not two), within its
#    deadlock_timeout of its wait.
# 2. A poke refused by an ACL (the victim's published wait was written with
#    zklock.auth): it is logged, and the victim's own next look breaks the
#    cycle.
# 3. The victim is chosen by its waiting node's czxid as ZooKeeper has it,
#    not as the member published it: a forged czxid changes nothing.
# 4. Publishing a wait where the detector may not create its nodes (an ACL
#    on zklock.root) does not fail the wait (it raised 42501).
# 5. Forged published waits (nested 100,000 deep; naming another session's
#    node) neither fail the wait nor make a false deadlock.
#
# Runs alone: detections are bounded at 4.5 s, and B must wait within 1.6 s
# of A.

use strict;
use warnings;

use FindBin;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

use ZklockTest;

my $zkwrite = "$FindBin::Bin/../zk/zkwrite.py";
my $zk = start_zk();
my $node_a = zk_node('node_a', $zk);
my $node_b = zk_node('node_b', $zk);
my $waits = ZK_ROOT . '/%waits';
my $seq = 0;

sub zkw
{
	my @args = @_;
	my $out = `/usr/bin/python3 $zkwrite '@{[ $zk->hosts ]}' @args`;
	die "zkwrite.py @args failed" if $?;
	return $out;
}

# A member: a session in a transaction holding some locks.
sub member
{
	my ($node, $dt_ms, @hold) = @_;
	my $name = 'm' . ++$seq;
	my $s = session($node, $name);
	$s->query_safe("SET deadlock_timeout = $dt_ms; SET lock_timeout = '30s'; BEGIN");
	$s->query_safe("SELECT $_") for @hold;
	return { s => $s, name => $name, node => $node };
}

sub start_wait
{
	my ($m, $call) = @_;
	send_query($m->{s}, "SELECT $call AS granted", "done_$m->{name}");
	ok(wait_for_wait_event($m->{node}, $m->{name}), "$m->{name} waits for $call");
	return;
}

# 'granted', 'deadlock' or what else ended the wait; ends the transaction.
sub outcome
{
	my ($m) = @_;
	my $out = wait_marker($m->{s}, "done_$m->{name}");
	my $err = $m->{s}{stderr};
	$m->{s}{stderr} = '';
	my $result = $err =~ /ERROR:  deadlock detected/ ? 'deadlock'
	  : $out =~ /^t$/m ? 'granted'
	  : "other: $out $err";
	$m->{s}->query_safe($result eq 'granted' ? 'COMMIT' : 'ROLLBACK');
	$m->{s}->query_safe('SELECT zk_lock_release_all()');
	return $result;
}

# The session key that names the published wait of the holder of a lock
# (its only node).
sub wait_key
{
	my ($lock) = @_;
	return substr((split m{/}, queue_nodes($zk, $lock)->[0])[-1], 0, 21);
}

# 1. Two cycles through V.
{
	my $b = member($node_b, 200, q{zk_lock_acquire_shared('X')});
	my $a = member($node_a, 200, q{zk_lock_acquire_shared('X')});
	my $v = member($node_b, 2000, q{zk_lock_acquire('Y')}, q{zk_lock_acquire('Z')});
	my $t0 = time;
	start_wait($a, q{zk_lock_acquire('Y')});
	start_wait($v, q{zk_lock_acquire('X')});
	start_wait($b, q{zk_lock_acquire('Z')});
	is(outcome($v), 'deadlock', 'two cycles: V, the newest waiter of one, fails with 40P01');
	my $took = time - $t0;
	is(outcome($b), 'granted', 'B, the newest of the other, is granted: one victim broke both');
	is(outcome($a), 'granted', 'A is granted');
	# V waits from about 0.2 s on and looks at its deadlock_timeout, 2 s.
	cmp_ok($took, '<', 4.5, sprintf('both cycles broken in %.2f s', $took));
	$_->{s}->quit for $a, $b, $v;
	# The detector's work on node_b (V's and B's looks), in zk_session_stats.
	my $work = $node_b->safe_psql('postgres', q{
SELECT deadlock_checks, deadlocks, deadlock_members, deadlock_cycles, deadlock_victims
  FROM zk_session_stats});
	note "node_b's checks, deadlocks, members read, cycles, victims: $work";
	my ($checks, $deadlocks, $members, $cycles, $victims) = split /\|/, $work;
	is($deadlocks, 1, 'zk_session_stats: node_b raised one 40P01');
	ok($checks >= 1 && $cycles >= 1 && $victims >= 1 && $members >= $checks + 2,
		'and counts the looks, the cycles found, their victims and the waits read');
}

# 2. A poke refused: node_b writes with credentials, node_a cannot rewrite
# node_b's published wait.  The locks' parents and the detector's node are
# made beforehand with an open ACL, so that both can queue and publish.
{
	# (Persistent: a container left by an earlier case could go any moment.)
	zkw('delete', $waits);
	zkw('mkdir', ZK_ROOT . "/$_") for qw(p1 p2 %waits);
	# Server-wide: node_b's session worker opens a session with them.
	ok(reconfigure($node_b, 'zklock.auth' => 'dl:secret'), 'node_b takes credentials');
	ok(defined wait_worker_session($node_b), 'and has a session with them');
	# b, the victim, looks at 0.2, 0.4, 0.8, 1.6, 3.2 and 6.4 s of its
	# wait; a looks first at 4.8 s of its own, midway between two of b's
	# looks, which leaves 1.6 s either way for b's wait to begin after a's:
	# a finds the cycle first and pokes b, in vain, and b's next look
	# finds it.
	my $a = member($node_a, 4800, q{zk_lock_acquire('p1')});
	my $b = member($node_b, 200, q{zk_lock_acquire('p2')});
	my $log_offset = -s $node_a->logfile;
	my $t0 = time;
	start_wait($a, q{zk_lock_acquire('p2')});
	start_wait($b, q{zk_lock_acquire('p1')});
	my $gap = sprintf('b waited %.2f s after a at most', time - $t0);
	is(outcome($b), 'deadlock', "a poke refused by an ACL: the victim still fails with 40P01 ($gap)");
	my $took = time - $t0;
	is(outcome($a), 'granted', 'and the other member is granted');
	cmp_ok($took, '<', 12, sprintf('in %.2f s, not at lock_timeout', $took));
	my $refused = qr/LOG:  zklock: could not ask process \d+ on node_b@\S+:\d+ to look for a deadlock again: not authenticated/;
	my $t_log = time;
	sleep 0.1 until slurp_file($node_a->logfile, $log_offset) =~ $refused || time - $t_log > 5;
	like(slurp_file($node_a->logfile, $log_offset), $refused, "the refused poke is logged ($gap)");
	$_->{s}->quit for $a, $b;
	ok(reconfigure($node_b, 'zklock.auth' => ''), 'node_b drops its credentials');
	ok(defined wait_worker_session($node_b), 'and has a session without them');
}

# 3. A forged czxid in the first member's published wait: it would be the
# victim by what it published; by its node's czxid, the second one is.
{
	my $a = member($node_a, 200, q{zk_lock_acquire('q1')});
	my $b = member($node_b, 200, q{zk_lock_acquire('q2')});
	start_wait($a, q{zk_lock_acquire('q2')});
	my $entry = "$waits/" . wait_key('q1');
	my $data;
	my $t = time;
	until (($data = eval { zkw('get', $entry) } // '') =~ /"czxid":/ || time - $t > 10)
	{
		sleep_for(0.1);
	}
	like($data, qr/"czxid":\d+/, "a's wait is published");
	$data =~ s/"czxid":\d+/"czxid":9000000000000000000/;
	zkw('set', $entry, unpack('H*', $data));
	my $t0 = time;
	# Not start_wait: b's wait ends at its first look, 200 ms on, which can
	# come before one poll of pg_stat_activity does.
	send_query($b->{s}, q{SELECT zk_lock_acquire('q1') AS granted}, "done_$b->{name}");
	is(outcome($b), 'deadlock', 'a forged czxid: the member whose wait began last is still the victim');
	is(outcome($a), 'granted', 'the forger\'s claim changed nothing');
	cmp_ok(time - $t0, '<', 5, 'at once');
	$_->{s}->quit for $a, $b;
}

# 4. zklock.root where only a digest user may create: the detector cannot
# publish, the wait goes on and is granted when the holder lets go.
{
	my $root = '/zklock_acl';
	zkw('mkdir', $root, 'owner:pw', 'r');
	zkw('mkdir', "$root/r1", 'owner:pw', 'rwcd');
	# mkdir made r1 with the owner's ACL and rights for all: open it fully.
	my $h = session($node_a, 'h4');
	my $w = session($node_b, 'w4');
	$_->query_safe("SET zklock.root = '$root'") for $h, $w;
	$h->query_safe(q{SELECT zk_lock_acquire('r1')});
	$w->query_safe(q{SET deadlock_timeout = '100ms'});
	send_query($w, q{SELECT zk_lock_acquire('r1', 20000) AS granted}, 'w4_done');
	ok(wait_for_wait_event($node_b, 'w4'), 'a waiter waits where the detector may not publish');
	sleep_for(1);
	$h->query_safe(q{SELECT zk_lock_release('r1')});
	like(wait_marker($w, 'w4_done'), qr/^t$/m, 'its wait was not failed, and it is granted');
	is($w->{stderr}, '', 'without an error');
	$w->query_safe(q{SELECT zk_lock_release('r1')});
	$_->quit for $h, $w;
}

# 5. Forged waits of a holder that does not wait: nested 100,000 deep, then
# naming another session's node in a lock the waiter holds (which would
# close a cycle through the waiter if it were believed).
{
	my $h = member($node_b, 1000, q{zk_lock_acquire('f1')});
	my $w = member($node_a, 100, q{zk_lock_acquire('w1')});
	my $other = session($node_a, 'behind');
	send_query($other, q{SELECT zk_lock_acquire('w1', 30000)}, 'behind_done');
	ok(wait_for_wait_event($node_a, 'behind'), 'another session queues behind the waiter in w1');
	my $x = (split m{/}, queue_nodes($zk, 'w1')->[1])[-1];
	my $entry = "$waits/" . wait_key('f1');

	my $hexfile = "$PostgreSQL::Test::Utils::tmp_check/forged.hex";
	open my $fh, '>', $hexfile or die "$hexfile: $!";
	print $fh unpack('H*', '{"pid":1,"x":' . ('[' x 100000) . (']' x 100000) . '}');
	close $fh;
	zkw('delete', $entry);
	system('/usr/bin/python3', $zkwrite, $zk->hosts, 'mkdir', $entry) == 0 or die;
	zkw('set', $entry, "\@$hexfile");
	start_wait($w, q{zk_lock_acquire('f1', 20000)});
	sleep_for(1);
	my $forged = sprintf('{"name":"w1","lock":"%s/w1","node":"%s","czxid":0,"mode":"exclusive","cluster_name":"x","host":"h","port":1,"pid":1}',
		ZK_ROOT, $x);
	zkw('set', $entry, unpack('H*', $forged));
	sleep_for(1.5);
	$h->{s}->query_safe('COMMIT; SELECT zk_lock_release_all()');
	is(outcome($w), 'granted', 'forged waits fail no wait and make no deadlock: granted when the holder lets go');
	$w->{s}->query_safe('SELECT 1');
	like(wait_marker($other, 'behind_done'), qr/^t$/m, 'and the one behind it after it');
	$other->query_safe(q{SELECT zk_lock_release_all()});
	zkw('delete', $entry);
	$_->quit for $h->{s}, $w->{s}, $other;
}

zkw('deleteall', '/zklock_acl', 'owner:pw');
zkw('deleteall', ZK_ROOT . "/$_") for qw(p1 p2 %waits);
finish_checks($zk, [ $node_a, $node_b ]);
done_testing();
