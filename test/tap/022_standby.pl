
# zklock on a hot standby: a streaming standby of one node (CREATE EXTENSION
# ran on its primary and was replicated) takes, holds and releases session,
# transaction and shared locks and semaphores, reads queues and statistics,
# and its locks exclude node_b, another server on the same ensemble, and the
# primary; node_b's locks exclude the standby.  Nothing of this writes to
# the database, so nothing needs the primary.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use ZklockTest;

my $zk = start_zk();

# Statistics need the library preloaded: on the standby too.
my %conf = (shared_preload_libraries => 'zklock');
my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
zk_configure($primary, $zk, %conf);
$primary->start;
$primary->safe_psql('postgres', 'CREATE EXTENSION zklock');
$primary->backup('backup');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'backup', has_streaming => 1);
zk_configure($standby, $zk, %conf);
$standby->start;
$primary->wait_for_catchup($standby);
my $node_b = zk_node('node_b', $zk);

is($standby->safe_psql('postgres',
		q{SELECT pg_is_in_recovery() || ' ' || (extversion = default_version)
		    FROM pg_extension JOIN pg_available_extensions ON name = extname
		   WHERE extname = 'zklock'}),
	'true true', 'the standby is in recovery and has the replicated extension');

# Try a lock on $node, and let go at once: a disconnect alone would free it
# only a moment after psql returns.
sub try_on
{
	my ($node, $lock) = @_;
	my $out = $node->safe_psql('postgres',
		qq{SELECT zk_lock_try_acquire('$lock'); SELECT zk_lock_release_all()});
	return (split /\n/, $out)[0];
}

# 1. Session locks on the standby.
my $s = session($standby, 'standby_holder');
is($s->query_safe(q{SELECT zk_lock_acquire('standby-lock')}), 't',
	'the standby takes a session lock');
is($s->query_safe(q{SELECT zk_lock_acquire('standby-lock', 0)}), 't', '... and again (reentrant)');
is($s->query_safe(q{SELECT name || ' ' || scope || ' ' || hold_count || ' ' || state FROM zk_locks}),
	'standby-lock session 2 held', 'zk_locks on the standby');
is(try_on($node_b, 'standby-lock'), 'f', 'node_b cannot take it');
is(try_on($primary, 'standby-lock'), 'f', 'nor can the primary');
is( $node_b->safe_psql('postgres',
		q{SELECT cluster_name || ' ' || application_name || ' ' || holding
		    FROM zk_lock_holders('standby-lock')}),
	'standby standby_holder true', 'node_b sees the standby holding it');
is($s->query_safe(q{SELECT zk_lock_release('standby-lock') AND zk_lock_release('standby-lock')}),
	't', 'the standby releases it');
is(try_on($node_b, 'standby-lock'), 't', 'then node_b gets it at once');

# 2. Transaction locks on the standby (read-only transactions), at commit
#    and at rollback, and shared locks and semaphores.
$s->query_safe('BEGIN');
is($s->query_safe(q{SELECT zk_lock_xact_acquire('standby-xact')}), 't',
	'the standby takes a transaction lock');
is(try_on($node_b, 'standby-xact'), 'f', 'node_b cannot take it');
$s->query_safe('COMMIT');
is(try_on($node_b, 'standby-xact'), 't', 'free once the standby committed');
$s->query_safe('BEGIN');
is($s->query_safe(q{SELECT zk_lock_xact_try_acquire('standby-xact') AND zk_lock_acquire('standby-undone')}),
	't', 'a transaction lock and a session lock in a transaction');
$s->query_safe('ROLLBACK');
is($s->query_safe('SELECT count(*) FROM zk_locks'), '0', 'both gone at rollback');
is(try_on($node_b, 'standby-xact') . try_on($node_b, 'standby-undone'), 'tt',
	'and free for node_b');
is( $s->query_safe(q{SELECT zk_lock_acquire_shared('standby-shared')
                        AND zk_semaphore_acquire('standby-sem', 1)}),
	't', 'a shared lock and a semaphore on the standby');
is( $node_b->safe_psql('postgres', q{
SELECT zk_lock_try_acquire_shared('standby-shared'), zk_lock_release_shared('standby-shared')}),
	't|t', 'node_b shares the shared lock');
is(try_on($node_b, 'standby-shared'), 'f', 'but cannot take it exclusively');
is( $node_b->safe_psql('postgres', q{SELECT zk_semaphore_acquire('standby-sem', 1, 0)}),
	'f', 'nor the semaphore');
is($s->query_safe(q{SELECT zk_lock_release_all()}), '2', 'the standby releases both');

# 3. The other way: node_b's lock excludes the standby, which waits for it
#    and is granted when node_b lets go.
my $b_holder = session($node_b, 'b_holder');
$b_holder->query_safe(q{SELECT zk_lock_acquire('reverse')});
is($s->query_safe(q{SELECT zk_lock_try_acquire('reverse')}), 'f',
	'the standby cannot take a lock node_b holds');
send_query($s, q{SELECT 'granted', zk_lock_xact_acquire('reverse', 30000)}, 'reverse-done');
ok(wait_for_wait_event($standby, 'standby_holder'), 'the standby waits for it');
is( $standby->safe_psql('postgres',
		q{SELECT string_agg(cluster_name || ':' || holding, ' ' ORDER BY position)
		    FROM zk_cluster_locks WHERE lock_name = 'reverse'}),
	'node_b:true standby:false', 'zk_cluster_locks on the standby shows the queue');
$b_holder->query_safe(q{SELECT zk_lock_release('reverse')});
like(wait_marker($s, 'reverse-done'), qr/granted\|t/, 'the standby gets it once node_b releases');
is(try_on($node_b, 'reverse'), 't', 'its one-statement transaction lock is gone');

# 4. DISCARD ALL on the standby, and a disconnect, release what it holds.
$s->query_safe(q{SELECT zk_lock_acquire('standby-discard')});
$s->query_safe('DISCARD ALL');
is(try_on($node_b, 'standby-discard'), 't', 'DISCARD ALL on the standby released its lock');
$s->query_safe(q{SELECT zk_lock_acquire('standby-quit')});
$s->quit;
is( $node_b->safe_psql('postgres', q{SELECT zk_lock_acquire('standby-quit', 5000)}),
	't', 'a standby backend that disconnects frees its lock');

# 5. Statistics are kept on the standby as on any server.
is( $standby->safe_psql('postgres',
		q{SELECT acquisitions || ' ' || try_failures FROM zk_lock_stats WHERE name = 'reverse'}),
	'1 1', "the standby's statistics");
is($standby->safe_psql('postgres', q{SELECT sessions_opened > 0 FROM zk_session_stats}),
	't', 'and its session statistics');
# Readable by an ordinary role (created on the primary, replicated).
$primary->safe_psql('postgres', 'CREATE ROLE zk_reader');
$primary->wait_for_catchup($standby);
is( $standby->safe_psql('postgres', q{
SET ROLE zk_reader;
SELECT (SELECT count(*) > 0 FROM zk_lock_stats)::text || ' '
       || (SELECT count(*) FROM zk_session_stats)::text}),
	'true 1', 'an ordinary role reads the statistics on the standby');

$b_holder->quit;
finish_checks($zk, [ $standby, $primary, $node_b ]);
done_testing();
