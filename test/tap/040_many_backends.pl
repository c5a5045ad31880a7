
# One ZooKeeper session per PostgreSQL server (issue 18, items 1 and 8): as
# many backends as max_connections allows here (500) hold distinct locks at
# once, against a ZooKeeper server with its default maxClientCnxns (60
# connections per client address): every one is granted, through one
# connection and one session.  No backend runs a thread besides its own; the
# session worker neither.  When they all disconnect, nothing is left behind.
#
# Runs alone: 500 backends.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

use ZklockTest;

my $backends = 500;
my $zk = start_zk(max_client_cnxns => 60);
my $node = zk_node('node_a', $zk, max_connections => $backends + 20);
# The many backends are dblink's connections from a few coordinators.
$node->safe_psql('postgres', 'CREATE EXTENSION dblink');
# Every backend asks at once (dblink_send_query), then every answer is read;
# five coordinators open a hundred each.
my $t0 = time;
my $coord = dblink_send_many($node, $backends, 5, 'many',
	q{'SELECT zk_lock_acquire(''many-' || i || ''', 60000)'});
my $granted = dblink_true_count($coord, $backends);
my $took = elapsed_since($t0);
is($granted, $backends, "all $backends backends were granted their lock");
note sprintf('%d backends connected and granted in %.1f s', $backends, $took);

# They hold their locks now: one connection, one session for all of them.
is($node->safe_psql('postgres', q{SELECT count(*) FROM zk_cluster_locks WHERE lock_name LIKE 'many-%' AND holding}),
	$backends, 'the cluster view shows every one holding');
my $cons = $zk->flw(1, 'cons') // '';
my %sids;
$sids{ lc $1 } = 1 while $cons =~ /sid=(0x[0-9a-fA-F]+)/g;
my $session = $node->safe_psql('postgres', 'SELECT session_id FROM zk_session()');
is_deeply([ sort keys %sids ], [ lc $session ],
	'ZooKeeper sees one session, the session worker\'s');
my $connections = () = $cons =~ /^\s*\/127\.0\.0\.1:\d+\[/mg;
is($connections, 2, 'and two connections: the worker\'s and this cons');

# Threads: each backend runs only its own; the worker too.
my @pids = split /\n/, $node->safe_psql('postgres',
	q{SELECT pid FROM pg_stat_activity WHERE application_name LIKE 'many%'});
is(scalar @pids, $backends, "$backends backends to look at");
my @threaded = grep { my @t = glob("/proc/$_/task/*"); @t != 1 } @pids;
is(scalar @threaded, 0, 'no backend runs a thread besides its own');
my $worker = worker_pid($node);
my @worker_tasks = glob("/proc/$worker/task/*");
is(scalar @worker_tasks, 1, 'the session worker runs one thread');

# All of them go; their nodes go with them.
$_->quit for @$coord;
tree_empty_ok($zk, 'every lock node went with its backend', 30);

finish_checks($zk, [$node]);
done_testing();
