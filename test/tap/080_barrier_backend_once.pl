
# A backend is one member of a barrier, however many of its nodes ZooKeeper
# holds (issue 49).  A failed enter can leave its node behind in a session
# ZooKeeper keeps longer than the worker judged, or through a create whose
# reply was lost, where the backend does not know its node's name; the
# hour's fault run found both.  Here such a node is put beside B's own (a
# copy of it, named with B's backend part), while B waits:
# 1. A, entering a barrier of 3 with only B, must not count B twice: its
#    enter times out (false), and no ready is made;
# 2. B, entering again, deletes it;
# 3. three backends still pass a barrier of 3.

use strict;
use warnings;

use FindBin;
use PostgreSQL::Test::Utils;
use Test::More;

use ZklockTest;

my $zkwrite = "$FindBin::Bin/../zk/zkwrite.py";
my $zk = start_zk();
my $node = zk_node('node_a', $zk);
my $path = ZK_ROOT . '/%barriers/twice';

sub zkw
{
	my @args = @_;
	my $out = `/usr/bin/python3 $zkwrite '@{[ $zk->hosts ]}' @args`;
	die "zkwrite.py @args failed" if $?;
	return $out;
}

sub children
{
	return [ map { $_->[0] =~ m{^\Q$path\E/([^/]+)$} ? $1 : () } @{ $zk->tree($path) } ];
}

my ($a, $b, $c) = map { session($node, $_) } qw(a b c);

send_call($b, 'enter', q{zk_barrier_enter('twice', 3, 60000)});
ok(wait_for_wait_event($node, 'b'), 'B waits in enter');
my ($own) = @{ children() };
like($own, qr/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-/, "B's node: $own");
my $data = zkw('get', "$path/$own");
like($data, qr/"parties":\s*3/, "B's node carries its parties");
my $copy = substr($own, 0, 13) . '-ffff-0000-000000000001';
zkw('put', "$path/$copy", unpack('H*', $data));
is_deeply([ sort @{ children() } ], [ sort $own, $copy ], 'a second node of B beside its own');

# 1. Two of B's nodes and A's own: two members, not three.
is($a->query_safe(q{SELECT zk_barrier_enter('twice', 3, 2000)}), 'f',
	"A counts B once: its enter times out");
ok(!grep({ $_ eq 'ready' } @{ children() }), 'no ready was made');
is_deeply([ sort @{ children() } ], [ sort $own, $copy ], "A's node is gone, B's two stay");

# 2. B, cancelled, enters again: its look deletes its other node.
$node->safe_psql('postgres',
	q{SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE application_name = 'b'});
my (undef, $err) = call_result($b, 'enter');
like($err, qr/canceling statement due to user request/, "B's enter is cancelled");
is($b->query_safe(q{SELECT zk_barrier_enter('twice', 3, 1000)}), 'f',
	'B enters again alone: false');
is_deeply(children(), [], "B's other node was deleted by its enter, its own at the time-out");

# 3. Three backends are three members.
send_call($_, 'enter', q{zk_barrier_enter('twice', 3, 30000)}) for $a, $b;
ok(wait_for_wait_event($node, $_), "$_ waits") for qw(a b);
is($c->query_safe(q{SELECT zk_barrier_enter('twice', 3, 30000)}), 't', 'the third passes');
is(call_result($_, 'enter'), 't', 'so do the others') for $a, $b;
send_call($_, 'leave', q{zk_barrier_leave('twice', 30000)}) for $a, $b;
is($c->query_safe(q{SELECT zk_barrier_leave('twice', 30000)}), 't', 'the third leaves');
is(call_result($_, 'leave'), 't', 'so do the others') for $a, $b;

$_->quit for $a, $b, $c;
finish_checks($zk, [$node]);
done_testing();
