
# Single-user mode (issue 48.2): postgres --single with zklock preloaded has
# no postmaster, no session worker and no ZooKeeper session.  Every zklock
# function that needs them fails with one clear error (55000, "zklock does
# not run in single-user mode"), however many times it is called, and
# leaves no file descriptor behind.  1.6 added the postmaster's death to an
# epoll set that it could not add to and leaked the set at every call
# ("epoll_ctl() failed: Bad file descriptor", then "Too many open files").
# The fence needs no session and works there.

use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;

use ZklockTest;

my $calls = 200;
my $zk = ZkServer->new;    # never started: single-user mode opens no session
my $node = zk_node('node_a', $zk);
$node->stop;

my @functions = (
	q{SELECT zk_lock_acquire('a')},
	q{SELECT zk_lock_try_acquire_shared('a')},
	q{SELECT zk_lock_release('a')},
	q{SELECT zk_semaphore_acquire('s', 2, 0)},
	q{SELECT * FROM zk_session()},
	q{SELECT * FROM zk_locks},
	q{SELECT * FROM zk_lock_stats},
	q{SELECT * FROM zk_cluster_locks},
	q{SELECT zk_lock_fence('a')});
# The files open are counted once every function was called (the catalogs
# they read stay open), and at the end.
my $fds = q{SELECT count(*) AS fds FROM pg_ls_dir('/proc/self/fd')};
my @calls = map { $functions[ $_ % @functions ] . "\n" } 0 .. $calls - 1;
my $input = join '', @calls[ 0 .. $#functions ], "$fds\n",
  @calls[ @functions .. $#calls ], "$fds\n",
  "SELECT zk_lock_fence('resource', 7) AS fenced\n";

my ($out, $err) = ('', '');
IPC::Run::run([ 'postgres', '--single', '-D', $node->data_dir, 'postgres' ],
	'<', \$input, '>', \$out, '2>', \$err, IPC::Run::timeout(300))
  or note "postgres --single exited with $?";

my @clear = $err =~ /ERROR:  zklock does not run in single-user mode/g;
is(scalar @clear, $calls, "each of $calls calls fails with the single-user error");
unlike($err, qr/epoll|Too many open files|max_worker_processes/,
	'none with another error (epoll, file descriptors, worker slots)');
my @others = grep { /ERROR:/ && !/zklock does not run in single-user mode/ } split /\n/, $err;
is_deeply(\@others, [], 'no other error') or diag explain [ @others[ 0 .. ($#others < 4 ? $#others : 4) ] ];

my @counts = $out =~ /fds = "(\d+)"/g;
is(scalar @counts, 2, 'the open files were counted before and after');
is($counts[1], $counts[0],
	sprintf('no file descriptor left behind by the last %d calls (%d open before, %s after)',
		$calls - @functions, $counts[0], $counts[1] // '?'));
like($out, qr/fenced = "7"/, 'the fence works in single-user mode');

done_testing();
