
# pg_cron: the same job scheduled on two nodes, run on one at a time.
#
# Each node schedules the job; the job takes zk_lock_xact_try_acquire and
# either runs its body (recording node, start, end and fencing token) or
# records that it skipped.  Both nodes try every second for about 20
# seconds; at the end no two bodies overlap, across both nodes, tokens
# strictly increase, and both nodes ran the body several times.
#
# pg_cron 1.4 (Debian 12) schedules by the minute: '1 second' is an invalid
# schedule there (intervals in seconds came with pg_cron 1.5).  So each node
# schedules '* * * * *' a procedure that calls the job every second for 20
# seconds, each call its own transaction; both nodes start it at the same
# minute.  node_a runs jobs in background workers
# (cron.use_background_workers = on), node_b over libpq connections (the
# default), so that both ways are covered.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep time);

use ZklockTest;

my $zk = start_zk();
my %cron = (
	shared_preload_libraries => 'pg_cron,zklock',
	'cron.database_name' => 'postgres');
my $node_a = zk_node('node_a', $zk, %cron, 'cron.use_background_workers' => 'on');
my $node_b = PostgreSQL::Test::Cluster->new('node_b');
$node_b->init;
# Job runs connect to the node like any client: here its Unix socket.
zk_configure($node_b, $zk, %cron, 'cron.host' => $node_b->host);
$node_b->start;
$node_b->safe_psql('postgres', 'CREATE EXTENSION zklock');

my $seconds = 20;
# Both nodes must schedule within the same minute, so that both runs start
# at the next one; and not in its first seconds, before pg_cron has looked
# at this minute: it would start the job at once on the node that scheduled
# first, and again at the next minute.
sleep 0.5 while time % 60 > 50 || time % 60 < 5;
for my $node ($node_a, $node_b)
{
	install_cs_log($node);
	$node->safe_psql('postgres', q{
CREATE EXTENSION pg_cron;
CREATE TABLE skipped (node text, at timestamptz);

-- The job: on whichever node gets the lock; the others skip this run.  A
-- skip is a normal outcome, not a failure: the run succeeds.
CREATE PROCEDURE zk_job() LANGUAGE plpgsql AS $$
DECLARE
  t0 timestamptz;
BEGIN
  IF NOT zk_lock_xact_try_acquire('cron-job') THEN
    INSERT INTO skipped VALUES (current_setting('cluster_name'), clock_timestamp());
    RETURN;
  END IF;
  t0 := clock_timestamp();
  PERFORM pg_sleep(0.3);
  INSERT INTO cs VALUES (current_setting('cluster_name'), 'cron', 0,
                         zk_lock_token('cron-job'), t0, clock_timestamp());
END $$;

-- pg_cron 1.4 schedules by the minute: call the job every second for a
-- while, each call in its own transaction (the lock goes at COMMIT).  A
-- little jitter, like the skew between real servers, so that either node
-- may come first.
CREATE PROCEDURE every_second(seconds int) LANGUAGE plpgsql AS $$
DECLARE
  stop_at timestamptz := clock_timestamp() + make_interval(secs => seconds);
  tick timestamptz;
BEGIN
  -- Background workers have no application_name; name the run for
  -- zk_lock_holders.
  PERFORM set_config('application_name', 'pg_cron zk_job', false);
  LOOP
    tick := date_trunc('second', clock_timestamp()) + interval '1 second';
    EXIT WHEN tick > stop_at;
    PERFORM pg_sleep(extract(epoch FROM tick - clock_timestamp()) + random() * 0.05);
    CALL zk_job();
    COMMIT;
  END LOOP;
END $$;
});
	is( $node->safe_psql('postgres',
			qq{SELECT cron.schedule('zk-job', '* * * * *', 'CALL every_second($seconds)') > 0}),
		't', $node->name . ' schedules the job');
}

# Both runs start at the next minute.
sub runs
{
	my ($node, $status) = @_;
	return $node->safe_psql('postgres',
		qq{SELECT count(*) FROM cron.job_run_details WHERE status = '$status'});
}
my $deadline = time + 130;
sleep 0.2 until time > $deadline || (runs($node_a, 'running') && runs($node_b, 'running'));
ok(runs($node_a, 'running') && runs($node_b, 'running'), 'both nodes run the job');
my $started = time;

# Who holds it, seen while the runs go on.
my $holder = '';
until ($holder || time > $started + $seconds)
{
	$holder = $node_a->safe_psql('postgres',
		q{SELECT application_name || ' ' || usename FROM zk_lock_holders('cron-job') WHERE holding});
	sleep 0.05;
}
is($holder, 'pg_cron zk_job ' . $node_a->safe_psql('postgres', 'SELECT current_user'),
	'zk_lock_holders names the job run');

# Let both runs end, then unschedule before the next minute starts others.
$deadline = time + $seconds + 30;
sleep 0.2 until time > $deadline || (runs($node_a, 'succeeded') && runs($node_b, 'succeeded'));
for my $node ($node_a, $node_b)
{
	is( $node->safe_psql('postgres',
			q{SELECT status || ' ' || count(*) FROM cron.job_run_details GROUP BY status}),
		'succeeded 1', $node->name . ': one run, succeeded (skipped calls included)');
	is($node->safe_psql('postgres', q{SELECT cron.unschedule('zk-job')}), 't',
		$node->name . ' unschedules the job');
}

my $sections = check_critical_sections($node_a, $node_b);
my %ran = map { $_->name => $_->safe_psql('postgres', 'SELECT count(*) FROM cs') } $node_a, $node_b;
my %skipped =
  map { $_->name => $_->safe_psql('postgres', 'SELECT count(*) FROM skipped') } $node_a, $node_b;
note "in $seconds seconds: node_a ran the body $ran{node_a} times and skipped $skipped{node_a},"
  . " node_b ran it $ran{node_b} times and skipped $skipped{node_b}";
cmp_ok($sections, '>=', $seconds / 2, 'about one run of the body every second');
cmp_ok($ran{$_}, '>=', 3, "$_ ran the body several times") for qw(node_a node_b);
cmp_ok($skipped{$_}, '>=', 3, "$_ found the lock taken several times") for qw(node_a node_b);

# pg_cron runs nothing more now: no job process is left on either node.
for my $node ($node_a, $node_b)
{
	ok( $node->poll_query_until('postgres',
			q{SELECT count(*) = 0 FROM pg_stat_activity
			   WHERE backend_type = 'pg_cron' OR application_name = 'pg_cron zk_job'}),
		$node->name . ': no job process left');
}
finish_checks($zk, [ $node_a, $node_b ]);
done_testing();
