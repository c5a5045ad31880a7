
# No false alarm from the deadlock detector.
#
# 1. For 60 s, 6 sessions on 2 nodes take random sets of locks, exclusive and
#    shared, always in one global order (no cycle is possible), with
#    deadlock_timeout = 100ms, so that many waits are published and checked:
#    zero 40P01.
# 2. A chain of waits across both nodes that lasts 20 deadlock_timeouts:
#    every member looks, none fails.
# 3. A cycle that dissolves before it is checked: one member gives up
#    (timeout_ms) before the other looks.
# 4. A real cycle through a Kazoo client, which publishes nothing: the zklock
#    member's wait ends by its timeout_ms, never by 40P01.
#
# Runs alone: six busy loops for 60 s, and a 0.7 s window between two looks.

use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep time);

use ZklockTest;

my $seconds = 60;
my $workers_per_node = 3;

my $zk = start_zk();
my @nodes = map {
	zk_node($_, $zk,
		'shared_preload_libraries' => 'zklock',
		'deadlock_timeout' => '100ms')
} qw(node_a node_b);
my ($node_a, $node_b) = @nodes;

for my $node (@nodes)
{
	$node->safe_psql('postgres', q{
CREATE TABLE nfa_results (node text, worker text, cycles int, deadlocks int, timeouts int);
-- Random locks of l1..l8 in name order, each exclusive or (one time in
-- three) shared, held for up to 30 ms until the transaction ends.
CREATE FUNCTION nfa_cycle() RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  l text;
BEGIN
  FOR l IN SELECT 'l' || i FROM generate_series(1, 8) AS i
            WHERE random() < 0.4 ORDER BY 1 LOOP
    IF random() < 0.33 THEN
      PERFORM zk_lock_xact_acquire_shared(l);
    ELSE
      PERFORM zk_lock_xact_acquire(l);
    END IF;
  END LOOP;
  PERFORM pg_sleep(random() * 0.03);
END $$;
CREATE PROCEDURE nfa_worker(worker text, seconds int) LANGUAGE plpgsql AS $$
DECLARE
  deadline timestamptz := clock_timestamp() + seconds * interval '1 s';
  cycles int := 0;
  deadlocks int := 0;
  timeouts int := 0;
BEGIN
  WHILE clock_timestamp() < deadline LOOP
    BEGIN
      PERFORM nfa_cycle();
    EXCEPTION
      WHEN deadlock_detected THEN deadlocks := deadlocks + 1;
      WHEN query_canceled THEN timeouts := timeouts + 1;
    END;
    COMMIT;
    cycles := cycles + 1;
  END LOOP;
  INSERT INTO nfa_results VALUES (current_setting('cluster_name'), worker,
                                  cycles, deadlocks, timeouts);
  COMMIT;
END $$;
});
}

# 1. Random sets in one global order.
my @workers;
for my $node (@nodes)
{
	for my $w (1 .. $workers_per_node)
	{
		my ($out, $err) = ('', '');
		# statement_timeout only so that a stuck wait cannot hang the test.
		push @workers, IPC::Run::start(
			[
				'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1',
				'-d', $node->connstr('postgres'),
				'-c', 'SET statement_timeout = 0',
				'-c', "CALL nfa_worker('w$w', $seconds)"
			],
			'<', '/dev/null', '>', \$out, '2>', \$err,
			IPC::Run::timeout($seconds + 120));
	}
}
$_->finish for @workers;
is(scalar(grep { $_->result != 0 } @workers), 0, 'every worker ran to the end');

my ($cycles, $deadlocks, $timeouts, $checks) = (0, 0, 0, 0);
for my $node (@nodes)
{
	my ($c, $d, $t) = split /\|/, $node->safe_psql('postgres',
		'SELECT sum(cycles), sum(deadlocks), sum(timeouts) FROM nfa_results');
	$cycles += $c;
	$deadlocks += $d;
	$timeouts += $t;
	$checks += $node->safe_psql('postgres', 'SELECT deadlock_checks FROM zk_session_stats');
}
note "$cycles transactions, $checks deadlock checks, $deadlocks 40P01, $timeouts timeouts";
cmp_ok($cycles, '>', 300, "$cycles transactions over $seconds s");
cmp_ok($checks, '>', 50, "the detector looked $checks times (waits of over 100 ms)");
is($deadlocks, 0, 'no deadlock reported where locks are taken in one order');
is($timeouts, 0, 'and no wait had to be cancelled');

# 2. A chain a <- b <- c <- d over both nodes, for 20 deadlock_timeouts.
my @chain = map { session($nodes[ $_ % 2 ], "chain$_") } 0 .. 3;
$chain[$_]->query_safe("SELECT zk_lock_acquire('c$_')") for 0 .. 3;
for my $i (1 .. 3)
{
	send_query($chain[$i], "SELECT zk_lock_acquire('c" . ($i - 1) . "')", "granted$i");
	ok(wait_for_wait_event($nodes[ $i % 2 ], "chain$i"), "chain member $i waits for member " . ($i - 1));
}
sleep_for(2);
my $before = $node_a->safe_psql('postgres', 'SELECT deadlock_checks FROM zk_session_stats')
  + $node_b->safe_psql('postgres', 'SELECT deadlock_checks FROM zk_session_stats');
for my $i (0 .. 3)
{
	wait_marker($chain[$i], "granted$i") if $i > 0;
	unlike($chain[$i]->{stderr}, qr/deadlock/, "chain member $i: no deadlock reported");
	$chain[$i]->query_safe('SELECT zk_lock_release_all()');
	$chain[$i]->quit;
}
cmp_ok($before - $checks, '>=', 3, 'each waiting member of the chain looked');

# 3. A cycle that dissolves before it is checked: the first member gives up
# after 300 ms, the second looks after 1 s.
{
	my $a = session($node_a, 'dissolve_a');
	my $b = session($node_b, 'dissolve_b');
	$b->query_safe(q{SET deadlock_timeout = '1s'});
	$a->query_safe(q{SELECT zk_lock_acquire('dis_a')});
	$b->query_safe(q{SELECT zk_lock_acquire('dis_b')});
	send_query($a, q{SELECT zk_lock_acquire('dis_b', 300)}, 'a_done');
	send_query($b, q{SELECT zk_lock_acquire('dis_a', 5000)}, 'b_done');
	like(wait_marker($a, 'a_done'), qr/^f$/m, 'the first member gives up after 300 ms');
	$a->query_safe(q{SELECT zk_lock_release_all()});
	like(wait_marker($b, 'b_done'), qr/^t$/m, 'the second is granted once it lets go');
	unlike($a->{stderr} . $b->{stderr}, qr/deadlock/, 'no deadlock reported');
	$_->query_safe('SELECT zk_lock_release_all()') for $a, $b;
	$_->quit for $a, $b;
}

# 4. A real cycle through a Kazoo client: it holds /nfa/k and waits for
# /nfa/j, which a zklock backend holds while waiting for /nfa/k.
{
	my $s = session($node_a, 'with_kazoo');
	$s->query_safe(q{SELECT zk_lock_acquire('/nfa/j')});
	my ($kin, $kout, $kerr) = ('', '', '');
	my $kazoo = IPC::Run::start(
		[
			'/usr/bin/python3', '-c', q{
import sys
from kazoo.client import KazooClient
zk = KazooClient(hosts=sys.argv[1], timeout=10)
zk.start(timeout=15)
k = zk.Lock("/nfa/k", extra_lock_patterns=["-lock-"])
k.acquire()
print("holding k", flush=True)
j = zk.Lock("/nfa/j", extra_lock_patterns=["-lock-"])
print("got j" if j.acquire(timeout=8) else "no j", flush=True)
k.release()
zk.stop()
}, $zk->hosts
		],
		'<', \$kin, '>', \$kout, '2>', \$kerr, IPC::Run::timeout(60));
	$kazoo->pump until $kout =~ /holding k/;
	my $t0 = time;
	is($s->query_safe(q{SELECT zk_lock_acquire('/nfa/k', 2500)}), 'f',
		'a cycle through a client that publishes nothing ends by timeout_ms');
	cmp_ok(time - $t0, '>=', 2.4, 'after the whole timeout, though it waited 25 deadlock_timeouts');
	unlike($s->{stderr}, qr/deadlock/, 'no deadlock reported');
	$s->query_safe(q{SELECT zk_lock_release_all()});
	$kazoo->finish;
	like($kout, qr/got j/, 'the Kazoo client gets its lock once the zklock side lets go');
	$s->quit;
}

is(scalar @{ $zk->ephemerals(ZK_ROOT . '/%waits') }, 0, 'no published wait is left');
finish_checks($zk, \@nodes);
done_testing();
