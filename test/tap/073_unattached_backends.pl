
# A backend that never used zklock pays nothing for its revocation hooks
# (issue 48.5).  The executor hook asks whether a statement is the
# client's, which for an extended-protocol portal means comparing the
# portal's whole query text with the message's; 1.6 did that in every
# backend of a server that preloads zklock, for every statement.  It is
# needed only by a backend attached to zklock.
#
# pgbench sends statements with the extended protocol; gdb counts the
# backend's passes through client_portal() (a dprintf: it never stops the
# backend).  Three statements before any zklock call pass it 0 times (1.6:
# 3); once the backend has called zklock, statements pass it again.

use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

use ZklockTest;

my $zk = start_zk();
my $node = zk_node('node_a', $zk);
my $dir = $PostgreSQL::Test::Utils::tmp_check;
my ($go1, $done1, $go2) = map { "$dir/portal.$_" } qw(go1 done1 go2);
unlink $go1, $done1, $go2;

# Each \shell waits for the test's go-ahead, 60 s at most: pgbench must not
# outlive a test that failed.
my $script = "$dir/portal.pgbench";
my $wait = 'for i in $(seq 1200); do [ -e %s ] && break; sleep 0.05; done';
open my $fh, '>', $script or die "$script: $!";
printf $fh <<"EOF", $go1, $go2;
\\shell $wait
SELECT 1;
SELECT 2;
SELECT 3;
\\shell touch $done1; $wait
SELECT state FROM zk_session();
SELECT 4;
EOF
close $fh;

my ($out, $err) = ('', '');
my $pgbench = IPC::Run::start(
	[ 'pgbench', '-n', '-M', 'extended', '-c', '1', '-t', '1', '-f', $script,
		sprintf('host=%s port=%d dbname=postgres application_name=portal_client',
			$node->host, $node->port) ],
	'>', \$out, '2>', \$err);
END { $pgbench->kill_kill if $pgbench && $pgbench->pumpable; }

sub wait_for_file
{
	my ($file) = @_;
	my $t0 = time;
	while (!-e $file)
	{
		return 0 if time - $t0 > 60;
		$pgbench->pump_nb;
		sleep_for(0.05);
	}
	return 1;
}

ok($node->poll_query_until('postgres',
		q{SELECT count(*) FROM pg_stat_activity WHERE application_name = 'portal_client'}, '1'),
	'pgbench is connected')
  or die "pgbench did not connect: $err";
my $pid = $node->safe_psql('postgres',
	q{SELECT pid FROM pg_stat_activity WHERE application_name = 'portal_client'});
my $gdb = gdb_count($pid, 'client_portal');

open my $touch, '>', $go1 or die "$go1: $!";
close $touch;
ok(wait_for_file($done1), 'three statements ran in a backend that never called zklock');
my $before = gdb_passes($gdb);
is($before, 0, "they never compared query texts ($before passes; 1.6: 3)");

open $touch, '>', $go2 or die "$go2: $!";
close $touch;
$pgbench->finish;
like($out, qr/number of transactions actually processed: 1\/1/, 'pgbench ran its script')
  or diag $err;
my $after = gdb_passes($gdb) - $before;
cmp_ok($after, '>=', 1, "once it called zklock, its statements do ($after passes)");
gdb_let_go($gdb);

finish_checks($zk, [$node]);
done_testing();
