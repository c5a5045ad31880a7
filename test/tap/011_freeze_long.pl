
# Fault injection 2: every server of the ensemble freezes (SIGSTOP) for
# longer than the session timeout while a transaction on node_a holds a
# lock.  The holder cannot know whether its session survives: its COMMIT
# waits for a verdict and fails once the session must have expired, so its
# work rolls back.  After the servers resume, node_b gets the lock, and
# node_a's next acquire works on a new session.
#
# Runs alone: it must see the session suspended within a third of a 4 s
# timeout.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep time);

use ZklockTest;

my $session_timeout_ms = 4000;
my $zk = start_zk(servers => 3);
my ($node_a, $node_b) =
  map { zk_node($_, $zk, 'zklock.session_timeout' => $session_timeout_ms) }
  qw(node_a node_b);
install_cs_log($_) for $node_a, $node_b;

my $holder = session($node_a, 'holder');
$holder->query_safe('\set VERBOSITY verbose');
$holder->query_safe(cs_begin_sql('frozen', 'holder'));
my $old_session = zk_session_field($holder, 'session_id');

my $t0 = freeze_until_suspended($zk, $holder, 'frozen');

send_query($holder, cs_end_sql('holder'), 'commit-done');
wait_marker($holder, 'commit-done');
my $failed_after = elapsed_since($t0);
like($holder->{stderr}, qr/WARNING:  08006: zklock lock "frozen" was lost/,
	'COMMIT reports the lost lock');
like($holder->{stderr},
	qr/ERROR:  40001: zklock lock "frozen" was lost before the transaction committed/,
	'COMMIT fails with SQLSTATE 40001');
note sprintf('COMMIT failed %.2f s after the freeze', $failed_after);
cmp_ok($failed_after, '>=', $session_timeout_ms / 1000,
	'it waited at least the session timeout for a verdict');
$holder->{stderr} = '';

my $t1 = time;
$zk->signal($_, 'CONT') for $zk->running;
$zk->wait_serving;

my $other = session($node_b, 'other');
# node_b's session worker lost its session in the freeze too: its new one
# may take a few seconds after the servers are back (their election, the
# client's back-off after trying them all), more than connect_timeout's 5 s.
$other->query_safe(q{SET zklock.connect_timeout = '20s'});
my ($out, $err) = $other->query(cs_waiter_sql('frozen', 'other', 30000));
is($err, 0, 'node_b gets the lock once the servers are back') or diag $other->{stderr};
note sprintf('servers resumed: node_b got the lock %.2f s later', elapsed_since($t1));
is($node_b->safe_psql('postgres', q{SELECT count(*) FROM cs WHERE worker = 'other'}),
	'1', "node_b's critical section committed");
is($node_a->safe_psql('postgres', q{SELECT count(*) FROM cs WHERE worker = 'holder'}),
	'0', "the holder's work was rolled back");

is($holder->query_safe(q{SELECT count(*) FROM zk_locks}), '0', 'holder holds nothing now');
is($holder->query_safe(q{SELECT zk_lock_acquire('after', 10000)}), 't',
	"holder's next acquire works");
isnt(zk_session_field($holder, 'session_id'), $old_session, '... on a new session');
is(zk_session_field($holder, 'state'), 'connected', '... which is connected');
$holder->query_safe(q{SELECT zk_lock_release('after')});
$holder->quit;
$other->quit;

check_critical_sections($node_a, $node_b);
finish_checks($zk, [ $node_a, $node_b ]);
done_testing();
