
# A long queue at the default deadlock_timeout (issue 26, item 1).  Every
# waiter past deadlock_timeout looks for a cycle through itself; a look used
# to list the whole queue once for every waiter ahead of it and read each
# one's published wait, so a queue of 300 sent the ensemble 14,000 requests
# a second, a queue of 1,000 brought it down, and the queue took 32 s to
# drain.  Now a look lists a queue once and reads about its holders only.
#
# 150 backends of one server wait for one lock (the benchmark runs 100, 300
# and 1,000) with deadlock_timeout at its default, 1 s: while they wait, the
# ZooKeeper server receives at most 2 packets a second per waiter (pings and
# the worker's replies' acknowledgements included); once the holder lets go,
# every waiter is granted, in queue order, within 5 s; none of them fails
# with a false 40P01.
#
# Runs alone: 150 backends, and a queue must drain within 5 s.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

use ZklockTest;

my $waiters = 150;
my $window = 10;
my $zk = start_zk();
my $node = zk_node('node_a', $zk, max_connections => $waiters + 30);
$node->safe_psql('postgres', q{
CREATE EXTENSION dblink;
CREATE TABLE grants (znode text, granted timestamptz);
CREATE FUNCTION wait_once(lock text) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
  at timestamptz;
  node text;
BEGIN
  PERFORM zk_lock_acquire(lock);
  at := clock_timestamp();
  SELECT l.znode INTO node FROM zk_locks l WHERE l.name = lock;
  PERFORM zk_lock_release(lock);
  INSERT INTO grants VALUES (node, at);
  RETURN true;
END $$;
});

# The ZooKeeper server's count of packets received.
sub packets_received
{
	my $srvr = $zk->flw(1, 'srvr') // '';
	return $srvr =~ /^Received: (\d+)/m ? $1 : die "no srvr answer: $srvr";
}

my $holder = session($node, 'holder');
$holder->query_safe(q{SELECT zk_lock_acquire('long-queue')});

# The waiters are dblink's connections from three coordinators.
my $coord = dblink_send_many($node, $waiters, 3, 'waiter', q{'SELECT wait_once(''long-queue'')'});
ok($node->poll_query_until('postgres',
		q{SELECT count(*) FROM zk_cluster_locks WHERE lock_name = 'long-queue'}, $waiters + 1),
	"$waiters waiters queued behind the holder");

# While they wait: their first looks (1 s into each wait) and the next ones.
my $p0 = packets_received();
my $t0 = time;
sleep_for($window);
my $packets = packets_received() - $p0;
my $rate = $packets / (time - $t0) / $waiters;
note sprintf('%d waiters: %d packets in %.1f s, %.2f per waiter per second',
	$waiters, $packets, time - $t0, $rate);
cmp_ok($rate, '<=', 2, sprintf('at most 2 packets per waiter per second while they wait (%.2f)', $rate));
is($node->safe_psql('postgres', q{SELECT count(*) FROM zk_cluster_locks WHERE lock_name = 'long-queue'}),
	$waiters + 1, 'every waiter still waits: no false deadlock');

my $released_at = $holder->query_safe(q{SELECT zk_lock_release('long-queue'); SELECT extract(epoch FROM clock_timestamp())});
($released_at) = $released_at =~ /([\d.]+)\s*$/;
my $granted = dblink_true_count($coord, $waiters);
is($granted, $waiters, "all $waiters waiters were granted");
my ($drain, $in_order) = split /\|/, $node->safe_psql('postgres', qq{
SELECT max(extract(epoch FROM granted)) - $released_at,
       count(*) FILTER (WHERE seq_by_time = seq_by_node)
  FROM (SELECT granted,
               row_number() OVER (ORDER BY granted) AS seq_by_time,
               row_number() OVER (ORDER BY substring(znode from '[0-9]+\$')::bigint) AS seq_by_node
          FROM grants) g});
note sprintf('the queue drained %.2f s after the release', $drain);
cmp_ok($drain, '<', 5, sprintf('the queue drained within 5 s of the release (%.2f s)', $drain));
is($in_order, $waiters, 'granted in queue order');

$_->quit for @$coord, $holder;
finish_checks($zk, [$node]);
done_testing();
