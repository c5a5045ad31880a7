
# Flow control in the session worker (issue 27, item 4).  The worker owns the
# server's only ZooKeeper connection, and a ZooKeeper server stops reading
# every connection, pings included, while more requests than its
# globalOutstandingLimit (1,000 by default) wait in it.  A burst of one
# server's backends (a pooler's connections releasing at once) once put all
# of them on the wire at once.  Now the worker sends at most 250 at a time
# and keeps the rest in its backlog, in order; zk_session() shows both.
#
# 1,000 backends hold a lock each, on a durable ZooKeeper server with its
# default limits; ZooKeeper is stopped, and all of them release at once: 250
# requests are in flight, the rest queued.  ZooKeeper goes on: every release
# is confirmed, in the same session, and the slowest is reported.  The same
# for 1,000 acquisitions at once.  (The benchmark runs 2,000.)
#
# Runs alone: 1,000 backends, and it counts requests in flight.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

use ZklockTest;

my $backends = 1000;
my $coordinators = 10;
my $zk = start_zk(durable => 1);
my $node = zk_node('node_a', $zk, max_connections => $backends + 20);
$node->safe_psql('postgres', 'CREATE EXTENSION dblink');
my $session = $node->safe_psql('postgres', 'SELECT session_id FROM zk_session()');

# Every backend takes its lock and keeps its connection: dblink's c<i>, of
# ten coordinators, holds burst-<i>.
my $coord = dblink_send_many($node, $backends, $coordinators, 'holder_',
	q{'SELECT zk_lock_acquire(''burst-' || i || ''', 60000)'});
is(dblink_true_count($coord, $backends), $backends, "$backends backends hold a lock each");

# ZooKeeper stops; every connection c<i> sends $query (a text expression in
# i) at once; it goes on.  Returns how many answered true.
sub burst
{
	my ($what, $query) = @_;
	$zk->signal($_, 'STOP') for $zk->running;
	my $per = $backends / $coordinators;
	for my $k (0 .. $#$coord)
	{
		my ($from, $to) = ($k * $per + 1, ($k + 1) * $per);
		# (The empty result that ends each connection's last query, then the next.)
		$coord->[$k]->query_safe(qq{
SELECT count(*) FROM generate_series($from, $to) AS i,
       LATERAL dblink_get_result('c' || i) AS t(r boolean);
SELECT count(dblink_send_query('c' || i, $query)) FROM generate_series($from, $to) AS i});
	}
	ok($node->poll_query_until('postgres', qq{
SELECT requests_in_flight + requests_queued >= $backends FROM zk_session()}),
		"$what: every request reached the worker")
	  or diag $node->safe_psql('postgres', 'SELECT * FROM zk_session()');
	my ($in_flight, $queued) = split /\|/, $node->safe_psql('postgres',
		'SELECT requests_in_flight, requests_queued FROM zk_session()');
	note "$what: $in_flight in flight, $queued queued";
	cmp_ok($in_flight, '<=', 250, "$what: at most 250 requests in flight ($in_flight)");
	cmp_ok($queued, '>=', $backends - 250, "$what: the rest wait in the worker ($queued)");
	my $t0 = time;
	$zk->signal($_, 'CONT') for $zk->running;
	my $ok = dblink_true_count($coord, $backends);
	note sprintf('%s: %d done; the slowest %.1f s after ZooKeeper went on',
		$what, $ok, elapsed_since($t0));
	return $ok;
}

is(burst('releases', q{'SELECT zk_lock_release(''burst-' || i || ''')'}),
	$backends, 'releases: every one is confirmed');
is(burst('acquisitions', q{'SELECT zk_lock_acquire(''again-' || i || ''', 60000)'}),
	$backends, 'acquisitions: every one is granted');
is($node->safe_psql('postgres', q{SELECT count(*) FROM zk_cluster_locks WHERE holding}),
	$backends, 'and held');
$_->quit for @$coord;

is($node->safe_psql('postgres', 'SELECT session_id FROM zk_session()'), $session,
	'all in the same ZooKeeper session');
is($node->safe_psql('postgres', 'SELECT sessions_lost FROM zk_session_stats'), '0',
	'no session was lost');
# The coordinators' connections are still ending, and the worker deletes what
# each leaves: once they are done, nothing may stay in flight or queued.
ok($node->poll_query_until('postgres',
		'SELECT requests_in_flight + requests_queued = 0 FROM zk_session()'),
	'nothing is left in flight or queued')
  or diag $node->safe_psql('postgres', 'SELECT * FROM zk_session()');
like($node->safe_psql('postgres', 'SELECT worker_pid FROM zk_session()'), qr/^[1-9]\d*$/,
	"zk_session() names the session worker's pid");
is($node->safe_psql('postgres', 'SELECT worker_pid FROM zk_session()'), worker_pid($node),
	'the one running');

finish_checks($zk, [$node]);
done_testing();
