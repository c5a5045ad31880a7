
# What users and operators are told (issue 42, items 4, 5, 14 and 15):
# - max_worker_processes too low for the session worker to be registered:
#   the first zklock call fails at once (53400), naming the setting, where it
#   waited zklock.connect_timeout for a worker that never comes and said
#   "the postmaster restarts it";
# - binary-upgrade mode (postgres -b, as pg_upgrade starts it): zk_session()
#   says so, where it said "must be loaded via shared_preload_libraries";
# - a reload that changes zklock.session_timeout closes the session: the
#   lost lock's WARNING says that, not "expired or was disconnected";
# - blocked_by and the deadlock report name a server by cluster_name and
#   host:port, as members of a Patroni cluster share their cluster_name.
#
# Runs alone: a message is bounded at 2.5 s.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Sys::Hostname;
use Test::More;
use Time::HiRes qw(time);

use ZklockTest;

my $zk = start_zk();

# 1. No room for the session worker.
my $full = zk_node('full', $zk, 'max_worker_processes' => 0,
	'zklock.connect_timeout' => 5000);
my $t0 = time;
my ($rc, $out, $err) = $full->psql('postgres', q{SELECT zk_lock_acquire('x')},
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
my $took = elapsed_since($t0);
isnt($rc, 0, 'max_worker_processes = 0: an acquisition fails');
like($err, qr/ERROR:  53400: zklock session worker was not started: max_worker_processes is too low/,
	'with 53400, naming max_worker_processes');
like($err, qr/HINT:  Raise max_worker_processes/, 'and its HINT says what to do');
cmp_ok($took, '<', 2.5, sprintf('at once (%.2f s), not after connect_timeout (5 s)', $took));
is($full->safe_psql('postgres', 'SELECT state FROM zk_session()'), 'none',
	'zk_session() says none');
$full->stop;

# 2. Binary-upgrade mode.
my $up = zk_node('up', $zk);
$up->stop;
command_ok([ 'pg_ctl', '-D', $up->data_dir, '-l', $up->logfile, '-w', '-o', '-b', 'start' ],
	'the server starts in binary-upgrade mode');
$up->_update_pid(1);
($rc, $out, $err) = $up->psql('postgres', 'SELECT state FROM zk_session()');
like($err, qr/zklock does not run in binary-upgrade mode/,
	'binary-upgrade mode: zk_session() says so');
unlike($err, qr/shared_preload_libraries/, 'and does not ask to preload zklock, which is preloaded');
$up->stop;

# 3. A reload that changes zklock.session_timeout.
my $node_a = zk_node('node_a', $zk);
my $node_b = zk_node('node_b', $zk);
my $holder = $node_a->background_psql('postgres', on_error_stop => 0);
$holder->query_safe(q{SELECT zk_lock_acquire('r')});
ok(reconfigure($node_a, 'zklock.session_timeout' => 8000), 'reload: the session is replaced');
$holder->query(q{SELECT zk_lock_acquire('r2')});
like($holder->{stderr},
	qr/WARNING:  zklock lock "r" was lost\nDETAIL:  The server's session worker closed its ZooKeeper session because zklock.hosts, zklock.session_timeout or zklock.auth changed at a reload/,
	'the next call says the session was closed for the changed settings')
  or diag $holder->{stderr};
$holder->{stderr} = '';
$holder->query_safe(q{SELECT zk_lock_release_all()});

# 4. A server's name: cluster_name@host:port.
my $host = hostname();
$holder->query_safe(q{SELECT zk_lock_acquire('named')});
my $holder_pid = $holder->query_safe('SELECT pg_backend_pid()');
my $waiter = $node_b->background_psql('postgres', timeout => 60);
$waiter->query_safe(q{SET application_name = 'named_waiter'});
$waiter->{stdin} .= "SELECT 'granted', zk_lock_acquire('named');\n";
$waiter->{run}->pump_nb;
ok(wait_for_wait_event($node_b, 'named_waiter'), 'a waiter queues on node_b');
is($node_b->safe_psql('postgres', q{SELECT blocked_by FROM zk_lock_holders('named') WHERE NOT holding}),
	sprintf('{node_a@%s:%d/%d}', $host, $node_a->port, $holder_pid),
	'blocked_by names the holder\'s server by cluster_name and host:port');
$holder->query_safe(q{SELECT zk_lock_release('named')});
like($waiter->query_until(qr/granted/, ''), qr/granted\|t/, 'the waiter is granted');
$waiter->query_safe(q{SELECT zk_lock_release('named')});
$waiter->quit;
$holder->quit;

finish_checks($zk, [ $node_a, $node_b ]);
done_testing();
