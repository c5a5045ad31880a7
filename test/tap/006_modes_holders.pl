
# Shared locks, semaphores and zk_lock_holders across two PostgreSQL nodes:
# readers on both nodes share, a writer waits for them all and a later
# reader waits behind it; a semaphore admits its permits from either node;
# and either node lists every holder and waiter, with who they are.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;

use ZklockTest;

my $zk = start_zk();
my ($node_a, $node_b) = map { zk_node($_, $zk) } qw(node_a node_b);

my $holders_sql = q{
SELECT string_agg(format('%s:%s:%s:%s:%s', position, mode,
                         CASE WHEN holding THEN 'holds' ELSE 'waits' END,
                         cluster_name, application_name), ' ' ORDER BY position)
  FROM zk_lock_holders('LOCK')};

sub holders
{
	my ($node, $lock) = @_;
	(my $sql = $holders_sql) =~ s/LOCK/$lock/;
	return $node->safe_psql('postgres', $sql);
}

# 1. Readers on both nodes share; a writer waits; a later reader waits too.
my $reader_a = session($node_a, 'reader_a');
my $reader_b = session($node_b, 'reader_b');
$reader_a->query_safe(q{SELECT zk_lock_acquire_shared('catalog')});
$reader_b->query_safe(q{SELECT zk_lock_acquire_shared('catalog')});
my $writer = session($node_a, 'writer');
send_query($writer, q{SELECT zk_lock_acquire('catalog')}, 'writer-granted');
ok(wait_for_wait_event($node_a, 'writer'), 'the writer waits for both readers');
my $late = session($node_b, 'late_reader');
send_query($late, q{SELECT zk_lock_acquire_shared('catalog')}, 'late-granted');
ok(wait_for_wait_event($node_b, 'late_reader'),
	'a reader that comes after the waiting writer waits too');

is(holders($node_b, 'catalog'),
	'1:shared:holds:node_a:reader_a 2:shared:holds:node_b:reader_b '
	  . '3:exclusive:waits:node_a:writer 4:shared:waits:node_b:late_reader',
	'node_b lists both readers holding, then the writer and the late reader waiting');
is(holders($node_a, 'catalog'), holders($node_b, 'catalog'),
	'node_a sees the same queue');
my $pid = $node_a->safe_psql('postgres',
	q{SELECT pid FROM pg_stat_activity WHERE application_name = 'writer'});
is($node_b->safe_psql('postgres', q{
SELECT pid || ' ' || database || ' ' || usename || ' ' || (host_port LIKE '%:' || }
	  . $node_a->port . q{) FROM zk_lock_holders('catalog') WHERE position = 3}),
	"$pid postgres postgres true",
	"the waiting writer's pid, database, user and host:port");

$reader_a->query_safe(q{SELECT zk_lock_release_shared('catalog')});
ok(still_waits($node_a, q{application_name = 'writer'}),
	'the writer still waits for the other reader');
$reader_b->query_safe(q{SELECT zk_lock_release_shared('catalog')});
wait_marker($writer, 'writer-granted');
pass('the writer gets the lock once both readers are gone');
is(holders($node_b, 'catalog'),
	'1:exclusive:holds:node_a:writer 2:shared:waits:node_b:late_reader',
	'the late reader still waits behind the writer');
$writer->query_safe(q{SELECT zk_lock_release('catalog')});
wait_marker($late, 'late-granted');
pass('then the late reader gets it');
$late->query_safe(q{SELECT zk_lock_release_shared('catalog')});

# 2. A semaphore of two permits across both nodes.
my @sem = map { session($_->[0], $_->[1]) }
  ([ $node_a, 'sem_1' ], [ $node_b, 'sem_2' ], [ $node_a, 'sem_3' ]);
$sem[0]->query_safe(q{SELECT zk_semaphore_acquire('uploads', 2)});
$sem[1]->query_safe(q{SELECT zk_semaphore_acquire('uploads', 2)});
is($node_b->safe_psql('postgres', q{SELECT zk_semaphore_acquire('uploads', 2, 0)}),
	'f', 'a third holder is refused');
send_query($sem[2], q{SELECT zk_semaphore_acquire('uploads', 2)}, 'sem-granted');
ok(wait_for_wait_event($node_a, 'sem_3'), 'and a third waits');
is(holders($node_b, 'uploads'),
	'1:semaphore:holds:node_a:sem_1 2:semaphore:holds:node_b:sem_2 '
	  . '3:semaphore:waits:node_a:sem_3',
	'two hold the semaphore, one waits');
my ($ret, $out, $err) = $node_b->psql('postgres',
	q{SELECT zk_semaphore_acquire('uploads', 3, 0)});
like($err, qr/zklock semaphore "uploads" is in use with 2 permits, not 3/,
	'other permits for the same semaphore are refused');
$sem[1]->quit;
wait_marker($sem[2], 'sem-granted');
pass('a holder disconnecting on node_b lets the waiter on node_a in');
$sem[0]->quit;
$sem[2]->quit;

$reader_a->quit;
$reader_b->quit;
$writer->quit;
$late->quit;
is($node_a->safe_psql('postgres', 'SELECT count(*) FROM zk_cluster_locks'), '0',
	'zk_cluster_locks is empty once everyone has gone');
finish_checks($zk, [ $node_a, $node_b ]);
done_testing();
