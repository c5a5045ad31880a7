
# Fault injection 4: connections cut in the middle of acquisitions.  Both
# nodes reach a 3-server ensemble through a TCP proxy that, over and over,
# lets each connection's next request (or its next create) through and then
# cuts the connection, so the server acts on the request but its reply is
# lost (and now and then drops every connection at once).  Six workers loop over a critical section
# meanwhile.  A create whose reply was lost must be found again and adopted
# (or made again if it did not happen): no orphan node, no double grant, and
# every critical section eventually runs.

use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep time);

use ZklockTest;

my $session_timeout_ms = 6000;
my $workers_per_node = 3;
my $iterations = 60;

my $zk = start_zk(servers => 3);
my $proxied = $zk->start_proxy;
my ($node_a, $node_b) = map {
	zk_node($_, $zk,
		'zklock.hosts' => $proxied,
		'zklock.session_timeout' => $session_timeout_ms)
} qw(node_a node_b);
install_cs_log($_) for $node_a, $node_b;

# Each worker: a psql running $iterations critical sections, one
# transaction each, going on after errors.
my @workers;
for my $node ($node_a, $node_b)
{
	for my $w (1 .. $workers_per_node)
	{
		my $name = $node->name . "_w$w";
		my $script = "$PostgreSQL::Test::Utils::tmp_check/$name.sql";
		open my $fh, '>', $script or die "$script: $!";
		print $fh map { cs_waiter_sql('cuts', $name, 15000) . ";\n" } 1 .. $iterations;
		close $fh;
		my ($out, $err) = ('', '');
		my $h = IPC::Run::start(
			[ 'psql', '-X', '-q', '-d', $node->connstr('postgres'), '-f', $script ],
			'<', '/dev/null', '>', \$out, '2>', \$err);
		push @workers, { h => $h, name => $name, err => \$err, node => $node };
	}
}

# Cut connections until the workers are done: "lose the next reply", "lose
# the next create's reply" (so that the lost-create path surely runs), and
# sometimes "drop everything".  A node left behind would stall the queue:
# give up after a while rather than wait for every timeout.
my ($cuts, $create_cuts, $drops) = (0, 0, 0);
my $deadline = time + 120;
while (grep { $_->{h}->pumpable } @workers)
{
	if (time > $deadline)
	{
		fail('workers finished within 120 s');
		$_->{h}->kill_kill for @workers;
		last;
	}
	sleep_for(0.1 + rand(0.3));
	my $r = rand();
	if ($r < 0.15)
	{
		$zk->proxy_signal('USR1');
		$drops++;
	}
	elsif ($r < 0.55)
	{
		$zk->proxy_signal('WINCH');
		$create_cuts++;
	}
	else
	{
		$zk->proxy_signal('USR2');
		$cuts++;
	}
	$_->{h}->pump_nb for grep { $_->{h}->pumpable } @workers;
}
eval { $_->{h}->finish } for @workers;
note "$cuts times the next reply was lost, $create_cuts times the next create's, $drops times every connection dropped";

for my $w (@workers)
{
	is(${ $w->{err} }, '', "$w->{name}: no error") or diag ${ $w->{err} };
}
my $count = check_critical_sections($node_a, $node_b);
is($count, 2 * $workers_per_node * $iterations, 'every critical section ran');

# How often the lost-create path ran: the server log says.
my ($adopted, $recreated) = (0, 0);
for my $node ($node_a, $node_b)
{
	my $log = slurp_file($node->logfile);
	$adopted += () = $log =~ /the reply to creating .* was lost; the node exists and is adopted/g;
	$recreated += () = $log =~ /the reply to creating a node under .* was lost and the node does not exist/g;
}
note "lost create replies: $adopted nodes adopted, $recreated created again";
cmp_ok($adopted + $recreated, '>', 0, 'some creates lost their reply and were resolved');

finish_checks($zk, [ $node_a, $node_b ]);
done_testing();
