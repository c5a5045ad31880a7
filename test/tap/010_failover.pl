
# Fault injection 1: a 3-server ensemble loses a server, the leader first,
# then the server the holder is connected to, while a transaction on node_a
# holds a lock and node_b waits for it.  The holder keeps its session and its lock (its COMMIT
# succeeds), the waiter keeps its place in the queue and gets the lock once
# the holder commits.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep time);

use ZklockTest;

my $session_timeout_ms = 6000;
my $zk = start_zk(servers => 3);
my ($node_a, $node_b) =
  map { zk_node($_, $zk, 'zklock.session_timeout' => $session_timeout_ms) }
  qw(node_a node_b);
install_cs_log($_) for $node_a, $node_b;

for my $victim_role (qw(leader holders_server))
{
	my $lock = "failover_$victim_role";
	my $holder = session($node_a, "holder_$victim_role");
	$holder->query_safe(cs_begin_sql($lock, "holder_$victim_role"));
	my $session_id = zk_session_field($holder, 'session_id');

	my $waiter = session($node_b, "waiter_$victim_role");
	send_query($waiter, cs_waiter_sql($lock, "waiter_$victim_role"), 'waiter-done');
	ok(wait_for_wait_event($node_b, "waiter_$victim_role"), "$victim_role: waiter queued");
	my $queue = queue_nodes($zk, $lock);
	is(scalar @$queue, 2, "$victim_role: holder and waiter in the queue");

	my $victim = $zk->leader;
	if ($victim_role eq 'holders_server')
	{
		my ($port) = zk_session_field($holder, 'server') =~ /:(\d+)$/;
		($victim) = grep { $zk->client_port($_) == $port } $zk->running;
	}
	my $role = $zk->mode($victim);
	my $log_offset = -s $node_a->logfile;
	my $t0 = time;
	$zk->kill9($victim);
	note "killed server $victim, the $role ($victim_role)";

	# The holder reconnects with the same session and still holds the lock.
	my $took = wait_session_state($holder, 'connected', 30);
	$took = wait_session_state($holder, 'connected', 30)
	  if zk_session_field($holder, 'state') ne 'connected';
	ok(defined $took, "$victim_role: holder's session connected again");
	my $recovered = elapsed_since($t0);
	note sprintf('%s (%s) killed: holder connected again %.2f s later',
		$victim_role, $role, $recovered);
	is(zk_session_field($holder, 'session_id'), $session_id,
		"$victim_role: holder kept its ZooKeeper session");
	isnt(zk_session_field($holder, 'server'), '127.0.0.1:' . $zk->client_port($victim),
		"$victim_role: holder is connected to a surviving server");
	if ($victim_role eq 'holders_server')
	{
		# zklock's own lines tell the story (the client's are DEBUG1).
		my $log = slurp_file($node_a->logfile, $log_offset);
		my $port = $zk->client_port($victim);
		like($log,
			qr/LOG:  zklock: ZooKeeper session $session_id lost its connection to 127\.0\.0\.1:$port; reconnecting/,
			"$victim_role: the server log says the session lost its connection");
		like($log,
			qr/LOG:  zklock: ZooKeeper session $session_id reconnected to 127\.0\.0\.1:(?!$port\b)\d+/,
			"$victim_role: and that it reconnected to another server");
	}
	# The new quorum may cut clients off once more while it settles, which
	# leaves the lock uncertain for a moment; it must come back, never lost.
	my $state;
	for (1 .. 300)
	{
		$state = $holder->query_safe(qq{SELECT state FROM zk_locks WHERE name = '$lock'});
		last if $state ne 'uncertain';
		sleep 0.05;
	}
	is($state, 'held', "$victim_role: holder still holds the lock");
	is_deeply(queue_nodes($zk, $lock), $queue,
		"$victim_role: holder and waiter kept their places");
	ok(still_waits($node_b, "application_name = 'waiter_$victim_role'"),
		"$victim_role: waiter still waits");

	my ($out, $err) = $holder->query(cs_end_sql("holder_$victim_role"));
	is($err, 0, "$victim_role: holder's COMMIT succeeds") or diag $holder->{stderr};
	wait_marker($waiter, 'waiter-done');
	is($waiter->{stderr}, '', "$victim_role: waiter got the lock after the commit")
	  or diag $waiter->{stderr};
	is($node_b->safe_psql('postgres',
		"SELECT count(*) FROM cs WHERE worker = 'waiter_$victim_role'"),
		'1', "$victim_role: waiter's critical section committed");

	$holder->quit;
	$waiter->quit;
	$zk->start($victim);
}

check_critical_sections($node_a, $node_b);
finish_checks($zk, [ $node_a, $node_b ]);
done_testing();
