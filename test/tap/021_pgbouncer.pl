
# zklock through a real PgBouncer in front of node_a, one server connection
# per pool.  Session pooling: a client that leaves without releasing its
# locks does not pass them to the next client of the same server
# connection (PgBouncer's DISCARD ALL releases them and deletes their
# nodes), so they are free on node_b at once; a lock lost meanwhile does not
# make DISCARD ALL fail.  Transaction pooling: transaction locks work; a
# session lock outlives the client's transaction on the shared server
# connection, as advisory locks do (documented in the README).

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;

use PgBouncer;
use ZklockTest;

my $session_timeout_ms = 3000;
my $zk = start_zk();
my ($node_a, $node_b) =
  map { zk_node($_, $zk, 'zklock.session_timeout' => $session_timeout_ms) }
  qw(node_a node_b);

my $bouncer = PgBouncer->new(
	node => $node_a,
	databases => {
		session_pool => 'pool_mode=session pool_size=1',
		xact_pool => 'pool_mode=transaction pool_size=1',
	});
$bouncer->start;
note 'PgBouncer on 127.0.0.1:' . $bouncer->port;

sub try_on_b
{
	my ($sql) = @_;
	return $node_b->safe_psql('postgres', $sql);
}

# 1. Session pooling: the first client takes locks of every kind and an
#    advisory lock, and leaves without releasing them.
my $first = $bouncer->session('session_pool', 'first_client');
my $pid = $first->query_safe('SELECT pg_backend_pid()');
is( $first->query_safe(q{
SELECT zk_lock_acquire('pooled') AND zk_lock_acquire('pooled')
       AND zk_lock_acquire_shared('pooled-shared')
       AND zk_semaphore_acquire('pooled-sem', 1)
       AND pg_try_advisory_lock(7)}),
	't', 'first client: exclusive (twice), shared, semaphore and advisory locks');
my $zk_session = $first->query_safe('SELECT session_id FROM zk_session()');
is(try_on_b(q{SELECT zk_lock_try_acquire('pooled')}), 'f', 'node_b cannot take it');
$first->quit;

# The next client gets the same server connection, after DISCARD ALL.
my $second = $bouncer->session('session_pool', 'second_client');
is($second->query_safe('SELECT pg_backend_pid()'), $pid,
	'second client: the same server connection (pool size 1)');
is($second->query_safe('SELECT count(*) FROM zk_locks'), '0',
	'it inherits no zklock lock');
is( $second->query_safe(
		q{SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()}),
	'0', '... and no advisory lock');
is($second->query_safe('SELECT session_id || state || locks FROM zk_session()'),
	"${zk_session}connected0",
	'the backend kept its ZooKeeper session: DISCARD ALL released the locks');
is( try_on_b(q{
SELECT zk_lock_try_acquire('pooled') AND zk_lock_try_acquire('pooled-shared')
       AND zk_semaphore_acquire('pooled-sem', 1, 0)}),
	't', 'node_b takes all three at once');
$second->quit;
no_orphans_ok($zk, 'after session pooling: no znode without a live owner');

# 2. A lock lost while its client was connected: DISCARD ALL reports it and
#    still succeeds.  Were its commit to fail, DISCARD ALL would be rolled
#    back, settings and all, and PgBouncer (which ignores a failed reset
#    query) would hand the next client a session that is not reset.  The client
#    sends nothing once ZooKeeper is frozen: any statement would report the
#    loss itself (and fail its commit, see 011), leaving DISCARD ALL nothing
#    to find.
my $third = $bouncer->session('session_pool', 'third_client');
is($third->query_safe('SELECT pg_backend_pid()'), $pid, 'third client, same server');
$third->query_safe(q{SET work_mem = '7MB'});
$third->query_safe(q{SELECT zk_lock_acquire('pooled-lost')});
$zk->signal($_, 'STOP') for $zk->running;
# Longer than the session timeout: the backend's clock judges the session lost.
sleep_for(2 * $session_timeout_ms / 1000);
$third->quit;
my $fourth = $bouncer->session('session_pool', 'fourth_client');
is($fourth->query_safe('SELECT pg_backend_pid()'), $pid,
	'fourth client: still the same server connection');
is($fourth->query_safe('SHOW work_mem'), $node_a->safe_psql('postgres', 'SHOW work_mem'),
	"the third client's setting was reset: DISCARD ALL took effect");
is($fourth->query_safe('SELECT count(*) FROM zk_locks'), '0', 'holding nothing');
$zk->signal($_, 'CONT') for $zk->running;
$zk->wait_serving;
is($fourth->query_safe(q{SELECT zk_lock_acquire('pooled-lost', 30000)}), 't',
	'the lost lock can be taken again once ZooKeeper is back');
$fourth->query_safe(q{SELECT zk_lock_release('pooled-lost')});
$fourth->quit;
my $log = slurp_file($node_a->logfile);
like($log, qr/\[$pid\] \S* ?WARNING:  zklock lock "pooled-lost" was lost/,
	"PgBouncer's DISCARD ALL, the only statement in between, reported the lost lock");
unlike($log, qr/was lost before the transaction committed/,
	'the commit of DISCARD ALL did not fail for it');

# 3. Transaction pooling: a transaction lock holds for the transaction and
#    goes at its end, whichever client the server connection serves next.
my $tx1 = $bouncer->session('xact_pool', 'xact_client_1');
my $tx2 = $bouncer->session('xact_pool', 'xact_client_2');
$tx1->query_safe('BEGIN');
is($tx1->query_safe(q{SELECT zk_lock_xact_acquire('pooled-xact')}), 't',
	'transaction pooling: a transaction lock');
my $tx_pid = $tx1->query_safe('SELECT pg_backend_pid()');
is(try_on_b(q{SELECT zk_lock_try_acquire('pooled-xact')}), 'f',
	'node_b cannot take it while the transaction runs');
$tx1->query_safe('COMMIT');
is(try_on_b(q{SELECT zk_lock_try_acquire('pooled-xact')}), 't',
	'free on node_b once it committed');
is($tx2->query_safe(q{SELECT zk_lock_xact_try_acquire('pooled-xact2') || ' ' || pg_backend_pid()}),
	"true $tx_pid", 'another client, same server connection: a one-statement transaction lock');
is(try_on_b(q{SELECT zk_lock_try_acquire('pooled-xact2')}), 't',
	'gone with that statement');
is($tx2->query_safe('SELECT count(*) FROM zk_locks'), '0',
	'nothing is left on the server connection');

# A session lock taken through transaction pooling stays with the server
# connection, which the next transaction of any client may be given: the
# other client sees it, and may release it.  This is why the README says
# to use zk_lock_xact_* through transaction pooling.
is($tx1->query_safe(q{SELECT zk_lock_acquire('pooled-session')}), 't',
	'transaction pooling: client 1 takes a session lock');
is($tx2->query_safe(q{SELECT name FROM zk_locks}), 'pooled-session',
	'client 2, on the same server connection, holds it too');
is($tx2->query_safe(q{SELECT zk_lock_release_all()}), '1', '... and can release it');
$tx1->quit;
$tx2->quit;

diag 'PgBouncer log:', "\n", slurp_file($bouncer->log_file)
  unless Test::More->builder->is_passing;
$bouncer->stop;
finish_checks($zk, [ $node_a, $node_b ]);
done_testing();
