
# ZooKeeper unreachable: an acquire fails with SQLSTATE class 08, naming the
# hosts, within zklock.connect_timeout, and leaves nothing behind.  Once the
# servers are back and the session worker has its session, the same
# PostgreSQL session locks again.
#
# Runs alone: each call must fail within the connect timeout plus 1.5 s.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

use ZklockTest;

my $zk = ZkServer->new;    # configured, not yet running
my $connect_timeout_ms = 1500;
my $node = zk_node('node_a', $zk, 'zklock.connect_timeout' => $connect_timeout_ms);
my $hosts = $zk->hosts;

my $session = $node->background_psql('postgres', on_error_stop => 0);
for my $call (q{zk_lock_acquire('down')}, q{zk_lock_try_acquire('down')},
	q{zk_lock_xact_acquire('down', 100)})
{
	my $t0 = time;
	my ($out, $failed) = $session->query(qq{
DO \$\$
BEGIN
  PERFORM $call;
EXCEPTION WHEN OTHERS THEN
  RAISE WARNING 'sqlstate=% message=%', SQLSTATE, SQLERRM;
END \$\$});
	my $elapsed = elapsed_since($t0);
	like($session->{stderr}, qr/sqlstate=08001 message=could not connect to ZooKeeper at "\Q$hosts\E"/,
		"$call: class 08 error naming the hosts");
	cmp_ok($elapsed, '<', $connect_timeout_ms / 1000 + 1.5,
		sprintf("$call: within connect_timeout (%.2f s)", $elapsed));
	$session->{stderr} = '';
}
is($session->query_safe('SELECT count(*) FROM zk_locks'), '0', 'nothing held');

$zk->start;
ok(defined wait_worker_session($node), 'the session worker connects once ZooKeeper is up');
is($session->query_safe(q{SELECT zk_lock_acquire('down')}), 't',
	'same PostgreSQL session locks once ZooKeeper is up');
is(scalar @{ $zk->ephemerals(ZK_ROOT) }, 1, 'exactly one lock node exists');
$session->query_safe(q{SELECT zk_lock_release('down')});
tree_empty_ok($zk, 'released: no lock node left');
$session->quit;

$node->stop;
$zk->stop;
done_testing();
