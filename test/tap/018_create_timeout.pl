
# Fault injection 4c: the server freezes while a create is in flight, long
# enough for the client to give up on the reply (ZOPERATIONTIMEOUT, after two
# thirds of the session timeout) but not for the session to expire.  The
# server may still carry the create out when it resumes.  Like a lost reply,
# that must be resolved after the reconnect (the node adopted, or created
# again), never raised as an error that leaves the node behind to block the
# lock for as long as the backend lives.  zklock.connect_timeout, which
# bounds the acquisition's own round trips, is set above the freeze.
#
# Runs alone: the client must reconnect within 1.5 s of the servers' resume.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep time);

use ZklockTest;

my $session_timeout_ms = 9000;
my $freeze_s = 7.5;
my $zk = start_zk();
my ($node_a, $node_b) =
  map { zk_node($_, $zk, 'zklock.session_timeout' => $session_timeout_ms,
	  'zklock.connect_timeout' => 15000) }
  qw(node_a node_b);

my $holder = session($node_b, 'holder');
$holder->query_safe(q{SELECT zk_lock_acquire('frozen_create')});

my $s = session($node_a, 'acquirer');
# Session open and the lock's parent known: the create is the next request.
is($s->query_safe(q{SELECT zk_lock_try_acquire('frozen_create')}), 'f', 'the lock is held');
my $session_id = zk_session_field($s, 'session_id');

my $log_offset = -s $node_a->logfile;
my $t0 = time;
$zk->signal($_, 'STOP') for $zk->running;
send_query($s, q{SELECT zk_lock_acquire('frozen_create', 60000) AS got}, 'acquired');
sleep_for($freeze_s - elapsed_since($t0)) if elapsed_since($t0) < $freeze_s;
$zk->signal($_, 'CONT') for $zk->running;
note sprintf('server resumed after %.2f s', elapsed_since($t0));

# The acquirer is busy; watch it from outside.
my $queued = 0;
for (1 .. 200)
{
	$queued = scalar @{ queue_nodes($zk, 'frozen_create') };
	last if $queued == 2;
	sleep 0.1;
}
is($queued, 2, 'the queue holds the holder and exactly one node of the acquirer');
like(slurp_file($node_a->logfile, $log_offset),
	qr/the reply to creating .* was lost/,
	'the create timed out and was resolved after the reconnect');

$holder->query_safe(q{SELECT zk_lock_release('frozen_create')});
my $out = wait_marker($s, 'acquired');
like($out, qr/^t$/m, 'the acquirer gets the lock once it is released');
is($s->{stderr}, '', 'without an error') or diag $s->{stderr};
is($s->query_safe(q{SELECT count(*) FROM zk_locks}), '1', 'and holds it once');
is(scalar @{ queue_nodes($zk, 'frozen_create') }, 1, 'with a single node');
is(zk_session_field($s, 'session_id'), $session_id, 'on the session it had');
$s->query_safe(q{SELECT zk_lock_release('frozen_create')});
is(scalar @{ queue_nodes($zk, 'frozen_create') }, 0, 'released, nothing is left');
is($holder->query_safe(q{SELECT zk_lock_try_acquire('frozen_create')}), 't',
	'so the next one can take it');
$holder->query_safe(q{SELECT zk_lock_release('frozen_create')});
$s->quit;
$holder->quit;

finish_checks($zk, [ $node_a, $node_b ]);
done_testing();
