
# Host names that do not resolve, or resolve slowly.  The session worker
# resolves zklock.hosts (the client does it, synchronously) when it opens
# its session and when it reconnects; backends never do, and stay
# cancellable and terminable whatever the worker waits for.
#
# 1. A host in zklock.hosts that does not resolve, beside one that does:
#    locks work, and 50 times a new backend queues for a held lock while the
#    proxy drops the worker's connections, so that it reconnects (and
#    resolves) meanwhile; pg_terminate_backend must end it within 1 s.
# 2. A name server that does not answer (node_c): the worker waits for it;
#    a backend waiting for the session meanwhile is cancelled, and
#    terminated, within 1 s.
# 3. A connected session does not resolve its hosts again on every turn of
#    the client (thousands of look-ups under load otherwise).
#
# Runs alone: terminations are bounded at 1 s, 50 times.

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

# 3. 200 lock cycles, a request and a reply each way every time: the worker
# resolves nothing meanwhile (it resolved when it connected).
my $worker = worker_pid($node_a);
ok(defined wait_worker_session($node_a), 'node_a has its session beside an unresolvable host');
unlink $dns_log;
$node_a->safe_psql('postgres', q{
DO $$ BEGIN
  FOR i IN 1..200 LOOP
    PERFORM zk_lock_acquire('busy'); PERFORM zk_lock_release('busy');
  END LOOP;
END $$});
my @lookups = -e $dns_log ? do {
	open my $fh, '<', $dns_log or die "$dns_log: $!";
	grep { / $worker$/ } <$fh>;
} : ();
is(scalar @lookups, 0, '200 lock cycles on a connected session resolve no host name');

my $holder = session($node_b, 'holder');
$holder->query_safe(q{SELECT zk_lock_acquire('dns')});
my $admin = session($node_a, 'admin');

# Seconds until the backend with this pid has left pg_stat_activity, undef
# if it has not after $limit seconds.
sub gone_after
{
	my ($pid, $t0, $limit, $on) = @_;
	$on //= $admin;
	while (time - $t0 < $limit)
	{
		return time - $t0
		  if $on->query_safe("SELECT count(*) FROM pg_stat_activity WHERE pid = $pid") eq '0';
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
	# Reconnects of the worker, each resolving (and failing on)
	# gone.zklock.test.
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

# 2. A name server that does not answer for 10 s, while node_c's worker
# opens its first session: backends wait for that try (after a failed one
# they would get its error at once: 039).
my $node_c = do {
	local $ENV{LD_PRELOAD} = fakedns_lib();
	local $ENV{ZKLOCK_FAKEDNS_SLOW_MS} = 10000;
	zk_node('node_c', $zk, 'zklock.hosts' => 'slow.zklock.test:2181',
		'zklock.connect_timeout' => 3000);
};
my $admin_c = session($node_c, 'admin');
for my $how ('cancel', 'terminate')
{
	my $s = session($node_c, "slow_$how");
	my $pid = $s->query_safe('SELECT pg_backend_pid()');
	send_query($s, q{SELECT zk_lock_try_acquire('slow')}, 'done');
	$node_c->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE pid = $pid AND state = 'active'");
	sleep_for(0.5);    # well inside the look-up
	my $t0 = time;
	if ($how eq 'cancel')
	{
		$admin_c->query_safe("SELECT pg_cancel_backend($pid)");
		my $out = wait_marker($s, 'done');
		my $took = time - $t0;
		like($s->{stderr}, qr/canceling statement due to user request/,
			'a backend waiting for a session whose host names do not resolve is cancelled');
		cmp_ok($took, '<', 1, sprintf('within 1 s (%.2f s)', $took));
		$s->{stderr} = '';
		is($s->query_safe(q{SELECT count(*) FROM zk_locks}), '0', 'and holds nothing');
		$s->quit;
	}
	else
	{
		$admin_c->query_safe("SELECT pg_terminate_backend($pid)");
		my $took = gone_after($pid, $t0, 10, $admin_c);
		ok(defined $took && $took < 1,
			sprintf('terminated while resolving, within 1 s (%s)',
				defined $took ? sprintf('%.2f s', $took) : 'never'));
		eval { $s->quit };
	}
}

$admin->quit;
$admin_c->quit;
$holder->query_safe(q{SELECT zk_lock_release('dns')});
$holder->quit;
finish_checks($zk, [ $node_a, $node_b, $node_c ]);
done_testing();
