
# ZklockTest: what zklock's TAP tests share.
#
# PostgreSQL nodes configured for a test ZooKeeper, the checks every test ends
# with (no znode without a live owner; none at all once the nodes are gone),
# and the critical-section log used to prove mutual exclusion.

package ZklockTest;

use strict;
use warnings;

use Exporter 'import';
use File::Basename qw(dirname);
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep time);

use ZkServer;

our @EXPORT = qw(
  ZK_ROOT start_zk zk_node zk_configure
  no_orphans_ok tree_empty_ok
  install_cs_log check_critical_sections
  zklock_wait_event wait_for_wait_event still_waits elapsed_since
  session send_query wait_marker poll_query zk_session_field wait_session_state
  send_call call_returned call_result
  cs_begin_sql cs_end_sql cs_waiter_sql queue_nodes
  freeze_until_suspended finish_checks fakedns_lib sleep_for
  worker_pid wait_worker_session reconfigure dblink_send_many dblink_true_count
  traced_state gdb_break gdb_count gdb_passes gdb_wait_hit gdb_let_go);

use constant ZK_ROOT => '/zklock_tap';

# Sleep the whole time given.  PostgreSQL 18's test modules install a
# SIGCHLD handler, so a child (ZooKeeper) stopped or continued by a test
# cuts a plain sleep short.
sub sleep_for
{
	my ($seconds) = @_;
	my $until = time + $seconds;
	while ((my $left = $until - time) > 0)
	{
		sleep $left;
	}
	return;
}

sub start_zk
{
	my (%opts) = @_;
	my $zk = ZkServer->new(%opts);
	$zk->start;
	note 'ZooKeeper at ' . $zk->hosts;
	return $zk;
}

# Point an initialized node at $zk, as cluster_name $node->name; %conf adds
# settings.
sub zk_configure
{
	my ($node, $zk, %conf) = @_;
	my %settings = (
		'shared_preload_libraries' => 'zklock',
		'zklock.hosts' => $zk->hosts,
		'zklock.root' => ZK_ROOT,
		'cluster_name' => $node->name,
		%conf);
	$node->append_conf('postgresql.conf',
		join '', map { "$_ = '$settings{$_}'\n" } sort keys %settings);
	return;
}

# A started PostgreSQL node with zklock pointed at $zk; %conf adds settings,
# but for allows_streaming => 1: WAL senders (a standby, pg_basebackup).
sub zk_node
{
	my ($name, $zk, %conf) = @_;
	my $streaming = delete $conf{allows_streaming};
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init(allows_streaming => $streaming // 0);
	zk_configure($node, $zk, %conf);
	$node->start;
	$node->safe_psql('postgres', 'CREATE EXTENSION zklock');
	return $node;
}

# Every ephemeral node under the lock tree has a connected owner.
sub no_orphans_ok
{
	my ($zk, $msg) = @_;
	my $left = $zk->wait_no_orphans(ZK_ROOT, 20);
	is_deeply($left, [], $msg) or diag explain $left;
}

# Nothing but (empty) parents is left under the lock tree.
sub tree_empty_ok
{
	my ($zk, $msg, $timeout) = @_;
	my $left = $zk->wait_no_ephemerals(ZK_ROOT, $timeout // 20);
	is_deeply($left, [], $msg) or diag explain $left;
}

# Table and procedure for workers that loop over a critical section:
# cs_loop(worker, iterations, 'session'|'xact') takes the lock 'mutex',
# records start, end and fencing token, and lets go.
sub install_cs_log
{
	my ($node) = @_;
	$node->safe_psql('postgres', q{
CREATE TABLE cs (node text, worker text, i int, token bigint,
                 started timestamptz, finished timestamptz);
CREATE PROCEDURE cs_loop(worker text, n int, style text)
LANGUAGE plpgsql AS $$
DECLARE
  t0 timestamptz;
  tok bigint;
BEGIN
  FOR i IN 1..n LOOP
    IF style = 'session' THEN
      PERFORM zk_lock_acquire('mutex');
    ELSE
      PERFORM zk_lock_xact_acquire('mutex');
    END IF;
    t0 := clock_timestamp();
    tok := zk_lock_token('mutex');
    PERFORM pg_sleep(random() * 0.004);
    INSERT INTO cs VALUES (current_setting('cluster_name'), worker, i, tok,
                           t0, clock_timestamp());
    IF style = 'session' THEN
      PERFORM zk_lock_release('mutex');
    END IF;
    COMMIT;
  END LOOP;
END $$;
});
}

# Merge the cs logs of all nodes (one machine, one clock) and check that no
# two critical sections overlap and that tokens strictly increase in time
# order.  Returns the number of sections.
sub check_critical_sections
{
	my (@nodes) = @_;
	my @rows;
	for my $node (@nodes)
	{
		my $out = $node->safe_psql('postgres',
			q{SELECT node, worker, i, token,
			         extract(epoch FROM started)::numeric(20,6),
			         extract(epoch FROM finished)::numeric(20,6)
			    FROM cs});
		push @rows, map { [ split /\|/ ] } grep { length } split /\n/, $out;
	}
	@rows = sort { $a->[4] <=> $b->[4] } @rows;
	is(scalar(grep { !defined $_->[5] || $_->[5] eq '' } @rows), 0,
		'every recorded critical section has an end');
	my ($overlaps, $token_regressions) = (0, 0);
	for my $k (1 .. $#rows)
	{
		my ($prev, $cur) = @rows[ $k - 1, $k ];
		if ($cur->[4] < $prev->[5])
		{
			$overlaps++;
			diag "overlap: @$prev / @$cur";
		}
		if ($cur->[3] <= $prev->[3])
		{
			$token_regressions++;
			diag "token did not grow: @$prev / @$cur";
		}
	}
	is($overlaps, 0, scalar(@rows) . ' critical sections, none overlapping');
	is($token_regressions, 0, 'fencing tokens strictly increase');
	return scalar @rows;
}

# The wait event pg_stat_activity shows for a backend waiting in zklock on
# $node, of type Extension: zklock's own from PostgreSQL 17 on, the generic
# one before (see src/compat.h).
sub zklock_wait_event
{
	my ($node) = @_;
	return $node->pg_version >= 17 ? 'ZkLockWait' : 'Extension';
}

# Wait until a backend with this application_name waits in zklock.
sub wait_for_wait_event
{
	my ($node, $appname) = @_;
	return $node->poll_query_until('postgres', qq{
SELECT wait_event_type || '/' || wait_event FROM pg_stat_activity
 WHERE application_name = '$appname'}, 'Extension/' . zklock_wait_event($node));
}

# True while the backend that $where picks out (a condition on
# pg_stat_activity) still runs its statement and waits in zklock.  A waiter
# leaves its wait for a moment whenever a watch or its deadlock check wakes
# it, so one look may miss the wait: look again, for up to two seconds,
# until it shows or the statement is over.
sub still_waits
{
	my ($node, $where) = @_;
	my $want = 'active/' . zklock_wait_event($node);
	for (1 .. 100)
	{
		my $seen = $node->safe_psql('postgres',
			"SELECT state || '/' || coalesce(wait_event, '') FROM pg_stat_activity WHERE $where");
		return 1 if $seen eq $want;
		return 0 if $seen !~ m{^active/};
		sleep(0.02);
	}
	return 0;
}

# A background psql session on $node, named $name, that goes on after errors.
sub session
{
	my ($node, $name) = @_;
	my $s = $node->background_psql('postgres', on_error_stop => 0, timeout => 300);
	$s->query_safe("SET application_name = '$name'");
	return $s;
}

# Send SQL without waiting for it; wait_marker collects its output later.
sub send_query
{
	my ($s, $sql, $marker) = @_;
	$s->{stdin} .= "$sql;\n\\echo $marker\n";
	$s->{run}->pump_nb;
	return;
}

sub wait_marker
{
	my ($s, $marker) = @_;
	return $s->query_until(qr/\Q$marker\E/, '');
}

# A call of one value in session $s, not waited for: its output is the
# line "$tag|<value>", then "${tag}_done" on stdout and on stderr.
sub send_call
{
	my ($s, $tag, $sql) = @_;
	$s->{stdin} .= "SELECT '$tag', ($sql);\n\\echo ${tag}_done\n\\warn ${tag}_done\n";
	$s->{run}->pump_nb;
	return;
}

# Whether that call has returned, without waiting.
sub call_returned
{
	my ($s, $tag) = @_;
	$s->{run}->pump_nb;
	return $s->{stdout} =~ /\Q${tag}_done\E/;
}

# Its value (undef if it failed) and what it wrote on stderr (its ERROR,
# with the session's VERBOSITY), once it returned.
sub call_result
{
	my ($s, $tag) = @_;
	my $deadline = time + 300;
	$s->{run}->pump
	  until ($s->{stdout} =~ /\Q${tag}_done\E/ && $s->{stderr} =~ /\Q${tag}_done\E/)
	  || time > $deadline;
	my ($value) = $s->{stdout} =~ /^\Q$tag\E\|(\S*)$/m;
	my ($stderr) = $s->{stderr} =~ /^(.*?)\Q${tag}_done\E\n?/s;
	$s->{stdout} = '';
	$s->{stderr} = '';
	return wantarray ? ($value, $stderr // '') : $value;
}

# The pid of $node's zklock session worker (a child of its postmaster), or
# undef if there is none; waits up to 30 s for one to appear.
sub worker_pid
{
	my ($node) = @_;
	my $t0 = time;
	while (time - $t0 < 30)
	{
		my $pm = $node->{_pid};
		if (open my $fh, '-|', 'pgrep', '-P', $pm, '-f', 'zklock session worker')
		{
			my $pid = <$fh>;
			close $fh;
			if ($pid) { chomp $pid; return $pid; }
		}
		sleep 0.1;
	}
	return undef;
}

# A process under gdb (test 054, 055): (whether a tracer is attached, whether
# it is in a tracing stop: at a breakpoint, or not yet let go).
sub traced_state
{
	my ($pid) = @_;
	my $status = slurp_file("/proc/$pid/status");
	return ($status =~ /^TracerPid:\s*[1-9]/m ? 1 : 0,
		$status =~ /^State:\s*t/m ? 1 : 0);
}

# gdb attached to $pid with the breakpoint $command, the process let go
# on; the signals PostgreSQL uses pass through without stopping it.
# Returns once the breakpoint is in place.
sub gdb_attach
{
	my ($pid, $command) = @_;
	my $g = { pid => $pid, in => '', out => '' };
	$g->{run} = IPC::Run::start([ 'gdb', '-q', '-nx', '-p', $pid ],
		'<', \$g->{in}, '>', \$g->{out}, '2>&1');
	$g->{in} .= "set pagination off\n"
	  . "handle SIGTERM SIGHUP SIGINT SIGUSR1 SIGUSR2 SIGURG nostop noprint pass\n"
	  . "$command\ncontinue\n";
	my $t0 = time;
	while (time - $t0 < 60)
	{
		$g->{run}->pump_nb;
		my ($traced, $stopped) = traced_state($pid);
		return $g if $g->{out} =~ /Continuing\./ && $traced && !$stopped;
		sleep 0.05;
	}
	die "gdb did not set its breakpoint ($command):\n$g->{out}";
}

# A breakpoint at $where: gdb_wait_hit waits for the process to stop there,
# gdb_let_go lets it go on, without gdb.
sub gdb_break
{
	my ($pid, $where) = @_;
	return gdb_attach($pid, "break $where");
}

# Count the process's passes at $where without stopping it (gdb_passes);
# gdb_let_go ends the count.
sub gdb_count
{
	my ($pid, $where) = @_;
	return gdb_attach($pid, qq{dprintf $where,"zklock-test passed $where\\n"});
}

sub gdb_passes
{
	my ($g) = @_;
	$g->{run}->pump_nb;
	my @passes = $g->{out} =~ /^zklock-test passed /mg;
	return scalar @passes;
}

# True once the process stopped at the breakpoint (the $n-th set, default
# the first), false after $timeout s.
sub gdb_wait_hit
{
	my ($g, $timeout, $n) = @_;
	$n //= 1;
	my $t0 = time;
	while (time - $t0 < ($timeout // 30))
	{
		$g->{run}->pump_nb;
		my ($traced, $stopped) = traced_state($g->{pid});
		return 1 if $traced && $stopped && $g->{out} =~ /Breakpoint $n, /;
		sleep 0.02;
	}
	return 0;
}

sub gdb_let_go
{
	my ($g) = @_;
	$g->{in} .= "delete\ndetach\nquit\n";
	$g->{run}->finish;
	return $g->{out};
}

# Wait until $node's server session is connected (as zk_session() says);
# returns the seconds it took, or undef after $timeout (default 30) seconds.
sub wait_worker_session
{
	my ($node, $timeout) = @_;
	my $t0 = time;
	while (time - $t0 < ($timeout // 30))
	{
		my $state = $node->safe_psql('postgres', 'SELECT state FROM zk_session()');
		return time - $t0 if $state eq 'connected';
		sleep 0.05;
	}
	return undef;
}

# Change server-wide settings in $node's configuration and reload: the
# session worker closes its session and opens another.  Returns once the old
# session is gone (true), or false after 30 s.
sub reconfigure
{
	my ($node, %conf) = @_;
	my $old = $node->safe_psql('postgres', 'SELECT session_id FROM zk_session()');
	$node->append_conf('postgresql.conf',
		join '', map { "$_ = '$conf{$_}'\n" } sort keys %conf);
	$node->reload;
	my $t0 = time;
	while (time - $t0 < 30)
	{
		return 1
		  if $node->safe_psql('postgres', 'SELECT session_id FROM zk_session()') ne $old;
		sleep 0.05;
	}
	return 0;
}

sub zk_session_field
{
	my ($s, $field) = @_;
	return $s->query_safe("SELECT $field FROM zk_session()");
}

# Many backends at once, as dblink's connections from a few coordinator
# sessions of $node (a backend may hold only so many connections of its own:
# a third of its file descriptors): connection i (1..$n), named $app<i>,
# is sent $query, a PL/pgSQL text expression in i that returns one boolean
# row; the statement runs while dblink_true_count waits for the answers.
# Needs CREATE EXTENSION dblink.  Returns the coordinators.
sub dblink_send_many
{
	my ($node, $n, $coordinators, $app, $query) = @_;
	my $conn = sprintf('host=%s port=%d dbname=postgres', $node->host, $node->port);
	my $per = $n / $coordinators;
	my @coord = map { $node->background_psql('postgres', timeout => 300) } 1 .. $coordinators;
	for my $k (0 .. $#coord)
	{
		my ($from, $to) = ($k * $per + 1, ($k + 1) * $per);
		$coord[$k]->query_safe(qq{
DO \$\$
BEGIN
  FOR i IN $from..$to LOOP
    PERFORM dblink_connect('c' || i, '$conn application_name=$app' || i);
    PERFORM dblink_send_query('c' || i, $query);
  END LOOP;
END \$\$});
	}
	return \@coord;
}

# How many of dblink_send_many's connections answered true.
sub dblink_true_count
{
	my ($coord, $n) = @_;
	my $per = $n / @$coord;
	my $count = 0;
	for my $k (0 .. $#$coord)
	{
		my ($from, $to) = ($k * $per + 1, ($k + 1) * $per);
		$count += $coord->[$k]->query_safe(qq{
SELECT count(*) FILTER (WHERE r) FROM generate_series($from, $to) AS i,
       LATERAL dblink_get_result('c' || i) AS t(r boolean)});
	}
	return $count;
}

# Run $sql in session $s until it answers $want, $timeout seconds at most
# (default 10); returns its last answer.
sub poll_query
{
	my ($s, $sql, $want, $timeout) = @_;
	my $deadline = time + ($timeout // 10);
	while (1)
	{
		my $got = $s->query_safe($sql);
		return $got if $got eq $want || time > $deadline;
		sleep_for(0.01);
	}
}

# Poll zk_session().state in $s until it is $state; returns the seconds it
# took, or undef on timeout.
sub wait_session_state
{
	my ($s, $state, $timeout) = @_;
	my $t0 = time;
	return poll_query($s, 'SELECT state FROM zk_session()', $state, $timeout // 60) eq $state
	  ? time - $t0
	  : undef;
}

# A holder's critical section, recorded inside the transaction that holds the
# lock: only committed sections count, which is what the commit guard is for.
sub cs_begin_sql
{
	my ($lock, $worker) = @_;
	return qq{BEGIN;
SELECT zk_lock_xact_acquire('$lock');
INSERT INTO cs SELECT current_setting('cluster_name'), '$worker', 0,
                      zk_lock_token('$lock'), clock_timestamp(), NULL};
}

sub cs_end_sql
{
	my ($worker) = @_;
	return qq{UPDATE cs SET finished = clock_timestamp()
 WHERE worker = '$worker' AND finished IS NULL;
COMMIT};
}

# One critical section in one statement: for waiters.
sub cs_waiter_sql
{
	my ($lock, $worker, $timeout_ms) = @_;
	$timeout_ms //= 'NULL';
	return qq{DO \$\$
DECLARE
  t0 timestamptz;
BEGIN
  IF zk_lock_xact_acquire('$lock', $timeout_ms) THEN
    t0 := clock_timestamp();
    PERFORM pg_sleep(0.02);
    INSERT INTO cs VALUES (current_setting('cluster_name'), '$worker', 0,
                           zk_lock_token('$lock'), t0, clock_timestamp());
  END IF;
END \$\$};
}

# The lock nodes queued under a lock's parent, in queue order.
sub queue_nodes
{
	my ($zk, $lock) = @_;
	my $parent = ZK_ROOT . "/$lock";
	return [ sort { substr($a, -10) <=> substr($b, -10) }
		  map { $_->[0] }
		  grep { $_->[0] =~ m{^\Q$parent\E/} } @{ $zk->ephemerals(ZK_ROOT) } ];
}

# SIGSTOP every server and wait until $holder's session is suspended and
# its lock uncertain.  Returns when the freeze began.
sub freeze_until_suspended
{
	my ($zk, $holder, $lock) = @_;
	my $t0 = time;
	$zk->signal($_, 'STOP') for $zk->running;
	my $suspended_after = wait_session_state($holder, 'suspended', 30);
	ok(defined $suspended_after, 'holder notices the silence: session suspended');
	note sprintf('servers frozen: session suspended after %.2f s', $suspended_after // -1);
	is($holder->query_safe(qq{SELECT state FROM zk_locks WHERE name = '$lock'}),
		'uncertain', 'its lock is uncertain');
	return $t0;
}

# The checks every test ends with, then stop everything.  $timeout: how
# long nodes of dead sessions may take to go (default 20 s).
sub finish_checks
{
	my ($zk, $nodes, $timeout) = @_;
	no_orphans_ok($zk, 'no znode without a live owner');
	$_->stop for @$nodes;
	tree_empty_ok($zk, 'no lock node left once the nodes are stopped', $timeout);
	$zk->stop_proxy;
	$zk->stop;
	return;
}

# The LD_PRELOAD stand-in for DNS (test/zk/fakedns.c), built once per test
# run: host names under .zklock.test resolve (or not) without a name server.
sub fakedns_lib
{
	my $lib = "$PostgreSQL::Test::Utils::tmp_check/fakedns.so";
	return $lib if -f $lib;
	my $src = dirname(__FILE__) . '/../zk/fakedns.c';
	system('cc', '-shared', '-fPIC', '-O2', '-Wall', '-Werror', '-o', $lib, $src, '-ldl') == 0
	  or die "could not build $src";
	return $lib;
}

sub elapsed_since
{
	my ($t0) = @_;
	return time - $t0;
}

1;
