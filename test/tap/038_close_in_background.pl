
# Closing a ZooKeeper session never holds a statement up: zookeeper_close
# waits for the server's answer, up to 3 s, and nothing interrupts it.  So
# the backend closes a handle on a thread of its own and goes on; only at
# exit does it wait for the close to be sent.  Here the server is frozen
# (the client still believes it is connected) when a changed zklock.hosts
# makes the next call close the session: the call is cancelled by its
# statement_timeout on time, instead of after the close's 3 s.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

use ZklockTest;

my $zk = start_zk();
my $node = zk_node('node_a', $zk, 'zklock.session_timeout' => 10000);
my $s = session($node, 'closer');
$s->query_safe(q{SELECT zk_lock_try_acquire('c') AND zk_lock_release('c')});
is(zk_session_field($s, 'state'), 'connected', 'a session, holding nothing');

$zk->signal($_, 'STOP') for $zk->running;
my $t0 = time;
$s->query(q{SET zklock.hosts = '127.0.0.1:1'; SET statement_timeout = '500ms';
SELECT zk_lock_try_acquire('c')});
my $took = time - $t0;
like($s->{stderr}, qr/canceling statement due to statement timeout/,
	'the call that closes the old session and opens a new one is cancelled');
$s->{stderr} = '';
cmp_ok($took, '<', 2, sprintf('on time: %.2f s, not after the close\'s 3 s', $took));
$zk->signal($_, 'CONT') for $zk->running;
$zk->wait_serving;

$s->query_safe(q{RESET zklock.hosts; RESET statement_timeout});
is($s->query_safe(q{SELECT zk_lock_try_acquire('c') AND zk_lock_release('c')}), 't',
	'the backend locks again on a new session');
$s->quit;
finish_checks($zk, [$node]);
done_testing();
