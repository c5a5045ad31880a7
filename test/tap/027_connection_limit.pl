
# ZooKeeper's limit on connections per client address (maxClientCnxns).
# Every backend that uses zklock holds one session; beyond the limit the
# server accepts and at once closes each connection.  The backend that
# cannot get a session fails with 08001 within zklock.connect_timeout, with
# a HINT naming maxClientCnxns rather than a generic timeout, and gets its
# session once a place is free.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

use ZklockTest;

my $zk = start_zk(max_client_cnxns => 3);
my $node = zk_node('node_a', $zk, 'zklock.connect_timeout' => 1500);

my @holders = map { session($node, "holder$_") } 1 .. 3;
is($_->query_safe(q{SELECT zk_lock_try_acquire('limit' || pg_backend_pid())}), 't',
	'a backend within the limit gets a session') for @holders;

my $late = session($node, 'late');
my $t0 = time;
$late->query(q{SELECT zk_lock_try_acquire('late')});
my $took = time - $t0;
like($late->{stderr}, qr/ERROR:  could not connect to ZooKeeper at/, 'the backend beyond the limit fails');
like($late->{stderr}, qr/DETAIL:  The servers accepted a connection and closed it before establishing a session/,
	'saying that the server closed its connections');
like($late->{stderr}, qr/HINT:  .*maxClientCnxns/, 'with a hint naming maxClientCnxns');
cmp_ok($took, '<', 1.5 + 1, sprintf('within zklock.connect_timeout (%.2f s)', $took));
$late->{stderr} = '';
# The same call's SQLSTATE.
$late->query_safe(q{
CREATE FUNCTION sqlstate_of(sql text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE sql;
  RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
  RETURN SQLSTATE;
END $$});
is($late->query_safe(q{SELECT sqlstate_of($$SELECT zk_lock_try_acquire('late')$$)}), '08001',
	'SQLSTATE 08001');

# A place frees up.
$holders[0]->quit;
my $got;
for (1 .. 50)
{
	$got = $late->query_safe(q{SELECT sqlstate_of($$SELECT zk_lock_try_acquire('late')$$)});
	last if $got eq 'ok';
	sleep 0.2;
}
is($got, 'ok', 'once another backend leaves, the late one gets its session');
$late->query_safe(q{SELECT zk_lock_release_all()});
$late->quit;
$_->quit for @holders[ 1 .. 2 ];

finish_checks($zk, [$node]);
done_testing();
