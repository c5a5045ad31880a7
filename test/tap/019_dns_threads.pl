
# The ZooKeeper client's threads and host names that do not resolve, or
# resolve slowly.
#
# 1. A host in zklock.hosts that does not resolve makes the client's IO
#    thread log an error, from inside its host resolution, under the
#    client's own lock, whenever it resolves.  zklock must never hold its own
#    mutex while asking the client anything, or the two threads wait for
#    each other and the backend freezes for good (it used to, in 3 of 4
#    tries).  50 rounds: a new backend queues for a held lock while the
#    proxy drops its connections, so that it reconnects while the IO thread
#    resolves; then pg_terminate_backend must end it within 1 s.
# 2. A name server that does not answer: the backend resolves host names
#    when it opens a session, and must stay cancellable and terminable
#    meanwhile, within 1 s.
# 3. A connected session does not resolve its hosts again on every pass of
#    the IO thread (thousands of look-ups under load otherwise).

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep time);

use ZklockTest;

my $rounds = 50;
my $zk = start_zk();
my $proxied = $zk->start_proxy;
my $dns_log = "$PostgreSQL::Test::Utils::tmp_check/dns.log";
my $node_a = do {
	local $ENV{LD_PRELOAD} = fakedns_lib();
	local $ENV{ZKLOCK_FAKEDNS_LOG} = $dns_log;
	local $ENV{ZKLOCK_FAKEDNS_SLOW_MS} = 30000;
	zk_node('node_a', $zk, 'zklock.hosts' => "$proxied,gone.zklock.test:2181");
};
my $node_b = zk_node('node_b', $zk);

my $holder = session($node_b, 'holder');
$holder->query_safe(q{SELECT zk_lock_acquire('dns')});
my $admin = session($node_a, 'admin');

# Seconds until the backend with this pid has left pg_stat_activity, undef
# if it has not after $limit seconds.
sub gone_after
{
	my ($pid, $t0, $limit) = @_;
	while (time - $t0 < $limit)
	{
		return time - $t0
		  if $admin->query_safe("SELECT count(*) FROM pg_stat_activity WHERE pid = $pid") eq '0';
		sleep 0.01;
	}
	return undef;
}

my ($frozen, $slowest) = (0, 0);
for my $round (1 .. $rounds)
{
	my $waiter = session($node_a, "waiter$round");
	my $pid = $waiter->query_safe('SELECT pg_backend_pid()');
	send_query($waiter, q{SELECT zk_lock_acquire('dns')}, 'acquired');
	# Reconnects, each a session event for the watcher, while the IO thread
	# resolves (and fails on) gone.zklock.test.
	$zk->proxy_signal('USR1') for 1 .. 3;
	my $waiting = $node_a->poll_query_until('postgres', qq{
SELECT count(*) = 1 FROM pg_stat_activity
 WHERE pid = $pid AND wait_event_type = 'Extension'});
	my $t0 = time;
	$admin->query_safe("SELECT pg_terminate_backend($pid)");
	my $took = gone_after($pid, $t0, 10);
	if (!$waiting || !defined $took || $took > 1)
	{
		$frozen++;
		diag sprintf('round %d: waiting %s, terminated after %s', $round,
			$waiting ? 'yes' : 'no', defined $took ? sprintf('%.2f s', $took) : 'never');
		# A frozen backend ignores everything but SIGKILL.
		kill 'KILL', $pid unless defined $took;
		last unless defined $took;
	}
	$slowest = $took if defined $took && $took > $slowest;
	eval { $waiter->quit };
}
is($frozen, 0, "$rounds waiters reconnecting beside an unresolvable host: none froze, each terminated within 1 s");
note sprintf('slowest termination: %.3f s', $slowest);

# 3. Host names are resolved when the session opens, not on every pass of
# the IO thread: 200 lock cycles are 600 requests and as many passes.
unlink $dns_log;
my $busy = session($node_a, 'busy');
$busy->query_safe(q{SET zklock.hosts = 'lo.zklock.test:} . $zk->client_port(1) . q{'});
my $busy_pid = $busy->query_safe('SELECT pg_backend_pid()');
$busy->query_safe(q{
DO $$ BEGIN
  FOR i IN 1..200 LOOP
    PERFORM zk_lock_acquire('busy'); PERFORM zk_lock_release('busy');
  END LOOP;
END $$});
my @lookups = do {
	open my $fh, '<', $dns_log or die "$dns_log: $!";
	grep { /^lo\.zklock\.test $busy_pid$/ } <$fh>;
};
# Opening resolves once, and the IO thread again on each pass until the
# first connection is up: a handful.  Resolving on every pass made it 1310.
cmp_ok(scalar @lookups, '<=', 5,
	'200 lock cycles on one session resolve its host when connecting, not again (' . scalar(@lookups) . ' look-ups)');
$busy->quit;

# 2. A name server that never answers, while the backend opens a session.
for my $how ('cancel', 'terminate')
{
	my $s = session($node_a, "slow_$how");
	my $pid = $s->query_safe('SELECT pg_backend_pid()');
	$s->query_safe(q{SET zklock.hosts = 'slow.zklock.test:2181'});
	send_query($s, q{SELECT zk_lock_try_acquire('slow')}, 'done');
	$node_a->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE pid = $pid AND state = 'active'");
	sleep_for(0.5);    # well inside the look-up
	my $t0 = time;
	if ($how eq 'cancel')
	{
		$admin->query_safe("SELECT pg_cancel_backend($pid)");
		my $out = wait_marker($s, 'done');
		my $took = time - $t0;
		like($s->{stderr}, qr/canceling statement due to user request/,
			'a session opening with a name server that does not answer is cancelled');
		cmp_ok($took, '<', 1, sprintf('within 1 s (%.2f s)', $took));
		$s->{stderr} = '';
		is($s->query_safe(q{SELECT state FROM zk_session()}), 'none',
			'and has no session afterwards');
		$s->quit;
	}
	else
	{
		$admin->query_safe("SELECT pg_terminate_backend($pid)");
		my $took = gone_after($pid, $t0, 10);
		ok(defined $took && $took < 1,
			sprintf('terminated while resolving, within 1 s (%s)',
				defined $took ? sprintf('%.2f s', $took) : 'never'));
		eval { $s->quit };
	}
}

$admin->quit;
$holder->query_safe(q{SELECT zk_lock_release('dns')});
$holder->quit;
finish_checks($zk, [ $node_a, $node_b ]);
done_testing();
