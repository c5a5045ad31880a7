
# A session whose locks were written off must never come back.
#
# The holder's ZooKeeper servers all freeze for longer than the session
# timeout, so its local clock writes its locks off: the next zklock call
# reports each with a WARNING.  Here the client reads slowly, so those
# WARNINGs block the backend, and meanwhile the ensemble comes back with a
# new leader, which gives every session a fresh timeout: the holder's client
# could reconnect with the same session.  It must not: the backend wrote the
# session off before the first WARNING, the session worker closed it, so its
# nodes go, and another node gets the locks.  (It used to be re-checked only after the WARNINGs, found
# connected, and kept, with all its forgotten nodes at the head of their
# queues until the backend exited.)

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep time);

use ZklockTest;

my $nlocks = 1500;
my $zk = start_zk(servers => 3);
my $node_a = zk_node('node_a', $zk, 'zklock.session_timeout' => 4000);
my $node_b = zk_node('node_b', $zk, 'zklock.session_timeout' => 4000);

my $holder = session($node_a, 'holder');
# Long names make long WARNINGs: about 500 bytes each.
my $prefix = 'w' x 240;
$holder->query_safe(qq{
DO \$\$ BEGIN
  FOR i IN 1..$nlocks LOOP PERFORM zk_lock_acquire('$prefix' || i); END LOOP;
END \$\$});
is($holder->query_safe('SELECT count(*) FROM zk_locks'), $nlocks, "the holder holds $nlocks locks");

my $old_session = $holder->query_safe('SELECT session_id FROM zk_session()');
my $leader = $zk->leader;
$zk->signal($_, 'STOP') for $zk->running;

# The client notices the silence after 2/3 of the session timeout.  A
# statement that writes (txid_current() takes a transaction ID) then waits
# at COMMIT for the verdict on the session, which the local clock gives once
# the session timeout has passed since, and writes the locks off.  Its
# client does not read the WARNINGs for now, so the backend blocks sending
# them.
sleep_for(3.5);
send_query($holder, qq{SELECT zk_lock_token('${prefix}1'), txid_current()}, 'written_off');
sleep_for(6);

# A new leader, with fresh session timeouts for everybody.
$zk->kill9($leader);
$zk->signal($_, 'CONT') for $zk->running;
$zk->wait_serving;
note "servers back, server $leader gone";

# Long enough for the old session to reconnect if its handle were open,
# and for the server to expire it if it is not.
sleep_for(8);
wait_marker($holder, 'written_off');
my $told = $holder->{stderr};
# The rest of what the statement printed comes with the next one.
$holder->query('SELECT 1');
$told .= $holder->{stderr};
$holder->{stderr} = '';
like($told, qr/zklock lock "${prefix}1" was lost/, 'the holder is told its locks were lost');
is($holder->query_safe('SELECT count(*) FROM zk_locks'), '0', 'and holds none any more');
isnt($holder->query_safe('SELECT session_id FROM zk_session()'), $old_session,
	'its lost session was closed: the server has another one');

my $other = session($node_b, 'other');
my $t0 = time;
my $got = 0;
while (time - $t0 < 20)
{
	$got = $other->query_safe(qq{SELECT zk_lock_try_acquire('${prefix}1') AND zk_lock_try_acquire('${prefix}$nlocks')}) eq 't';
	last if $got;
	sleep 0.2;
}
ok($got, 'another node gets the written-off locks: the old session did not come back');
$other->query_safe('SELECT zk_lock_release_all()');
$other->quit;
$holder->quit;

finish_checks($zk, [ $node_a, $node_b ]);
done_testing();
