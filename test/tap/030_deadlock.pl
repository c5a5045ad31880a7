
# Cluster-wide deadlock detection.  Backends on two PostgreSQL nodes take
# zklock locks in orders that close a cycle; exactly one of them (the one
# whose wait began last) fails with 40P01 within deadlock_timeout + 1 s,
# naming every member, and the others are granted once its transaction is
# rolled back.  Session locks, transaction locks, a cycle of three over two
# nodes, a cycle through a shared holder, members with different
# deadlock_timeout (the victim must be told to look again), and members
# that all look at the same moment, a victim that looks once, a cycle
# through a row lock on one node, and one through a semaphore.  Also: blocked_by shows whom a waiter waits
# for.
#
# Runs alone: detections are bounded at deadlock_timeout plus 1 s, and one
# at 0.6 s.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Sys::Hostname;
use Test::More;
use Time::HiRes qw(sleep time);

use ZklockTest;

my $zk = start_zk();
my $node_a = zk_node('node_a', $zk);
my $node_b = zk_node('node_b', $zk);
my %node = (a => $node_a, b => $node_b);
my $seq = 0;

# A member: a session on a node, in a transaction, holding some locks.
sub member
{
	my ($node, $dt_ms, @hold) = @_;
	my $name = 'm' . ++$seq;
	my $s = session($node, $name);
	$s->query_safe("SET deadlock_timeout = $dt_ms");
	$s->query_safe('BEGIN');
	$s->query_safe("SELECT $_") for @hold;
	return {
		s => $s,
		name => $name,
		node => $node,
		pid => $s->query_safe('SELECT pg_backend_pid()'),
	};
}

# Let the member wait for a lock; returns once it waits.
sub start_wait
{
	my ($m, $call) = @_;
	send_query($m->{s}, "SELECT $call AS granted", "done_$m->{name}");
	ok(wait_for_wait_event($m->{node}, $m->{name}), "$m->{name} waits for $call");
	return;
}

# Let the member that closes a cycle wait, without looking for its wait:
# that lasts only until its first look, deadlock_timeout later (100 ms in
# section 7), which can end before one poll of pg_stat_activity comes (a
# poll starts a psql).  Its outcome and how long it took are checked instead.
sub close_cycle
{
	my ($m, $call) = @_;
	send_query($m->{s}, "SELECT $call AS granted", "done_$m->{name}");
	return;
}

# The outcome of a member's wait: 'granted' or 'deadlock'; the error text in
# $m->{error}.  Ends its transaction and lets go of every lock.
sub outcome
{
	my ($m) = @_;
	my $out = wait_marker($m->{s}, "done_$m->{name}");
	$m->{error} = $m->{s}{stderr};
	$m->{s}{stderr} = '';
	my $result = $m->{error} =~ /ERROR:  deadlock detected/ ? 'deadlock'
	  : $out =~ /^t$/m ? 'granted'
	  : "other: $out $m->{error}";
	$m->{s}->query_safe($result eq 'granted' ? 'COMMIT' : 'ROLLBACK');
	$m->{s}->query_safe('SELECT zk_lock_release_all()');
	return $result;
}

sub finish
{
	$_->{s}->quit for @_;
	return;
}

# Run a cycle: members wait in the order given, the last one closes it and
# is the victim.  Checks that exactly it fails, within deadlock_timeout +
# 1 s of closing the cycle, and that the others are granted.
#
# Each member waits for the next one's lock, so once the victim's transaction
# is rolled back they are granted from the last to the first.  $waiting:
# how many already wait.
sub cycle_ok
{
	my ($title, $members, $waits, $dt_ms, $waiting) = @_;
	start_wait($members->[$_], $waits->[$_]) for ($waiting // 0) .. $#$members - 1;
	my $closed = time;
	my $victim = $members->[-1];
	close_cycle($victim, $waits->[-1]);
	is(outcome($victim), 'deadlock', "$title: the member that closed the cycle fails with 40P01");
	my $took = time - $closed;
	cmp_ok($took, '<', $dt_ms / 1000 + 1,
		sprintf("$title: within deadlock_timeout + 1 s (%.2f s after the cycle closed)", $took));
	is(outcome($_), 'granted', "$title: $_->{name} goes on and is granted")
	  for reverse @$members[ 0 .. $#$members - 1 ];
	return $victim->{error};
}

# 1. Two nodes, opposite order, session locks taken in transactions (the
# victim's are undone with its transaction), and blocked_by.
{
	my $a = member($node_a, 1000, q{zk_lock_acquire('d1a')});
	my $b = member($node_b, 1000, q{zk_lock_acquire('d1b')});
	start_wait($a, q{zk_lock_acquire('d1b')});
	# A server is cluster_name@host:port (issue 42, item 15).
	my ($at_a, $at_b) = map { '@' . hostname() . ':' . $_->port } $node_a, $node_b;
	is($b->{s}->query_safe(q{SELECT blocked_by FROM zk_lock_holders('d1b') WHERE NOT holding}),
		"{node_b$at_b/$b->{pid}}", 'blocked_by names the node and pid a waiter waits for');
	is($b->{s}->query_safe(q{SELECT blocked_by IS NULL FROM zk_cluster_locks WHERE lock_name = 'd1a'}),
		't', 'a holder is blocked by nobody');
	my $error = cycle_ok('two nodes, session locks', [ $a, $b ],
		[ q{zk_lock_acquire('d1b')}, q{zk_lock_acquire('d1a')} ], 1000, 1);
	like($error,
		qr/DETAIL:  Process $b->{pid} on node_b\Q$at_b\E holds zklock lock "d1b" and waits for exclusive zklock lock "d1a"; blocked by process $a->{pid} on node_a\Q$at_a\E\.\nProcess $a->{pid} on node_a\Q$at_a\E holds zklock lock "d1a" and waits for exclusive zklock lock "d1b"; blocked by process $b->{pid} on node_b\Q$at_b\E\./,
		'the DETAIL names each member: node, pid, the lock it holds and the one it waits for');
	like($error, qr/HINT:  .*same order/, 'with a hint');
	is($b->{s}->query_safe('SELECT count(*) FROM zk_locks'), '0',
		"the victim's locks went with its transaction");
	finish($a, $b);
}

# 2. Three members over two nodes.
{
	my $x = member($node_a, 1000, q{zk_lock_acquire('d2x')});
	my $y = member($node_b, 1000, q{zk_lock_acquire('d2y')});
	my $z = member($node_a, 1000, q{zk_lock_acquire('d2z')});
	my $error = cycle_ok('three members', [ $x, $y, $z ],
		[ q{zk_lock_acquire('d2y')}, q{zk_lock_acquire('d2z')}, q{zk_lock_acquire('d2x')} ], 1000);
	is(scalar(() = $error =~ /^(?:DETAIL:  )?Process \d+ on node_[ab]@\S+:\d+ holds/mg), 3,
		'the DETAIL has a line for each of the three');
	finish($x, $y, $z);
}

# 3. Through a shared holder: a waits for an exclusive lock held by b, b for
# an exclusive lock of which a holds a shared one (beside an innocent
# second reader).
{
	my $reader = member($node_b, 1000, q{zk_lock_acquire_shared('d3s')});
	my $a = member($node_a, 1000, q{zk_lock_acquire_shared('d3s')});
	my $b = member($node_b, 1000, q{zk_lock_acquire('d3t')});
	my $error = cycle_ok('through a shared holder', [ $a, $b ],
		[ q{zk_lock_acquire('d3t')}, q{zk_lock_acquire('d3s')} ], 1000);
	like($error, qr/holds zklock lock "d3s" and waits for exclusive zklock lock "d3t"/,
		'the shared holder is named as holding');
	$reader->{s}->query_safe('COMMIT');
	finish($reader, $a, $b);
}

# 4. Transaction locks, with a shorter deadlock_timeout.
{
	my $a = member($node_a, 300, q{zk_lock_xact_acquire('d4a')});
	my $b = member($node_b, 300, q{zk_lock_xact_acquire('d4b')});
	cycle_ok('transaction locks', [ $a, $b ],
		[ q{zk_lock_xact_acquire('d4b')}, q{zk_lock_xact_acquire('d4a')} ], 300);
	finish($a, $b);
}

# 5. The victim looks first, with a short deadlock_timeout, before the other
# member has published its wait; the other finds the cycle later and must
# make the victim look again.
{
	my $a = member($node_a, 3000, q{zk_lock_acquire('d5a')});
	my $b = member($node_b, 200, q{zk_lock_acquire('d5b')});
	start_wait($a, q{zk_lock_acquire('d5b')});
	my $t0 = time;
	close_cycle($b, q{zk_lock_acquire('d5a')});
	is(outcome($b), 'deadlock', 'different deadlock_timeout: the newest waiter is still the victim');
	my $took = time - $t0;
	cmp_ok($took, '<', 3 + 1, sprintf('once the other member looked (%.2f s)', $took));
	is(outcome($a), 'granted', 'and the other member is granted');
	finish($a, $b);
}

# 6. Members that look at the same moment, five times: one victim each time.
for my $round (1 .. 5)
{
	my $a = member($node_a, 500, qq{zk_lock_xact_acquire('d6a$round')});
	my $b = member($node_b, 500, qq{zk_lock_xact_acquire('d6b$round')});
	send_query($a->{s}, qq{SELECT zk_lock_xact_acquire('d6b$round') AS granted}, "done_$a->{name}");
	send_query($b->{s}, qq{SELECT zk_lock_xact_acquire('d6a$round') AS granted}, "done_$b->{name}");
	my %results;
	$results{$_->{name}} = outcome($_) for $a, $b;
	is(join(',', sort values %results), 'deadlock,granted',
		"round $round: both look at once, exactly one victim");
	finish($a, $b);
}

# 7. The member that closes the cycle, when the other has long published its
# wait and does nothing else: its one look finds the cycle at once, five
# times.  (The session worker set a backend's watch only on its next turn,
# up to a second later when nothing else woke it: the look waited for the
# watch on its own published wait.)
for my $round (1 .. 5)
{
	my $a = member($node_a, 100, qq{zk_lock_acquire('d7a$round')});
	my $b = member($node_b, 100, qq{zk_lock_acquire('d7b$round')});
	start_wait($a, qq{zk_lock_acquire('d7b$round')});
	sleep_for(0.5);
	my $t0 = time;
	close_cycle($b, qq{zk_lock_acquire('d7a$round')});
	is(outcome($b), 'deadlock', "round $round: the member that closed the cycle fails");
	my $took = time - $t0;
	cmp_ok($took, '<', 0.1 + 0.5,
		sprintf("round $round: at its first look (%.2f s after it began to wait)", $took));
	is(outcome($a), 'granted', "round $round: the other member is granted");
	finish($a, $b);
}

# 8. Through one of PostgreSQL's own locks (issue 26.4): a holds d8 and
# waits for a row that b updated; b waits for d8.  PostgreSQL's detector
# sees a wait for b, who waits for no lock it knows; zklock's sees b wait
# for a, who waits for nothing in ZooKeeper: each alone saw no cycle, and
# both waited until lock_timeout.  b's look follows a, a backend of its own
# server, through the lock manager back to itself: b fails with 40P01 (the
# only member waiting for a zklock lock) and a's update goes on.
{
	$node_a->safe_psql('postgres', 'CREATE TABLE d8 (id int PRIMARY KEY, x int); INSERT INTO d8 VALUES (1, 0)');
	my $b = member($node_a, 200);
	$b->{s}->query_safe(q{SET lock_timeout = '20s'; UPDATE d8 SET x = x + 1 WHERE id = 1});
	my $a = member($node_a, 200, q{zk_lock_acquire('d8')});
	$a->{s}->query_safe(q{SET lock_timeout = '20s'});
	send_query($a->{s}, q{UPDATE d8 SET x = x + 10 WHERE id = 1}, 'done_update');
	ok($node_a->poll_query_until('postgres',
			qq{SELECT wait_event_type FROM pg_stat_activity WHERE pid = $a->{pid}}, 'Lock'),
		'a waits for the row b updated');
	my $t0 = time;
	close_cycle($b, q{zk_lock_acquire('d8')});
	is(outcome($b), 'deadlock', 'b, waiting for d8 held by a, fails with 40P01');
	my $took = time - $t0;
	like($b->{error}, qr/waits for a PostgreSQL lock/, 'the DETAIL says a waits for a PostgreSQL lock');
	cmp_ok($took, '<', 0.2 + 2, sprintf('within deadlock_timeout + 2 s (%.2f s)', $took));
	wait_marker($a->{s}, 'done_update');
	is($a->{s}{stderr}, '', "a's update went on");
	$a->{s}->query_safe('COMMIT');
	is($node_a->safe_psql('postgres', 'SELECT x FROM d8'), '10', 'a committed; b rolled back');
	$a->{s}->query_safe('SELECT zk_lock_release_all()');
	finish($a, $b);
}

# 9. Through a semaphore (issue 26.3): a holds lock d9 and waits for the one
# permit of semaphore d9s, which b holds; b waits for d9.  A semaphore's
# waiter waits for any of its holders, so its waits were never looked at,
# and both waited until lock_timeout.  Every holder of the permits a waits
# for is blocked by a: one 40P01, the newest waiter's (b).
{
	my $a = member($node_a, 200, q{zk_lock_acquire('d9')});
	my $b = member($node_b, 200, q{zk_semaphore_acquire('d9s', 1)});
	$_->{s}->query_safe(q{SET lock_timeout = '20s'}) for $a, $b;
	start_wait($a, q{zk_semaphore_acquire('d9s', 1)});
	my $t0 = time;
	close_cycle($b, q{zk_lock_acquire('d9')});
	is(outcome($b), 'deadlock', 'lock and semaphore in opposite orders: b fails with 40P01');
	my $took = time - $t0;
	cmp_ok($took, '<', 0.2 + 2, sprintf('within deadlock_timeout + 2 s (%.2f s)', $took));
	like($b->{error}, qr/waits for a permit of zklock semaphore "d9s"/, 'the DETAIL names the semaphore');
	is(outcome($a), 'granted', 'a is granted the permit');
	finish($a, $b);
}

# 10. No false alarm through a semaphore: two permits, the other one held by
# c, who waits for nothing and may let go any moment.  a waits for a permit,
# b (holding one) for a's lock: not a deadlock while c may release.  Once c
# does, a is granted, and b after a's COMMIT.
{
	my $a = member($node_a, 200, q{zk_lock_acquire('d10')});
	my $b = member($node_b, 200, q{zk_semaphore_acquire('d10s', 2)});
	my $c = member($node_b, 200, q{zk_semaphore_acquire('d10s', 2)});
	start_wait($a, q{zk_semaphore_acquire('d10s', 2)});
	start_wait($b, q{zk_lock_acquire('d10')});
	sleep_for(1.5);
	ok(still_waits($node_a, "pid = $a->{pid}") && still_waits($node_b, "pid = $b->{pid}"),
		'both still wait after 7 deadlock_timeouts: no false alarm');
	$c->{s}->query_safe('COMMIT');
	$c->{s}->query_safe(q{SELECT zk_semaphore_release('d10s')});
	is(outcome($a), 'granted', 'once c lets go, a is granted');
	is(outcome($b), 'granted', 'and b once a committed');
	finish($a, $b, $c);
}

is(scalar @{ $zk->ephemerals(ZK_ROOT . '/%waits') }, 0, 'no published wait is left');
finish_checks($zk, [ $node_a, $node_b ]);
done_testing();
