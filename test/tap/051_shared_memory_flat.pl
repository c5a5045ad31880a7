
# The session worker's shared memory stays flat (issue 27, item 3).
# Connections that each take a session lock and disconnect without releasing
# it (a normal way to free locks) left one record each in the shared area:
# nothing dropped the backend's reference to its node's record when it
# exited holding the lock, so the area grew with every such disconnect (a
# new segment every few thousand).  Now the worker drops it for the backend
# when it cleans up after it, and the next records reuse the space.
#
# 1,200 such connections (pgbench -C), after a warm-up of 300: the live
# records of the area (zk_session_stats.shared_records) are back where they
# were, the shared memory the worker has touched (the resident pages of its
# shared mappings, where it reads and frees those records) grows by less
# than 64 kB (the leak: 300 kB or more), the worker maps no new segment, and
# the server holds no lock afterwards.  The same after 200 backends
# terminated (pg_terminate_backend) while their requests were in flight,
# ZooKeeper stopped: their replies come to nobody.
#
# Runs alone: 1,500 connections and 200 backends, and it measures shared
# memory.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;

use ZklockTest;

my $clients = 4;
my $zk = start_zk();
my $node = zk_node('node_a', $zk, dynamic_shared_memory_type => 'posix',
	max_connections => 260);

# The worker's shared mappings: (resident kB, dynamic shared memory segments).
sub worker_shared
{
	my $pid = worker_pid($node);
	open my $fh, '<', "/proc/$pid/smaps" or die "smaps of $pid: $!";
	my ($shared, $rss, %segments) = (0, 0);
	while (<$fh>)
	{
		if (/^[0-9a-f]+-[0-9a-f]+ (\S+) \S+ \S+ \S+\s*(.*)$/)
		{
			my ($perms, $path) = ($1, $2);
			$shared = $perms =~ /s$/;
			$segments{$path} = 1 if $path =~ m{^/dev/shm/PostgreSQL\.};
		}
		$rss += $1 if $shared && /^Rss:\s+(\d+) kB/;
	}
	close $fh;
	return ($rss, scalar keys %segments);
}

my $script = "$PostgreSQL::Test::Utils::tmp_check/leave_locked.sql";
open my $fh, '>', $script or die "$script: $!";
print $fh "SET application_name = '@{[ 'x' x 60 ]}';\n";
print $fh "SELECT zk_lock_acquire('left-' || :client_id);\n";
close $fh;

# Connections that leave holding their lock, then until none is held.
sub leave_locked
{
	my ($n) = @_;
	PostgreSQL::Test::Utils::system_or_bail('pgbench', '-n', '-C', '-c', $clients, '-j', $clients,
		'-t', $n / $clients, '-f', $script, '-h', $node->host, '-p', $node->port, 'postgres');
	return $node->poll_query_until('postgres',
		q{SELECT count(*) FROM zk_cluster_locks WHERE lock_name LIKE 'left-%'}, '0');
}

# The area's live records, once what is under way has settled.
sub records_settle_at
{
	my ($want) = @_;
	return $node->poll_query_until('postgres',
		q{SELECT shared_records FROM zk_session_stats}, $want);
}

ok(leave_locked(300), 'warm-up: 300 connections left holding a lock, none is held now');
my $records0 = $node->safe_psql('postgres', 'SELECT shared_records FROM zk_session_stats');
my ($rss0, $segments0) = worker_shared();
ok(leave_locked(1200), '1,200 more: none is held');
ok(records_settle_at($records0), "the shared area's live records are back at $records0")
  or diag $node->safe_psql('postgres', 'SELECT shared_records FROM zk_session_stats');
my ($rss1, $segments1) = worker_shared();
note "the worker's resident shared memory: $rss0 kB, then $rss1 kB; segments $segments0, then $segments1";
cmp_ok($rss1 - $rss0, '<', 64, sprintf('it grew by less than 64 kB (%d kB)', $rss1 - $rss0));
is($segments1, $segments0, 'the worker mapped no new shared memory segment');

# Backends ended by FATAL while their requests are in flight.
my $terminated = 200;
$node->safe_psql('postgres', 'CREATE EXTENSION dblink');
$zk->signal($_, 'STOP') for $zk->running;
my $coord = dblink_send_many($node, $terminated, 4, 'fatal_',
	q{'SELECT zk_lock_acquire(''fatal-' || i || ''')'});
ok($node->poll_query_until('postgres', qq{
SELECT count(*) FROM pg_stat_activity
 WHERE application_name LIKE 'fatal\\_%' AND wait_event_type = 'Extension'}, $terminated),
	"$terminated backends wait for ZooKeeper's reply to their create");
$node->safe_psql('postgres', q{
SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
 WHERE application_name LIKE 'fatal\\_%'});
ok($node->poll_query_until('postgres', q{
SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'fatal\\_%'}, '0'),
	'all terminated while their requests were in flight');
$zk->signal($_, 'CONT') for $zk->running;
$_->quit for @$coord;
ok($node->poll_query_until('postgres',
	q{SELECT count(*) FROM zk_cluster_locks WHERE lock_name LIKE 'fatal-%'}, '0'),
	'none of their locks is held once ZooKeeper answers');
ok(records_settle_at($records0), "and the shared area's live records are back at $records0")
  or diag $node->safe_psql('postgres', 'SELECT shared_records FROM zk_session_stats');
my ($rss2, $segments2) = worker_shared();
is($segments2, $segments0, 'the worker mapped no new shared memory segment');

finish_checks($zk, [$node]);
done_testing();
