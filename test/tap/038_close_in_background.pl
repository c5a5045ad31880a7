
# Closing a ZooKeeper session never holds a statement up.  zookeeper_close
# waits for the server's answer, up to about 4.5 s, and nothing interrupts
# it; the session worker does it, and backends wait on their own latch, so
# they stay cancellable meanwhile.  Here the server is frozen (the client
# still believes it is connected) when a reload changes zklock.hosts, which
# makes the worker close the session: a call made meanwhile is cancelled by
# its statement_timeout on time, instead of after the close.  Once the
# servers are back, the backend locks again, on the worker's new session.
#
# Runs alone: a cancel is bounded at 2 s.

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
my $old = zk_session_field($s, 'session_id');

$zk->signal($_, 'STOP') for $zk->running;
my $hosts = $zk->hosts;
$node->append_conf('postgresql.conf', "zklock.hosts = '$hosts,127.0.0.1:1'\n");
$node->reload;
# The worker is inside zookeeper_close once it published the session's end.
$node->poll_query_until('postgres', q{SELECT state <> 'connected' FROM zk_session()});
my $t0 = time;
$s->query(q{SET statement_timeout = '500ms'; SELECT zk_lock_try_acquire('c')});
my $took = time - $t0;
like($s->{stderr}, qr/canceling statement due to statement timeout/,
	'a call while the worker closes the session is cancelled');
$s->{stderr} = '';
cmp_ok($took, '<', 2, sprintf('on time: %.2f s, not after the close', $took));
$zk->signal($_, 'CONT') for $zk->running;
$zk->wait_serving;

$s->query_safe(q{RESET statement_timeout});
ok(defined wait_worker_session($node), 'the worker has a new session');
isnt(zk_session_field($s, 'session_id'), $old, 'another one');
is($s->query_safe(q{SELECT zk_lock_try_acquire('c') AND zk_lock_release('c')}), 't',
	'the backend locks again on it');
$s->quit;
finish_checks($zk, [$node]);
done_testing();
