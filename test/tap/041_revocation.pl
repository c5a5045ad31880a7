
# Revocation across servers, as Curator has it: a session on one server asks
# the holder of a lock on another to let go (zk_lock_request_release).
#
#  1. A batch job that asks zk_lock_release_requested between batches stops
#     after its current batch and releases; the asker's waiting acquire gets
#     the lock.
#  2. With zklock.revocable = on a holder is interrupted at once: a long
#     statement fails with 57Z01, a wait for another lock too, and the lock
#     is free as soon as the transaction rolled back.  Off (the default), a
#     request interrupts nothing.
#  3. A job that catches 57Z01 keeps the lock until it lets go itself, and
#     is not interrupted again for that hold.
#  4. Data written into a holder's node that is not __REVOKE__ is no request;
#     __REVOKE__ written into a waiter's node (Curator's Revoker may) is heard
#     once it holds.
#  5. Races: a request and a release crossing each other, and a request
#     repeated a hundred times, each heard, never leaking into the next hold;
#     fifty interrupts, each freeing the lock for the other server.

use strict;
use warnings;

use FindBin;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

use ZklockTest;

my $zkwrite = "$FindBin::Bin/../zk/zkwrite.py";
my $zk = start_zk();
my ($node_a, $node_b) = map { zk_node($_, $zk) } qw(node_a node_b);

$node_a->safe_psql('postgres', q{
CREATE TABLE batches (job text, batch int, token bigint, done_at timestamptz);
-- The README's polite batch job: one batch per transaction, and a look
-- between batches at whether somebody asked for the lock.
CREATE PROCEDURE polite_job(job text, max_batches int)
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM zk_lock_acquire(job);
  FOR b IN 1..max_batches LOOP
    INSERT INTO batches VALUES (job, b, zk_lock_token(job), clock_timestamp());
    PERFORM pg_sleep(0.05);
    COMMIT;
    EXIT WHEN zk_lock_release_requested(job);
  END LOOP;
  PERFORM zk_lock_release(job);
END $$;
});

sub zk_set
{
	my ($path, $bytes) = @_;
	system('/usr/bin/python3', $zkwrite, $zk->hosts, 'set', $path,
		unpack('H*', $bytes)) == 0
	  or die "zkwrite.py failed";
	return;
}

my $job = session($node_a, 'job');
$job->query_safe('\set VERBOSITY verbose');
my $asker = session($node_b, 'asker');
$asker->query_safe('\set VERBOSITY verbose');

# ---------------------------------------------------------------------------
# 1. The polite stop.
send_query($job, q{CALL polite_job('nightly', 100000)}, 'job-done');
ok( $node_a->poll_query_until('postgres',
		q{SELECT count(*) >= 3 FROM batches WHERE job = 'nightly'}),
	'the batch job runs on node_a');
my $t0 = time;
is($asker->query_safe(q{SELECT zk_lock_request_release('nightly')}), '1',
	'node_b asks the holder on node_a');
is($asker->query_safe(q{SELECT zk_lock_acquire('nightly', 30000)}), 't',
	"node_b's acquire gets the lock once the job stopped");
my $handover = time - $t0;
note sprintf('request to grant on the other server: %.3f s', $handover);
wait_marker($job, 'job-done');
is($job->{stderr}, '', 'the job ended without an error');
my $last = $node_a->safe_psql('postgres',
	q{SELECT max(done_at) <= now() FROM batches WHERE job = 'nightly'});
is($last, 't', 'its batches are committed');
is($node_a->safe_psql('postgres',
		q{SELECT count(DISTINCT token) FROM batches WHERE job = 'nightly'}),
	'1', 'all under one hold of the lock');
$asker->query_safe(q{SELECT zk_lock_release('nightly')});

# ---------------------------------------------------------------------------
# 2. zklock.revocable.
# Off: a request interrupts nothing.
$job->query_safe(q{SELECT zk_lock_acquire('long')});
send_query($job, q{SELECT pg_sleep(2)}, 'sleep-done');
$node_a->poll_query_until('postgres',
	q{SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = 'job' AND wait_event = 'PgSleep'});
is($asker->query_safe(q{SELECT zk_lock_request_release('long')}), '1',
	'revocable off: the holder is asked');
wait_marker($job, 'sleep-done');
is($job->{stderr}, '', 'revocable off: its statement is not interrupted');
is($job->query_safe(q{SELECT zk_lock_release_requested('long')}), 't',
	'revocable off: it only hears the request');
$job->query_safe(q{SELECT zk_lock_release('long')});

# On: a long statement fails with 57Z01 and the lock goes.
$job->query_safe(q{SET zklock.revocable = on});
$job->query_safe(q{SELECT zk_lock_acquire('long')});
send_query($job, q{SELECT pg_sleep(120)}, 'sleep-done');
ok( $node_a->poll_query_until('postgres',
		q{SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = 'job' AND query LIKE 'SELECT pg_sleep(120)%' AND state = 'active'}),
	'revocable on: the holder runs a long statement');
$t0 = time;
is($asker->query_safe(q{SELECT zk_lock_request_release('long')}), '1',
	'revocable on: the holder is asked');
is($asker->query_safe(q{SELECT zk_lock_acquire('long', 30000)}), 't',
	"revocable on: node_b's acquire gets the lock");
my $interrupted = time - $t0;
wait_marker($job, 'sleep-done');
like($job->{stderr},
	qr/ERROR:  57Z01: canceling statement because the release of zklock lock "long" was requested/,
	'revocable on: the statement fails with 57Z01');
like($job->{stderr}, qr/HINT:  The lock is released when the transaction rolls back/,
	'... with a hint');
note sprintf('request to grant after an interrupt: %.3f s', $interrupted);
ok($interrupted < 20, 'the lock came long before the statement would have ended');
$job->{stderr} = '';
is($job->query_safe(q{SELECT count(*) FROM zk_locks}), '0', 'the holder holds nothing now');
is($job->query_safe(q{SELECT 'goes on'}), 'goes on', 'and its session goes on normally');
$asker->query_safe(q{SELECT zk_lock_release('long')});

# On, while waiting for another lock: the wait fails too, leaving no node.
$asker->query_safe(q{SELECT zk_lock_acquire('second')});
$job->query_safe(q{SELECT zk_lock_acquire('first')});
send_query($job, q{SELECT zk_lock_acquire('second')}, 'wait-done');
ok(wait_for_wait_event($node_a, 'job'), 'the holder of "first" waits for "second"');
is($asker->query_safe(q{SELECT zk_lock_request_release('first')}), '1',
	'node_b asks for "first"');
wait_marker($job, 'wait-done');
like($job->{stderr}, qr/ERROR:  57Z01: canceling statement because the release of zklock lock "first" was requested/,
	'the wait for "second" fails with 57Z01');
$job->{stderr} = '';
is($asker->query_safe(q{SELECT zk_lock_try_acquire('first')}), 't', '"first" is free');
is(scalar @{ queue_nodes($zk, 'second') }, 1, 'the waiter left no node in "second"');
$asker->query_safe(q{SELECT zk_lock_release_all()});

# ---------------------------------------------------------------------------
# 3. A job that catches 57Z01 finishes what it does, then lets go itself.
$job->query_safe(q{SELECT zk_lock_acquire('catch')});
send_query($job, q{DO $$
BEGIN
  BEGIN
    PERFORM pg_sleep(120);
  EXCEPTION WHEN SQLSTATE '57Z01' THEN
    RAISE NOTICE 'asked to stop; still held: %',
      (SELECT count(*) FROM zk_locks WHERE name = 'catch');
  END;
  PERFORM pg_sleep(2);
  PERFORM zk_lock_release('catch');
END $$}, 'catch-done');
ok( $node_a->poll_query_until('postgres',
		q{SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = 'job' AND query LIKE 'DO %' AND wait_event = 'PgSleep'}),
	'the job sleeps in its protected block');
$asker->query_safe(q{SELECT zk_lock_request_release('catch')});
$t0 = time;
until ($job->{stderr} =~ /asked to stop/ || time - $t0 > 20)
{
	$job->{run}->pump_nb;
	sleep_for(0.01);
}
like($job->{stderr}, qr/NOTICE:  00000: asked to stop; still held: 1/,
	'the job caught 57Z01 holding the lock');
is($asker->query_safe(q{SELECT zk_lock_try_acquire('catch')}), 'f',
	'caught: the lock is still held while the job finishes');
is($asker->query_safe(q{SELECT zk_lock_request_release('catch')}), '1',
	'asked again meanwhile: interrupted only once per hold (below)');
is($asker->query_safe(q{SELECT zk_lock_acquire('catch', 30000)}), 't',
	'and is given up by the job itself');
wait_marker($job, 'catch-done');
unlike($job->{stderr}, qr/ERROR/, 'and ended without an error');
$job->{stderr} = '';
$asker->query_safe(q{SELECT zk_lock_release('catch')});
$job->query_safe(q{SET zklock.revocable = off});

# ---------------------------------------------------------------------------
# 4. What is a request.
$job->query_safe(q{SELECT zk_lock_acquire('data')});
my $node = $job->query_safe(q{SELECT znode FROM zk_locks WHERE name = 'data'});
zk_set($node, 'not a request');
zk_set($node, '__REVOKE__ ');
sleep_for(0.5);
is($job->query_safe(q{SELECT zk_lock_release_requested('data')}), 'f',
	'other data in the node is no request');
is($job->query_safe(q{SELECT state FROM zk_locks WHERE name = 'data'}), 'held',
	'and the lock is still held');
is($asker->query_safe(q{SELECT release_requested::text || ' ' || (pid IS NULL)::text FROM zk_lock_holders('data')}),
	'false true', 'the views show the foreign data as no request (and no owner)');
$job->query_safe(q{SELECT zk_lock_release('data')});

# A waiter's node asked (the convention lets anyone write any node): heard
# once it holds.
$asker->query_safe(q{SELECT zk_lock_acquire('waiting')});
send_query($job, q{SELECT zk_lock_acquire('waiting')}, 'granted');
ok(wait_for_wait_event($node_a, 'job'), 'node_a waits for the lock');
my $waiter = queue_nodes($zk, 'waiting')->[1];
zk_set($waiter, '__REVOKE__');
$asker->query_safe(q{SELECT zk_lock_release('waiting')});
wait_marker($job, 'granted');
is(poll_query($job, q{SELECT zk_lock_release_requested('waiting')}, 't'), 't',
	'a request written while it waited is heard once it holds');
is( poll_query($asker,
		q{SELECT bool_and(release_requested AND pid IS NOT NULL) FROM zk_lock_holders('waiting')}, 't'), 't',
	'and its node says who holds again');
$job->query_safe(q{SELECT zk_lock_release('waiting')});

# Revocable, the acquisition that gets such a lock fails with 57Z01 at once.
$job->query_safe(q{SET zklock.revocable = on});
$asker->query_safe(q{SELECT zk_lock_acquire('waiting')});
send_query($job, q{SELECT zk_lock_acquire('waiting')}, 'granted');
ok(wait_for_wait_event($node_a, 'job'), 'revocable: node_a waits for the lock');
zk_set(queue_nodes($zk, 'waiting')->[1], '__REVOKE__');
is( poll_query($asker,
		q{SELECT bool_and(release_requested AND pid IS NOT NULL) FROM zk_lock_holders('waiting') WHERE NOT holding},
		't'), 't',
	'the waiter heard the request (and wrote itself back)');
$asker->query_safe(q{SELECT zk_lock_release('waiting')});
wait_marker($job, 'granted');
like($job->{stderr}, qr/ERROR:  57Z01: canceling statement because the release of zklock lock "waiting" was requested/,
	'revocable: the acquisition fails with 57Z01 once granted');
$job->{stderr} = '';
is($job->query_safe(q{SELECT count(*) FROM zk_locks}), '0', 'and holds nothing');
is(scalar @{ queue_nodes($zk, 'waiting') }, 0, 'no node is left');
$job->query_safe(q{SET zklock.revocable = off});

# ---------------------------------------------------------------------------
# 5. Races, many times over.
my ($unheard, $leaked, $errors) = (0, 0, 0);
for my $i (1 .. 100)
{
	$job->query_safe(q{SELECT zk_lock_acquire('race')});
	$leaked++ if $job->query_safe(q{SELECT zk_lock_release_requested('race')}) ne 'f';
	if ($i % 2)
	{
		# Asked and heard.
		$asker->query_safe(q{SELECT zk_lock_request_release('race')}) eq '1' or $unheard++;
		poll_query($job, q{SELECT zk_lock_release_requested('race')}, 't', 5) eq 't'
		  or $unheard++;
		$job->query_safe(q{SELECT zk_lock_release('race')});
	}
	else
	{
		# A release and a request crossing each other.
		send_query($job, q{SELECT zk_lock_release('race')}, "released-$i");
		my $n = $asker->query_safe(q{SELECT zk_lock_request_release('race')});
		$errors++ unless $n eq '0' || $n eq '1';
		wait_marker($job, "released-$i");
	}
	$errors++ if $job->{stderr} ne '' || $asker->{stderr} ne '';
}
is($unheard, 0, '50 requests, each one reached the holder and was heard');
is($leaked, 0, 'no request leaked into a later hold (100 holds)');
is($errors, 0, 'no error, also when a request crossed a release (50 times)');
is(scalar @{ queue_nodes($zk, 'race') }, 0, 'no node left behind');

$job->query_safe(q{SET zklock.revocable = on});
my ($not_interrupted, $not_free) = (0, 0);
for my $i (1 .. 50)
{
	$job->query_safe(q{SELECT zk_lock_acquire('rrace')});
	send_query($job, q{SELECT pg_sleep(60)}, "slept-$i");
	$node_a->poll_query_until('postgres',
		q{SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = 'job' AND wait_event = 'PgSleep'});
	$asker->query_safe(q{SELECT zk_lock_request_release('rrace')});
	$asker->query_safe(q{SELECT zk_lock_acquire('rrace', 10000)}) eq 't' or $not_free++;
	$asker->query_safe(q{SELECT zk_lock_release('rrace')});
	wait_marker($job, "slept-$i");
	$not_interrupted++ unless $job->{stderr} =~ /57Z01/;
	$job->{stderr} = '';
}
is($not_interrupted, 0, '50 revocable holders, each interrupted with 57Z01');
is($not_free, 0, 'each time the lock was free for node_b at once');
$job->query_safe(q{SET zklock.revocable = off});

$job->quit;
$asker->quit;
finish_checks($zk, [ $node_a, $node_b ]);
done_testing();
