
# Fault injection 3: every server freezes (SIGSTOP) for less than the session
# timeout while a transaction on node_a holds a lock.  The holder notices the
# silence and its COMMIT waits; the servers resume, the client reconnects
# with the same session, and the COMMIT succeeds.
#
# The client notices silence after 2/3 of the timeout, the server expires a
# session a full timeout after it last heard from it.  So the holder talks to
# ZooKeeper right before the freeze, and the freeze lasts 3/4 of the timeout.
#
# Runs alone: the client must reconnect within 2.5 s of the servers' resume.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep time);

use ZklockTest;

my $session_timeout_ms = 10000;
my $freeze_s = $session_timeout_ms / 1000 * 3 / 4;
my $zk = start_zk(servers => 3);
my ($node_a, $node_b) =
  map { zk_node($_, $zk, 'zklock.session_timeout' => $session_timeout_ms) }
  qw(node_a node_b);
install_cs_log($_) for $node_a, $node_b;

my $holder = session($node_a, 'holder');
$holder->query_safe(cs_begin_sql('thaw', 'holder'));
my $session_id = zk_session_field($holder, 'session_id');

# Last contact right before the freeze.
$holder->query_safe(q{SELECT zk_lock_try_acquire('touch') AND zk_lock_release('touch')});
my $t0 = freeze_until_suspended($zk, $holder, 'thaw');

send_query($holder, cs_end_sql('holder'), 'commit-done');
sleep_for($freeze_s - elapsed_since($t0)) if elapsed_since($t0) < $freeze_s;
my $t1 = time;
$zk->signal($_, 'CONT') for $zk->running;
note sprintf('servers resumed after %.2f s', $t1 - $t0);

wait_marker($holder, 'commit-done');
note sprintf('COMMIT succeeded %.2f s after the servers resumed', elapsed_since($t1));
is($holder->{stderr}, '', 'COMMIT succeeds after the reconnect') or diag $holder->{stderr};
# The ensemble may elect a leader again once it resumes, which can cut the
# client off for a moment after the COMMIT; what matters is that it comes
# back on the same session.
ok(defined wait_session_state($holder, 'connected', $session_timeout_ms / 1000),
	'the session is connected');
is(zk_session_field($holder, 'session_id'), $session_id, 'and is the same session');
is($node_a->safe_psql('postgres', q{SELECT count(*) FROM cs WHERE worker = 'holder'}),
	'1', "the holder's work committed");

my $other = session($node_b, 'other');
my ($out, $err) = $other->query(cs_waiter_sql('thaw', 'other', 10000));
is($err, 0, 'node_b gets the lock after the commit') or diag $other->{stderr};
$holder->quit;
$other->quit;

check_critical_sections($node_a, $node_b);
finish_checks($zk, [ $node_a, $node_b ]);
done_testing();
