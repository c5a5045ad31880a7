
# ZooKeeper's limit on connections per client address (maxClientCnxns).  A
# PostgreSQL server holds one connection, its session worker's, whatever the
# number of its backends (040 takes 500 under the default limit of 60).
# Here the limit is 2 and two other clients from the same address hold both
# places: the server accepts the worker's connections and closes them at
# once.  An acquisition then fails with 08001 within
# zklock.connect_timeout, with a DETAIL saying that the server closed the
# connections and a HINT naming maxClientCnxns rather than a generic timeout;
# once a place is free, the worker gets its session and the same backend
# locks.
#
# Runs alone: a failure is bounded at the connect timeout plus 1 s.

use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

use ZklockTest;

my $zk = start_zk(max_client_cnxns => 2);
my $hosts = $zk->hosts;

# Two Kazoo clients that keep their connections until they are killed.
my $hog_code = <<'PY';
import sys, time
from kazoo.client import KazooClient
clients = [KazooClient(hosts=sys.argv[1]) for _ in range(2)]
for c in clients:
    c.start(timeout=10)
print('ready', flush=True)
while True:
    time.sleep(60)
PY
my $hog_out = '';
my $hog = IPC::Run::start([ 'python3', '-c', $hog_code, $hosts ],
	'<', \undef, '>', \$hog_out, '2>', \my $hog_err);
$hog->pump until $hog_out =~ /ready/ || !$hog->pumpable;
like($hog_out, qr/ready/, 'two other clients hold both places');

my $node = zk_node('node_a', $zk, 'zklock.connect_timeout' => 1500);
my $s = session($node, 'late');
my $t0 = time;
$s->query(q{SELECT zk_lock_try_acquire('late')});
my $took = time - $t0;
like($s->{stderr}, qr/ERROR:  could not connect to ZooKeeper at/, 'the server beyond the limit fails');
like($s->{stderr}, qr/DETAIL:  The servers accepted a connection and closed it before establishing a session/,
	'saying that the server closed its connections');
like($s->{stderr}, qr/HINT:  .*maxClientCnxns/, 'with a hint naming maxClientCnxns');
cmp_ok($took, '<', 1.5 + 1, sprintf('within zklock.connect_timeout (%.2f s)', $took));
$s->{stderr} = '';
$s->query_safe(q{
CREATE FUNCTION sqlstate_of(sql text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE sql;
  RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
  RETURN SQLSTATE;
END $$});
is($s->query_safe(q{SELECT sqlstate_of($$SELECT zk_lock_try_acquire('late')$$)}), '08001',
	'SQLSTATE 08001');

# A place frees up.
$hog->kill_kill;
ok(defined wait_worker_session($node), 'once the other clients leave, the worker gets its session');
is($s->query_safe(q{SELECT zk_lock_try_acquire('late') AND zk_lock_release('late')}), 't',
	'and the same backend locks');
$s->quit;

finish_checks($zk, [$node]);
done_testing();
