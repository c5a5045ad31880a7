
# Handoff across nodes, and release by disconnect: a waiter on one node gets
# the lock as soon as the holder on the other node releases it, disconnects
# or is terminated, long before the ZooKeeper session timeout would have
# freed it.
#
# Runs alone: a waiter's grant is bounded at 2 s.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

use ZklockTest;

my $session_timeout_ms = 10000;
my $zk = start_zk();
my ($node_a, $node_b) =
  map { zk_node($_, $zk, 'zklock.session_timeout' => $session_timeout_ms) }
  qw(node_a node_b);

# Start a waiter on node_b for the lock "handoff"; it prints when it has it.
sub start_waiter
{
	my ($appname) = @_;
	my $waiter = $node_b->background_psql('postgres', timeout => 60);
	$waiter->query_safe("SET application_name = '$appname'");
	$waiter->{stdin} .=
	  "SELECT 'granted', zk_lock_acquire('handoff'), zk_lock_token('handoff');\n";
	$waiter->{run}->pump_nb;
	ok(wait_for_wait_event($node_b, $appname),
		"$appname waits, visible in pg_stat_activity as Extension/"
		  . zklock_wait_event($node_b));
	return $waiter;
}

sub waiter_granted_within
{
	my ($waiter, $t0, $limit, $what) = @_;
	my $out = $waiter->query_until(qr/granted/, '');
	my $elapsed = elapsed_since($t0);
	like($out, qr/granted\|t\|\d+/, "$what: the waiter got the lock");
	cmp_ok($elapsed, '<', $limit,
		sprintf("$what: within %.1f s (took %.3f s)", $limit, $elapsed));
	return;
}

# 1. Explicit release on node_a hands the lock to node_b.
my $holder = $node_a->background_psql('postgres');
$holder->query_safe(q{SELECT zk_lock_acquire('handoff')});
my $holder_token = $holder->query_safe(q{SELECT zk_lock_token('handoff')});
my $waiter = start_waiter('handoff_waiter');
is($node_b->safe_psql('postgres', q{SELECT zk_lock_try_acquire('handoff')}),
	'f', 'a third session cannot take it meanwhile');
my $t0 = time;
$holder->query_safe(q{SELECT zk_lock_release('handoff')});
waiter_granted_within($waiter, $t0, 2, 'release on the other node');
my $waiter_token = $waiter->query_safe(q{SELECT zk_lock_token('handoff')});
cmp_ok($waiter_token, '>', $holder_token, 'the new holder has a larger token');
$waiter->quit;
$holder->quit;
no_orphans_ok($zk, 'after handoff: no znode without a live owner');

# 2. The holder's client disconnects: its backend closes its ZooKeeper
#    session on the way out, which deletes its node at once.
$holder = $node_a->background_psql('postgres');
$holder->query_safe(q{SELECT zk_lock_acquire('handoff')});
$waiter = start_waiter('disconnect_waiter');
$t0 = time;
$holder->quit;
waiter_granted_within($waiter, $t0, $session_timeout_ms / 1000 / 4,
	'holder disconnected');
$waiter->quit;

# 3. pg_terminate_backend of the holder, the same.
$holder = $node_a->background_psql('postgres');
$holder->query_safe(q{SET application_name = 'terminated_holder'});
$holder->query_safe(q{SELECT zk_lock_acquire('handoff')});
$waiter = start_waiter('terminate_waiter');
$t0 = time;
is( $node_a->safe_psql('postgres',
		q{SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		   WHERE application_name = 'terminated_holder'}),
	't', 'holder terminated');
waiter_granted_within($waiter, $t0, $session_timeout_ms / 1000 / 4,
	'holder terminated');
$waiter->quit;
eval { $holder->quit };

# 4. pg_terminate_backend of a waiter: it leaves the queue at once, and the
#    waiter behind it is next.
$holder = $node_a->background_psql('postgres');
$holder->query_safe(q{SELECT zk_lock_acquire('handoff')});
my $doomed = $node_a->background_psql('postgres');
$doomed->query_safe(q{SET application_name = 'doomed_waiter'});
$doomed->{stdin} .= "SELECT zk_lock_acquire('handoff');\n";
$doomed->{run}->pump_nb;
ok(wait_for_wait_event($node_a, 'doomed_waiter'), 'first waiter queued');
$waiter = start_waiter('second_waiter');
$node_a->safe_psql('postgres',
	q{SELECT pg_terminate_backend(pid) FROM pg_stat_activity
	   WHERE application_name = 'doomed_waiter'});
$t0 = time;
$holder->query_safe(q{SELECT zk_lock_release('handoff')});
waiter_granted_within($waiter, $t0, 2, 'terminated waiter skipped');
$waiter->quit;
$holder->quit;
eval { $doomed->quit };

finish_checks($zk, [ $node_a, $node_b ]);
done_testing();
