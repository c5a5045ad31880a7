
# zklock beside Patroni (issue 42.18): Debian's patroni package, ZooKeeper as
# its store and zklock's on one server, two members with zklock preloaded
# through the settings Patroni keeps in the store, and a plain third server.
#
# 1. A job on the primary holds a session lock and commits a row every few
#    milliseconds; a competitor on the plain server waits for the lock; a
#    session on the replica holds another lock.
# 2. patronictl switchover: the competitor is granted only after the job's
#    last commit record (its commit timestamp, read on the new primary and on
#    the old one once it follows), with a higher fencing token.
# 3. The replica's lock survived its promotion (the session worker's session
#    is the server's, not its role's), and a job on the new primary takes
#    the lock after the competitor.
# 4. patronictl edit-config of zklock.session_timeout: every member closes
#    its session at once; a job's COMMIT fails with 40001 (issue 42.18).
# 5. patronictl reinit of a member holding a lock: the session file goes
#    with the data directory, the lock is freed after the session timeout
#    (issue 42.17).
# 6. The primary's PostgreSQL stopped (SIGSTOP) past Patroni's session
#    timeout: no failover; its lock is granted elsewhere after zklock's.
# Patroni and its PostgreSQL are stopped by pid, also when the test dies.

use strict;
use warnings;

use HTTP::Tiny;
use JSON::PP;
use POSIX ();
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

use ZkServer;
use ZklockTest;

my $patroni = '/usr/bin/patroni';
my $patronictl = '/usr/bin/patronictl';
# A missing package is a failure, not a skip: test/setup.sh installs it.
BAIL_OUT("$patroni is missing: install Debian's patroni package (test/setup.sh does)")
  unless -x $patroni;

my $session_timeout_ms = 6000;
my $scope = 'zk067';
my $zk = start_zk();
my $plain = zk_node('plain', $zk, 'zklock.session_timeout' => $session_timeout_ms);

# Each member is a PostgreSQL::Test::Cluster that Patroni, not the test,
# starts and stops: it names the port, socket directory and data directory.
my $bindir = `pg_config --bindir`;
chomp $bindir;
my (%member, %rest_port, %patroni_pid);
for my $name ('m1', 'm2')
{
	$member{$name} = PostgreSQL::Test::Cluster->new($name);
	$rest_port{$name} = ZkServer::free_port();
}

sub member_config
{
	my ($name) = @_;
	my $node = $member{$name};
	my $dir = $node->basedir;
	my $config = {
		scope => $scope,
		name => $name,
		log => { level => 'INFO' },
		restapi => {
			listen => "127.0.0.1:$rest_port{$name}",
			connect_address => "127.0.0.1:$rest_port{$name}",
		},
		zookeeper => { hosts => [ split /,/, $zk->hosts ] },
		bootstrap => {
			dcs => {
				ttl => 20,
				loop_wait => 2,
				retry_timeout => 5,
				postgresql => {
					use_pg_rewind => JSON::PP::false,
					# What an operator sets with patronictl edit-config.
					parameters => {
						shared_preload_libraries => 'zklock',
						'zklock.hosts' => $zk->hosts,
						'zklock.root' => ZK_ROOT,
						'zklock.session_timeout' => $session_timeout_ms,
						track_commit_timestamp => 'on',
						max_wal_senders => 5,
						max_replication_slots => 5,
						wal_level => 'replica',
						hot_standby => 'on',
					},
				},
			},
			initdb => [ { encoding => 'UTF8' }, 'no-sync' ],
		},
		postgresql => {
			listen => '127.0.0.1:' . $node->port,
			connect_address => '127.0.0.1:' . $node->port,
			data_dir => $node->data_dir,
			bin_dir => $bindir,
			pgpass => "$dir/pgpass",
			authentication => {
				superuser => { username => 'postgres' },
				replication => { username => 'postgres' },
			},
			parameters => {
				unix_socket_directories => $node->host,
				fsync => 'off',
				logging_collector => 'on',
				log_directory => $PostgreSQL::Test::Utils::log_path,
				log_filename => "067_postgresql_$name.log",
			},
			pg_hba => [
				'local all all trust',
				'host all all 127.0.0.1/32 trust',
				'host replication all 127.0.0.1/32 trust',
			],
		},
	};
	# JSON is YAML.
	my $file = "$dir/patroni.yml";
	open my $fh, '>', $file or die "$file: $!";
	print $fh JSON::PP->new->canonical->pretty->encode($config);
	close $fh;
	return $file;
}

sub start_member
{
	my ($name) = @_;
	my $file = member_config($name);
	my $log = "$PostgreSQL::Test::Utils::log_path/067_patroni_$name.log";
	my $pid = fork // die "fork: $!";
	if ($pid == 0)
	{
		open STDOUT, '>>', $log or die "$log: $!";
		open STDERR, '>&', \*STDOUT or die "stderr: $!";
		exec $patroni, $file or die "exec $patroni: $!";
	}
	$patroni_pid{$name} = $pid;
	note "patroni $name: pid $pid, log $log";
	return;
}

# Patroni's REST API answers 200 on /primary or /replica for a member in
# that role, running.
sub wait_role
{
	my ($name, $role, $timeout) = @_;
	my $http = HTTP::Tiny->new(timeout => 2);
	my $t0 = time;
	while (time - $t0 < $timeout)
	{
		return time - $t0
		  if $http->get("http://127.0.0.1:$rest_port{$name}/$role")->{status} == 200;
		sleep_for(0.1);
	}
	return undef;
}

# The postmaster that Patroni started for a member, if it runs.
sub postmaster_pid
{
	my ($name) = @_;
	my $file = $member{$name}->data_dir . '/postmaster.pid';
	open my $fh, '<', $file or return undef;
	my $pid = <$fh>;
	close $fh;
	chomp $pid if defined $pid;
	return ($pid && kill(0, $pid)) ? $pid : undef;
}

# Stop a member: Patroni stops its PostgreSQL as it ends; if either is still
# there after 30 s, kill it.
sub stop_member
{
	my ($name) = @_;
	my $pid = delete $patroni_pid{$name};
	if ($pid)
	{
		kill 'TERM', $pid;
		my $t0 = time;
		while (waitpid($pid, POSIX::WNOHANG()) == 0)
		{
			if (time - $t0 > 30)
			{
				kill 'KILL', $pid;
				waitpid($pid, 0);
				last;
			}
			sleep_for(0.1);
		}
	}
	if (my $pm = postmaster_pid($name))
	{
		kill 'QUIT', $pm;
		my $t0 = time;
		sleep_for(0.1) while kill(0, $pm) && time - $t0 < 30;
	}
	return;
}

END
{
	my $status = $?;
	stop_member($_) for keys %member;
	$? = $status;
}

# 0. Bootstrap: m1 initializes the cluster, m2 clones it.
my $t_boot = time;
start_member('m1');
ok(defined wait_role('m1', 'primary', 60), 'm1 bootstraps the cluster and leads it');
my ($m1, $m2) = @member{ 'm1', 'm2' };
$m1->safe_psql('postgres', q{
CREATE EXTENSION zklock;
CREATE TABLE job_log (i int, token bigint);
CREATE PROCEDURE job_loop() LANGUAGE plpgsql AS $$
DECLARE
  tok bigint;
BEGIN
  PERFORM zk_lock_acquire('job');
  tok := zk_lock_token('job');
  COMMIT;
  FOR i IN 1..1000000 LOOP
    INSERT INTO job_log VALUES (i, tok);
    COMMIT;
    PERFORM pg_sleep(0.005);
  END LOOP;
END $$;
});
start_member('m2');
ok(defined wait_role('m2', 'replica', 90), 'm2 clones it and follows');
$m1->poll_query_until('postgres',
	q{SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'}, '1')
  or die 'm2 does not stream';
note sprintf('two members up in %.1f s', time - $t_boot);
is($m1->safe_psql('postgres', q{SELECT current_setting('cluster_name')}), $scope,
	'Patroni names each member by its scope');
is($m2->safe_psql('postgres', q{SELECT state FROM zk_session()}), 'connected',
	'zklock preloaded from the store: the replica has its own session');

# ZooKeeper sees two sessions per member (Patroni's, zklock's worker's) and
# the plain server's.
my @worker_sessions = map { $_->safe_psql('postgres', 'SELECT session_id FROM zk_session()') }
  $m1, $m2, $plain;
my $live = $zk->live_sessions;
is(scalar(grep { $_ ne '0x0' } keys %$live), 5, 'five ZooKeeper sessions: two per member')
  or diag explain $live;
is(scalar(grep { $live->{ lc $_ } } @worker_sessions), 3, 'three of them zklock\'s');

# 1. The job, the competitor and a lock held on the replica.
my $job = IPC::Run::start(
	[ 'psql', '-X', '-d',
	  'host=' . $m1->host . ' port=' . $m1->port . ' dbname=postgres application_name=job',
	  '-c', 'CALL job_loop()' ],
	'<', \undef, '>', \my $job_out, '2>', \my $job_err);
$m1->poll_query_until('postgres', q{SELECT count(*) > 20 FROM job_log})
  or die 'the job does not write';
my $job_token = $m1->safe_psql('postgres', q{SELECT max(token) FROM job_log});

my $competitor = session($plain, 'competitor');
send_query($competitor, q{SELECT zk_lock_acquire('job');
SELECT clock_timestamp() || '|' || zk_lock_token('job')}, 'granted');
ok(wait_for_wait_event($plain, 'competitor'), 'the competitor waits for the job');

my $standby_holder = session($m2, 'standby_holder');
is($standby_holder->query_safe(q{SELECT zk_lock_acquire('replica_lock', 5000)}), 't',
	'a session on the replica takes a lock');
my $replica_session = zk_session_field($standby_holder, 'session_id');

# 2. The switchover.
my $t_switch = time;
my ($sw_out, $sw_err) = ('', '');
my $switched = IPC::Run::run(
	[ $patronictl, '-c', $m1->basedir . '/patroni.yml', 'switchover',
	  '--leader', 'm1', '--candidate', 'm2', '--force', $scope ],
	'<', \undef, '>', \$sw_out, '2>', \$sw_err);
note "patronictl: $sw_out$sw_err";
ok($switched, 'patronictl switchover succeeds');
ok(defined wait_role('m2', 'primary', 60), 'm2 is the primary');
my $switch_s = time - $t_switch;

my ($granted_at, $competitor_token) =
  wait_marker($competitor, 'granted') =~ /^(\d{4}-.+)\|(\d+)$/m;
ok(defined $competitor_token, 'the competitor is granted the lock')
  or BAIL_OUT('no grant');
$job->finish;
note "job: $job_err";
like($job_err, qr/terminat|connection|closed/i, 'the job ended with the old primary');

my ($last_i, $last_commit) = split /\|/,
  $m2->safe_psql('postgres',
	q{SELECT max(i) || '|' || max(pg_xact_commit_timestamp(xmin)) FROM job_log});
ok($last_i > 20, "the job committed $last_i rows");
my $gap = $m2->safe_psql('postgres',
	"SELECT extract(epoch FROM '$granted_at'::timestamptz - '$last_commit'::timestamptz)");
cmp_ok($gap, '>', 0, 'the competitor was granted after the job\'s last commit record');
cmp_ok($competitor_token, '>', $job_token, 'the fencing token grew');

# The old primary follows the new one with the same history: its last
# commit is the one the new primary has.
ok(defined wait_role('m1', 'replica', 60), 'm1 follows m2');
$m1->poll_query_until('postgres',
	"SELECT max(i) = $last_i FROM job_log")
  or diag 'm1 has another last row: ' . $m1->safe_psql('postgres', 'SELECT max(i) FROM job_log');
is($m1->safe_psql('postgres', q{SELECT max(pg_xact_commit_timestamp(xmin)) FROM job_log}),
	$last_commit, 'm1 has the same last commit record');

# 3. The replica's lock survived its promotion, in the same session.
is($standby_holder->query_safe(q{SELECT state FROM zk_locks WHERE name = 'replica_lock'}),
	'held', 'the lock taken on the replica is held after its promotion');
is(zk_session_field($standby_holder, 'session_id'), $replica_session,
	'in the same ZooKeeper session');
is($plain->safe_psql('postgres', q{SELECT zk_lock_try_acquire('replica_lock')}), 'f',
	'and nobody else gets it');

$competitor->query_safe(q{SELECT zk_lock_release('job')});
my $new_job = session($m2, 'new_job');
is($new_job->query_safe(q{SELECT zk_lock_acquire('job', 10000)}), 't',
	'a job on the new primary takes the lock');
my $new_token = $new_job->query_safe(q{SELECT zk_lock_token('job')});
cmp_ok($new_token, '>', $competitor_token, 'with a higher token still');

# 4. A zklock setting changed in the store reaches every member at once:
#    each closes its session, and a transaction that wrote under a lock
#    fails at COMMIT with 40001.
my %old_session = map { $_ => $member{$_}->safe_psql('postgres', 'SELECT session_id FROM zk_session()') }
  'm1', 'm2';
$new_job->query_safe('\set VERBOSITY verbose');
$new_job->query_safe('BEGIN');
$new_job->query_safe(q{INSERT INTO job_log VALUES (0, 0)});
my $t_edit = time;
my ($ec_out, $ec_err) = ('', '');
ok( IPC::Run::run(
		[ $patronictl, '-c', $m1->basedir . '/patroni.yml', 'edit-config',
		  '-p', 'zklock.session_timeout=' . ($session_timeout_ms + 1000), '--force', $scope ],
		'<', \undef, '>', \$ec_out, '2>', \$ec_err),
	'patronictl edit-config changes zklock.session_timeout')
  or diag "$ec_out$ec_err";
my %renewed_after;
while (time - $t_edit < 30 && keys %renewed_after < 2)
{
	for my $name ('m1', 'm2')
	{
		next if exists $renewed_after{$name};
		$renewed_after{$name} = time - $t_edit
		  if $member{$name}->safe_psql('postgres', 'SELECT session_id FROM zk_session()') ne
		  $old_session{$name};
	}
	sleep_for(0.05);
}
is_deeply([ sort keys %renewed_after ], [ 'm1', 'm2' ], 'every member closes its session');
for my $name ('m1', 'm2')
{
	like(slurp_file("$PostgreSQL::Test::Utils::log_path/067_postgresql_$name.log"),
		qr/ZooKeeper settings changed; closing the session/, "$name says why in its log");
}
$new_job->query('COMMIT');
like($new_job->{stderr}, qr/ERROR:  40001: zklock lock "job" was lost before the transaction committed/,
	'the job\'s transaction fails at COMMIT with 40001');
$new_job->{stderr} = '';

# 5. patronictl reinit stops a member with an immediate shutdown, which
#    leaves its session open, and deletes the data directory with the
#    session file in it: the member's locks go when the session expires,
#    not at once.
my $reinit_holder = session($m1, 'reinit_holder');
is($reinit_holder->query_safe(q{SELECT zk_lock_acquire('reinit_lock', 5000)}), 't',
	'a session on m1 holds a lock');
my $reinit_timeout_ms = $reinit_holder->query_safe(q{SELECT timeout_ms FROM zk_session()});
my $watcher = session($plain, 'reinit_watcher');
my $t_reinit = time;
my ($ri_out, $ri_err) = ('', '');
ok( IPC::Run::run(
		[ $patronictl, '-c', $m1->basedir . '/patroni.yml', 'reinit', '--force', $scope, 'm1' ],
		'<', \undef, '>', \$ri_out, '2>', \$ri_err),
	'patronictl reinit m1') or diag "$ri_out$ri_err";
is(poll_query($watcher, q{SELECT zk_lock_try_acquire('reinit_lock')}, 't', 60), 't',
	'the lock of the reinitialized member is freed');
my $freed_s = time - $t_reinit;
cmp_ok($freed_s, '>', $reinit_timeout_ms / 1000 * 0.7,
	'after about the session timeout, not at once');
$watcher->query_safe(q{SELECT zk_lock_release('reinit_lock')});
ok(defined wait_role('m1', 'replica', 90), 'm1 comes back as a replica');
# m1 was only ever stopped cleanly before, so no start of it had a session
# to end: after reinit, none either.
unlike(slurp_file("$PostgreSQL::Test::Utils::log_path/067_postgresql_m1.log"),
	qr/zklock: ending ZooKeeper session/, 'the new m1 had no session file to act on');
$reinit_holder->quit;
$watcher->quit;

# The session timeout ZooKeeper granted Patroni (ms): the longest of the
# sessions that are not zklock's ('cons' gives each connection's "to").
sub patroni_session_timeout
{
	my %zklock = map { lc($_) => 1 }
	  map { $_->safe_psql('postgres', 'SELECT session_id FROM zk_session()') } $m1, $m2, $plain;
	my $longest = 0;
	for my $line (split /\n/, $zk->flw(1, 'cons') // '')
	{
		next unless $line =~ /sid=(0x[0-9a-f]+).*\bto=(\d+)/i;
		next if $zklock{ lc $1 };
		$longest = $2 if $2 > $longest;
	}
	return $longest;
}

# 6. A hung primary: its PostgreSQL stopped (every process) while Patroni
#    runs.  Patroni's leader key is an ephemeral node of Patroni's own
#    session, which its client thread keeps alive: no failover, for longer
#    than that session's timeout.  zklock's worker stopped too: the
#    primary's lock is granted elsewhere after zklock's session timeout.
my $hung_holder = session($m2, 'hung_holder');
is($hung_holder->query_safe(q{SELECT zk_lock_acquire('hung_lock', 5000)}), 't',
	'a session on the primary holds a lock');
my $patroni_timeout_ms = patroni_session_timeout();
cmp_ok($patroni_timeout_ms, '>', 0, "Patroni's ZooKeeper session timeout: $patroni_timeout_ms ms");
my $pm2 = postmaster_pid('m2');
my @frozen = ($pm2, split /\s+/, `pgrep -P $pm2`);
@frozen = grep { /^\d+$/ } @frozen;
my $t_hang = time;
kill 'STOP', reverse @frozen;
my $hung_watcher = session($plain, 'hung_watcher');
is(poll_query($hung_watcher, q{SELECT zk_lock_try_acquire('hung_lock')}, 't', 30), 't',
	'the hung primary\'s lock is granted elsewhere');
my $hung_freed_s = time - $t_hang;
# Wait past Patroni's session timeout (its ttl as ZooKeeper clamped it) and
# two of its loops.
my $patroni_session_s = $patroni_timeout_ms / 1000;
my $left = $patroni_session_s + 6 - (time - $t_hang);
sleep_for($left) if $left > 0;
my $hung_s = time - $t_hang;
my $m1_role = HTTP::Tiny->new(timeout => 2)->get("http://127.0.0.1:$rest_port{m1}/replica")->{status};
kill 'CONT', @frozen;
is($m1_role, 200, sprintf('no failover while the primary hung for %.1f s', $hung_s));
ok(defined wait_role('m2', 'primary', 30), 'm2 is still the primary once it resumes');
$hung_watcher->query_safe(q{SELECT zk_lock_release('hung_lock')});
$hung_watcher->quit;
$hung_holder->quit;

note sprintf('switchover %.2f s; last commit %s, granted %s (%.3f s later); '
	  . 'tokens %s -> %s -> %s; %d rows; edit-config reloaded m1 in %.2f s, m2 in %.2f s; '
	  . 'reinit freed the lock after %.2f s (session timeout %d ms); '
	  . 'a hung primary\'s lock granted elsewhere after %.2f s, no failover in %.1f s',
	$switch_s, $last_commit, $granted_at, $gap, $job_token, $competitor_token,
	$new_token, $last_i, $renewed_after{m1} // -1, $renewed_after{m2} // -1,
	$freed_s, $reinit_timeout_ms, $hung_freed_s, $hung_s);

$new_job->quit;
$standby_holder->quit;
$competitor->quit;
stop_member($_) for 'm1', 'm2';
finish_checks($zk, [$plain]);
done_testing();
