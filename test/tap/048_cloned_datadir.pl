
# A copy of a running server's data directory must not end its ZooKeeper
# session (issue 25.4).  The session file lets a worker that follows a
# crash end its predecessor's session at once; but snapshots, cloned VMs and
# containers copy it, with the same host name and, often, the same path.
#
# 1. pg_basebackup does not copy the file.
# 2. A snapshot copy (every file, no postmaster.pid, as a restored copy has
#    none) whose file names the copy's own host and path, as it does when the
#    copy runs at the same path (a mount namespace, a cloned VM, a
#    container): started, it leaves the original's session alone (the
#    postmaster that wrote the file still runs), says so in its log, and the
#    original's lock stays held.
# 3. The fast clean-up still works where the session is provably the
#    server's own: after an immediate shutdown and a start (same boot, its
#    postmaster gone), the other node gets the lock at once, not after the
#    session timeout.

use strict;
use warnings;

use File::Find;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::RecursiveCopy;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

use ZklockTest;

my $session_timeout_ms = 10000;
my $zk = start_zk();
# With WAL senders, for pg_basebackup.
my $node_a = zk_node('node_a', $zk, allows_streaming => 1,
	'zklock.session_timeout' => $session_timeout_ms);
my $node_b = zk_node('node_b', $zk);

my $holder = session($node_a, 'holder');
$holder->query_safe(q{SELECT zk_lock_acquire('clone')});
my $session_file = $node_a->data_dir . '/pg_dynshmem/zklock.session';
ok(-f $session_file, 'the session file is in pg_dynshmem');
is(sprintf('%o', (stat $session_file)[2] & 07777), '600', 'readable by the server only');

# 1. A base backup.
$node_a->backup('base');
my @copied;
find(sub { push @copied, $File::Find::name if /zklock\.session/ }, $node_a->backup_dir . '/base');
is_deeply(\@copied, [], 'pg_basebackup does not copy it');

# 2. A snapshot of every file.
$node_a->safe_psql('postgres', 'CHECKPOINT');
my $snapshot = $node_a->backup_dir . '/snapshot';
PostgreSQL::Test::RecursiveCopy::copypath($node_a->data_dir, $snapshot,
	filterfn => sub { $_[0] !~ /^postmaster\.(pid|opts)$/ });
my $clone = PostgreSQL::Test::Cluster->new('clone');
$clone->init_from_backup($node_a, 'snapshot');
$clone->append_conf('postgresql.conf', "cluster_name = 'clone'\n");
# The file names the place it was written for; a copy that runs at the same
# path finds its own place there.
my ($clone_file) = grep { -f } map { $clone->data_dir . "/$_" } 'pg_dynshmem/zklock.session', 'zklock.session';
my $text = slurp_file($clone_file);
my $place = (split /\n/, $text)[1];
$place =~ s/:.*$/:/;
$text =~ s/^([^\n]*\n)[^\n]*\n/$1$place@{[ $clone->data_dir ]}\n/;
open my $fh, '>', $clone_file or die "$clone_file: $!";
print $fh $text;
close $fh;

my $t0 = time;
$clone->start;
ok(defined wait_worker_session($clone), "the copy's worker opens a session of its own");
like(slurp_file($clone->logfile),
	qr/zklock: not ending ZooKeeper session 0x[0-9a-f]+ named in file "pg_dynshmem\/zklock.session": it is not provably this server's/,
	'it says why it leaves the session named in its file alone');
is($node_b->safe_psql('postgres', q{SELECT zk_lock_try_acquire('clone')}), 'f',
	"the original's lock is still held");
is($holder->query_safe(q{SELECT state FROM zk_locks WHERE name = 'clone'}), 'held',
	'and its holder still holds it');
$clone->stop;

# 3. An immediate shutdown and a start: the session is this server's own.
$holder->quit;
$node_a->stop('immediate');
$node_a->start;
ok(defined wait_worker_session($node_a), 'node_a starts again');
$t0 = time;
is($node_b->safe_psql('postgres', q{SELECT zk_lock_acquire('clone', 20000)}), 't',
	'the other node gets the lock');
my $took = time - $t0;
cmp_ok($took, '<', $session_timeout_ms / 2000,
	sprintf('at once, the old session ended by the new worker (%.2f s; the session timeout is %d s)',
		$took, $session_timeout_ms / 1000));
like(slurp_file($node_a->logfile), qr/zklock: closed ZooKeeper session 0x[0-9a-f]+; the locks it held are free/,
	'its log says so');

finish_checks($zk, [ $node_a, $node_b ]);
done_testing();
