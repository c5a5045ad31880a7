
# A barrier member whose node outlives its session's loss (found by the
# hour's nemesis run, issue 49): two of three members wait in enter; the
# ensemble loses its quorum; both enters are cancelled, so their deletes
# wait in sessions that the workers then give up (after the session
# timeout), and go with them unsent; the quorum comes back, and its new
# leader starts every session's clock afresh, so the old member nodes stay
# for about T more.  Both backends enter again at once.  Each must be one
# member, not two: before the fix, the first to enter again counted its own
# old node, the other's and its new one, created ready and passed with two
# of three members.  Now each enter deletes the node a failed call of its
# backend left before it creates its own: both wait, and time out, and no
# ready is made.
#
# Runs alone: sessions must be given up within 2 s after the timeout.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

use ZklockTest;

my $T = 8000;
my $zk = start_zk(servers => 3);
my @nodes = map { zk_node("node_$_", $zk, 'zklock.session_timeout' => $T) } qw(a b);
my @members = map { session($_, 'member') } @nodes;
my $place = ZK_ROOT . '/%barriers/linger';

sub children
{
	return [ grep { $_->[0] =~ m{^\Q$place\E/[^/]+$} } @{ $zk->tree($place) } ];
}

send_call($_, 'enter1', q{zk_barrier_enter('linger', 3)}) for @members;
ok(wait_for_wait_event($_, 'member'), $_->name . ': the member waits') for @nodes;
my $old = children();
is(scalar @$old, 2, 'two member nodes');

# No quorum for T + 2 s: the leader and another server killed.  The enters
# cancelled a second later, while the sessions are only disconnected.
my $leader = $zk->leader;
my ($other) = grep { $_ != $leader } $zk->running;
$zk->kill9($_) for $leader, $other;
my $lost_at = time;
sleep(1);
$_->safe_psql('postgres', q{
SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE application_name = 'member'})
  for @nodes;
for my $m (@members)
{
	my ($value, $err) = call_result($m, 'enter1');
	is($value, undef, 'the quorum lost: the enter is cancelled');
	like($err, qr/ERROR:\s+canceling statement due to user request/,
		'the quorum lost: the enter is cancelled, with 57014');
}
sleep(0.5) while time < $lost_at + $T / 1000 + 2;
$zk->start($leader, $other);

# The old sessions' nodes are still there: the new leader keeps their
# sessions for T.
for my $node (@nodes)
{
	$node->poll_query_until('postgres',
		q{SELECT state = 'connected' FROM zk_session()})
	  or die 'no new session on ' . $node->name;
}
my %old = map { $_->[0] => 1 } @$old;
my @lingering = grep { $old{ $_->[0] } } @{ children() };
is(scalar @lingering, 2, 'the old member nodes linger after the new sessions opened');

send_call($_, 'enter2', q{zk_barrier_enter('linger', 3, 2000)}) for @members;
for my $m (@members)
{
	my ($value, $err) = call_result($m, 'enter2');
	is($value, 'f', 'entering again: one member, not two (the enter times out)')
	  or diag $err;
}
ok(!grep({ $_->[0] eq "$place/ready" } @{ $zk->tree(ZK_ROOT) }), 'no ready was made');

$_->quit for @members;
$_->stop for @nodes;
$zk->stop;
done_testing();
