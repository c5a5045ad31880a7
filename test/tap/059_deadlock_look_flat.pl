
# A long wait costs what a short one costs (issue 41, item 5).  Each look
# for a deadlock used to allocate about 250 kB in the waiter's per-call
# memory, kept until the wait ended, and to set the watch on its published
# wait once more, which the session worker kept (one WorkerWatch per look)
# until the wait ended.
#
# One waiter behind a holder with deadlock_timeout = 10ms looks every
# 160 ms.  Between its 20th and its 220th look: the waiter's memory (the
# grand total of pg_log_backend_memory_contexts) grows by less than 1 MB
# (the leak: 50 MB), the worker's by less than 8 kB (the leak: one record
# per look), and over the whole wait the waiter's requests count a handful
# of watches, not one per look.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep);

use ZklockTest;

my ($first, $last) = (20, 220);
my $zk = start_zk();
my $node = zk_node('node_a', $zk, deadlock_timeout => '10ms');

sub counter
{
	my ($s, $column) = @_;
	return $s->query_safe("SELECT $column FROM zk_session_stats");
}

# The memory $pid has allocated, in bytes, as pg_log_backend_memory_contexts
# logs it ("Grand total: ... used").
sub memory_used
{
	my ($pid) = @_;
	my $offset = -s $node->logfile;
	$node->safe_psql('postgres', "SELECT pg_log_backend_memory_contexts($pid)");
	$node->wait_for_log(qr/\[$pid\].*Grand total: .* (\d+) used/, $offset);
	my ($used) = substr(slurp_file($node->logfile), $offset)
	  =~ /\[$pid\][^\n]*Grand total: [^\n]* (\d+) used/;
	return $used;
}

sub wait_for_looks
{
	my ($n) = @_;
	return $node->poll_query_until('postgres',
		"SELECT deadlock_checks >= $n FROM zk_session_stats");
}

my $holder = session($node, 'holder');
$holder->query_safe(q{SELECT zk_lock_acquire('long-wait')});
my $waiter = session($node, 'waiter');
my $pid = $waiter->query_safe('SELECT pg_backend_pid()');
my $worker = worker_pid($node);
# Read by the waiter itself: its request counts are added when it calls.
my $watches0 = counter($waiter, 'watches');
my $looks0 = counter($waiter, 'deadlock_checks');

send_query($waiter, q{SELECT zk_lock_acquire('long-wait', 120000)}, 'granted');
ok(wait_for_looks($looks0 + $first), "the waiter looked $first times");
my ($waiter1, $worker1) = (memory_used($pid), memory_used($worker));
ok(wait_for_looks($looks0 + $last), "... and $last times");
my ($waiter2, $worker2) = (memory_used($pid), memory_used($worker));
ok(still_waits($node, "pid = $pid"), 'still waiting');
note "waiter: $waiter1 -> $waiter2 bytes; worker: $worker1 -> $worker2 bytes";
cmp_ok($waiter2 - $waiter1, '<', 1024 * 1024,
	sprintf('the waiter\'s memory is flat over %d looks: %+d bytes', $last - $first, $waiter2 - $waiter1));
cmp_ok($worker2 - $worker1, '<', 8 * 1024,
	sprintf('the worker\'s memory is flat: %+d bytes', $worker2 - $worker1));

$holder->query_safe(q{SELECT zk_lock_release('long-wait')});
like(wait_marker($waiter, 'granted'), qr/^t$/m, 'the waiter is granted once the holder lets go');
my $looks = counter($waiter, 'deadlock_checks') - $looks0;
my $watches = counter($waiter, 'watches') - $watches0;
note "$looks looks, $watches watches";
cmp_ok($looks, '>=', $last, "$looks looks");
cmp_ok($watches, '<=', 4,
	"the wait set $watches watches (its predecessor's, its published wait's, its node's), not one per look");

$waiter->query_safe(q{SELECT zk_lock_release('long-wait')});
$waiter->quit;
$holder->quit;
finish_checks($zk, [$node]);
done_testing();
