
# ZooKeeper authentication: with zklock.auth, nodes are created so that only
# that identity may change them and everyone may read them.  A server
# without the credentials, or with wrong ones, gets 42501 with a hint and
# leaves nothing behind; with the right ones it shares the locks.  The
# setting is server-wide: a reload with new credentials gives the server a
# new session; malformed ones (not user:password) fail with 22023 without
# showing them.  The credentials are hidden from ordinary users and never
# logged.
#
# Runs alone: a refusal is bounded at 0.5 s.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

use ZklockTest;

my $zk = start_zk();
my $node_a = zk_node('node_a', $zk, 'zklock.auth' => 'locker:s3cret-pw');
my $node_b = zk_node('node_b', $zk);

my $holder = session($node_a, 'holder');
is($holder->query_safe(q{SELECT zk_lock_acquire('guarded')}), 't',
	'with credentials: acquired');

# root, the lock's parent and the lock node: the creator may do anything,
# everyone may read.
my @nodes = grep { $_->[0] =~ m{^\Q${\ZK_ROOT}\E(/guarded(/.*)?)?$} }
  @{ $zk->tree('/', 1) };
is(scalar @nodes, 3, 'root, parent and lock node exist');
for my $n (@nodes)
{
	like($n->[2], qr/^digest:locker:\S+:31 world:anyone:1$/,
		"$n->[0]: all for the creator, read for anyone");
}

my $other = session($node_b, 'other');
$other->query_safe('\set VERBOSITY verbose');
for my $case ([ 'wrong credentials', 'locker:wrong' ], [ 'no credentials', '' ])
{
	my ($what, $auth) = @$case;
	ok(reconfigure($node_b, 'zklock.auth' => $auth), "$what: node_b has a new session");
	ok(defined wait_worker_session($node_b), "$what: connected");
	$other->query(q{SELECT zk_lock_try_acquire('guarded2')});
	like($other->{stderr},
		qr/ERROR:  42501: permission denied to create ZooKeeper node/,
		"$what: 42501");
	like($other->{stderr}, qr/HINT:  .*zklock\.auth/, "$what: the hint names zklock.auth");
	$other->{stderr} = '';
	is($other->query_safe(q{SELECT count(*) FROM zk_locks}), '0', "$what: nothing held");

	# Asking the holder to let go writes its node: refused likewise.
	$other->query(q{SELECT zk_lock_request_release('guarded')});
	like($other->{stderr},
		qr/ERROR:  42501: permission denied to write ZooKeeper node "\Q${\ZK_ROOT}\E\/guarded\/_c_[^"]*"/,
		"$what: asking the holder to release is refused with 42501");
	$other->{stderr} = '';
	is($holder->query_safe(q{SELECT release_requested FROM zk_locks WHERE name = 'guarded'}),
		'f', "$what: the holder was not asked");
}
is(scalar @{ $zk->ephemerals(ZK_ROOT) }, 1, 'only the holder has a node');

ok(reconfigure($node_b, 'zklock.auth' => 'locker:s3cret-pw'), 'node_b takes the credentials');
ok(defined wait_worker_session($node_b), 'and connects with them');
is($other->query_safe(q{SELECT zk_lock_try_acquire('guarded')}), 'f',
	'with the same credentials: the lock is shared, and taken');
is($other->query_safe(q{SELECT zk_lock_request_release('guarded')}), '1',
	'... and its holder may be asked to release it');
is(poll_query($holder, q{SELECT zk_lock_release_requested('guarded')}, 't'),
	't', '... and hears it');
is($other->query_safe(q{SELECT zk_lock_try_acquire('guarded2')}), 't',
	'... and other locks can be taken');
$other->query_safe(q{SELECT zk_lock_release('guarded2')});
$holder->query_safe(q{SELECT zk_lock_release('guarded')});
is($other->query_safe(q{SELECT zk_lock_try_acquire('guarded')}), 't',
	'... and the lock once released');
$other->query_safe(q{SELECT zk_lock_release('guarded')});

# Malformed credentials: 22023, never showing them; the session stays closed.
ok(reconfigure($node_b, 'zklock.auth' => 'no-colon-s3cret'), 'malformed credentials close the session');
$other->query(q{SELECT zk_lock_try_acquire('guarded')});
like($other->{stderr}, qr/ERROR:  22023: zklock.auth must have the form user:password/,
	'malformed credentials: 22023');
$other->{stderr} = '';
# Known to the worker: answered at once, not after zklock.connect_timeout.
my $t0 = time;
$other->query(q{SELECT zk_lock_try_acquire('guarded')});
my $took = time - $t0;
like($other->{stderr}, qr/ERROR:  22023: zklock.auth must have the form user:password/,
	'malformed credentials: 22023 again');
cmp_ok($took, '<', 0.5, sprintf('at once (%.2f s)', $took));
# The worker says so in the log once, not at every try (once a second).
sleep_for(3);
my $said = () = slurp_file($node_b->logfile) =~ /zklock\.auth must have the form user:password; no ZooKeeper session/g;
is($said, 1, 'the log says it once');
unlike($other->{stderr}, qr/s3cret/, 'without showing them');
$other->{stderr} = '';
ok(reconfigure($node_b, 'zklock.auth' => ''), 'no credentials again');
ok(defined wait_worker_session($node_b), 'and a session');

# Hidden from ordinary users, also in a backend that has not used zklock.
$node_a->safe_psql('postgres', 'CREATE ROLE plain');
my ($ret, $stdout, $stderr) =
  $node_a->psql('postgres', 'SET ROLE plain; SHOW zklock.auth');
# Newer majors word it "permission denied to examine", with a DETAIL
# naming pg_read_all_settings.
like($stderr,
	qr/(must be superuser or have privileges of pg_read_all_settings|permission denied) to examine "zklock\.auth"/,
	'ordinary users cannot read zklock.auth');

$holder->quit;
$other->quit;
$_->stop for $node_a, $node_b;

# Never in a message of zklock's.  PostgreSQL itself reports every setting
# a reload changes, with its value ("parameter ... changed to"), which the
# README warns about; node_a, configured before its start, shows none.
for my $node ($node_a, $node_b)
{
	my @leaks = grep { /s3cret/ && !/statement: / && !/LOG:  parameter "zklock.auth" changed to/ }
	  split /\n/, slurp_file($node->logfile);
	is_deeply(\@leaks, [], $node->name . ': the password appears in no message of zklock\'s');
}
unlike(slurp_file($node_a->logfile), qr/s3cret/, 'node_a\'s log does not show it at all');
tree_empty_ok($zk, 'no lock node left once the nodes are stopped');
$zk->stop;
done_testing();
