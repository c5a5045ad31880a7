
# A release that is cancelled leaves the backend interruptible (issue 48.6).
# A release is quiet (the session worker does not interrupt it for a
# release request: revocation.c); 1.6 did not end the quiet section when a
# cancel ended the release's wait.  In a PL/pgSQL block that catches the
# cancel, the rest of the statement then never heard a release requested
# for another lock it held: no 57Z01 however long it ran.
#
# The holder (zklock.revocable = on) holds "kept" and "slow"; ZooKeeper is
# stopped, so that the release of "slow" waits for its answer, and the
# release is cancelled there.  ZooKeeper resumes, another node asks the
# holders of "kept" to let go: the block, still running, fails with 57Z01.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

use ZklockTest;

my $zk = start_zk();
my $node_a = zk_node('node_a', $zk,
	'zklock.connect_timeout' => 5000,
	'zklock.session_timeout' => 30000);
my $node_b = zk_node('node_b', $zk);

my $s = session($node_a, 'holder');
$s->query_safe('\set VERBOSITY verbose');
$s->query_safe(q{SET zklock.revocable = on});
$s->query_safe(q{SELECT zk_lock_acquire('kept'), zk_lock_acquire('slow')});

$zk->signal($_, 'STOP') for $zk->running;
send_query($s, q{DO $$
BEGIN
  BEGIN
    PERFORM zk_lock_release('slow');
  EXCEPTION WHEN query_canceled THEN
    RAISE NOTICE 'the release was cancelled';
  END;
  PERFORM pg_sleep(0.1) FROM generate_series(1, 300);
  RAISE NOTICE 'never interrupted';
END $$}, 'block-done');
ok(wait_for_wait_event($node_a, 'holder'), 'the release waits for its answer');
$node_a->safe_psql('postgres',
	q{SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE application_name = 'holder'});
$zk->signal($_, 'CONT') for $zk->running;

my $asker = session($node_b, 'asker');
my $t0 = time;
is($asker->query_safe(q{SELECT zk_lock_request_release('kept')}), '1', 'another node asks the holder of "kept"');
wait_marker($s, 'block-done');
my $took = time - $t0;
like($s->{stderr}, qr/NOTICE:  00000: the release was cancelled/, 'the block caught the cancel of its release');
like($s->{stderr}, qr/ERROR:  57Z01: canceling statement because the release of zklock lock "kept" was requested/,
	'the rest of the block is interrupted with 57Z01');
unlike($s->{stderr}, qr/never interrupted/, 'before it ends (1.6: never)');
cmp_ok($took, '<', 10, sprintf('soon after the request (%.2f s)', $took));
$s->{stderr} = '';
is($s->query_safe('SELECT count(*) FROM zk_locks'), '0',
	'the rollback released the lock asked for');

$s->quit;
$asker->quit;
finish_checks($zk, [ $node_a, $node_b ]);
done_testing();
