
# A lock node deleted by somebody else (an operator's deleteall, a cleanup
# script, a foreign recipe) is a lost lock, as an expired session is: the
# holder watches every node it holds and learns it at once.  zk_locks says
# lost until the next statement's transaction ends or the next zklock call,
# which warns and forgets it, the commit guard fails the transaction
# with 40001, zk_lock_release returns false with a WARNING.  A waiter whose
# own node is deleted stops waiting at once.  And a transaction that ran
# while a session lock was lost cannot be prepared either (PREPARE is
# guarded like COMMIT), nor does the loss leak into the next transaction.
#
# Runs alone: a release is bounded at 3 s, a Kazoo start included.

use strict;
use warnings;

use FindBin;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

use ZklockTest;

my $zkwrite = "$FindBin::Bin/../zk/zkwrite.py";
my $zk = start_zk();
my ($node_a, $node_b) =
  map { zk_node($_, $zk, max_prepared_transactions => 2) } qw(node_a node_b);
install_cs_log($_) for $node_a, $node_b;

sub zk_delete
{
	my ($path, $all) = @_;
	system('/usr/bin/python3', $zkwrite, $zk->hosts, $all ? 'deleteall' : 'delete', $path) == 0
	  or die "zkwrite.py failed";
	return;
}

sub my_node
{
	my ($s, $lock) = @_;
	return $s->query_safe(qq{SELECT znode FROM zk_locks WHERE name = '$lock'});
}

# Poll a session's zk_locks until the lock's state is $state; outside a
# transaction block in one that rolls back, so that no COMMIT writes the lost
# lock off before the test looks at it.
sub wait_state
{
	my ($s, $lock, $state, $in_xact) = @_;
	my $sql = qq{SELECT state FROM zk_locks WHERE name = '$lock'};
	$sql = "BEGIN; $sql; ROLLBACK" unless $in_xact;
	my $t0 = time;
	while (time - $t0 < 10)
	{
		return time - $t0 if $s->query_safe($sql) eq $state;
		sleep_for(0.05);
	}
	return undef;
}

# 1. A transaction lock whose node is deleted: the other node gets it at
# once, the holder learns it, and its COMMIT fails.
my $holder = session($node_a, 'holder');
$holder->query_safe('\set VERBOSITY verbose');
$holder->query_safe(cs_begin_sql('deleted', 'holder'));
my $token = $holder->query_safe(q{SELECT zk_lock_token('deleted')});
zk_delete(my_node($holder, 'deleted'));
my $other = session($node_b, 'other');
my ($out, $err) = $other->query(cs_waiter_sql('deleted', 'other', 5000));
is($err, 0, 'node_b gets the lock at once once the node is deleted');
my $noticed = wait_state($holder, 'deleted', 'lost', 1);
ok(defined $noticed, 'the holder sees its lock lost in zk_locks');
note sprintf('lost after %.2f s', $noticed // -1);
send_query($holder, cs_end_sql('holder'), 'commit-done');
wait_marker($holder, 'commit-done');
like($holder->{stderr}, qr/WARNING:  55000: zklock lock "deleted" was lost.*\n.*DETAIL:  Its ZooKeeper node ".*" was deleted by another client/,
	'COMMIT reports the deleted node');
like($holder->{stderr},
	qr/ERROR:  40001: zklock lock "deleted" was lost before the transaction committed/,
	'COMMIT fails with SQLSTATE 40001');
$holder->{stderr} = '';
is($node_a->safe_psql('postgres', q{SELECT count(*) FROM cs WHERE worker = 'holder'}),
	'0', "the holder's work was rolled back");
is($holder->query_safe(q{SELECT count(*) FROM zk_locks}), '0', 'the holder holds nothing now');
my $retoken = $holder->query_safe(q{SELECT zk_lock_acquire('deleted'), zk_lock_token('deleted')});
cmp_ok((split /\|/, $retoken)[1], '>', $token, 'taken again, with a greater token');
$holder->query_safe(q{SELECT zk_lock_release('deleted')});

# 2. A session lock: the next zklock call warns, and its release returns
# false with a WARNING.
$holder->query_safe(q{SELECT zk_lock_acquire('sess'), zk_lock_acquire('kept')});
zk_delete(my_node($holder, 'sess'));
ok(defined wait_state($holder, 'sess', 'lost'), 'a deleted session lock shows lost');
is($holder->query_safe(q{BEGIN; SELECT state FROM zk_locks WHERE name = 'kept'; ROLLBACK}), 'held',
	'another lock of the same session is still held');
is($holder->query(q{SELECT zk_lock_release('sess')}), 'f',
	'zk_lock_release of the deleted lock returns false');
like($holder->{stderr}, qr/WARNING:  55000: zklock lock "sess" was lost/, '... with a WARNING');
$holder->{stderr} = '';
is($holder->query_safe(q{SELECT zk_lock_release('kept')}), 't', 'the other one releases as usual');

# 3. The parent deleted with the node (deleteall of the lock).
$holder->query_safe(q{SELECT zk_lock_acquire('tree')});
zk_delete(ZK_ROOT . '/tree', 1);
ok(defined wait_state($holder, 'tree', 'lost'), 'a lock whose parent was deleted with it shows lost');
is($holder->query(q{SELECT zk_lock_try_acquire('other-lock')}), 't',
	'the next zklock call works');
like($holder->{stderr}, qr/WARNING:  55000: zklock lock "tree" was lost/, '... and warns about the lost one');
$holder->{stderr} = '';
$holder->query_safe(q{SELECT zk_lock_release_all()});

# 3b. Any statement reports the loss when its transaction ends, not only a
# zklock call: zk_locks shows the lock lost until then, and not after.
$holder->query_safe(q{SELECT zk_lock_acquire('plain')});
zk_delete(my_node($holder, 'plain'));
ok(defined wait_state($holder, 'plain', 'lost'), 'a deleted lock shows lost before any statement ends');
is($holder->query(q{SELECT 1}), '1', 'a plain SELECT runs');
like($holder->{stderr}, qr/WARNING:  55000: zklock lock "plain" was lost/,
	'... and warns about the lost lock as its transaction ends');
$holder->{stderr} = '';
is($holder->query_safe(q{SELECT count(*) FROM zk_locks WHERE name = 'plain'}), '0',
	'... which is forgotten then: zk_locks no longer lists it');
is($holder->{stderr}, '', '... and is reported once');

# 4. PREPARE TRANSACTION of a transaction that acquired nothing but ran while
# a session lock was lost fails like COMMIT; nothing leaks into the next one.
$holder->query_safe(q{SELECT zk_lock_acquire('prep')});
$holder->query_safe(q{BEGIN; INSERT INTO cs VALUES ('node_a', 'prep', 0, 0, now(), now())});
zk_delete(my_node($holder, 'prep'));
ok(defined wait_state($holder, 'prep', 'lost', 1), 'the session lock is lost inside the transaction');
send_query($holder, q{PREPARE TRANSACTION 'zklock_prep'}, 'prepare-done');
wait_marker($holder, 'prepare-done');
like($holder->{stderr},
	qr/ERROR:  40001: zklock lock "prep" was lost before the transaction committed/,
	'PREPARE TRANSACTION fails with 40001');
$holder->{stderr} = '';
is($node_a->safe_psql('postgres', q{SELECT count(*) FROM pg_prepared_xacts}), '0',
	'nothing was prepared');
($out, $err) = $holder->query(q{BEGIN; INSERT INTO cs VALUES ('node_a', 'after', 0, 0, now(), now()); COMMIT});
is($holder->{stderr}, '', 'the next, unrelated COMMIT succeeds') or diag $holder->{stderr};
$holder->{stderr} = '';
# A prepared transaction that held nothing lost commits later, whatever
# happens to the session's locks meanwhile.
$holder->query_safe(q{SELECT zk_lock_acquire('prep2')});
$holder->query_safe(q{BEGIN; INSERT INTO cs VALUES ('node_a', 'prep2', 0, 0, now(), now()); PREPARE TRANSACTION 'zklock_prep2'});
zk_delete(my_node($holder, 'prep2'));
ok(defined wait_state($holder, 'prep2', 'lost'), 'a session lock is lost after PREPARE');
$holder->query(q{COMMIT PREPARED 'zklock_prep2'});
unlike($holder->{stderr}, qr/ERROR/, 'COMMIT PREPARED of the earlier transaction succeeds')
  or diag $holder->{stderr};
like($holder->{stderr}, qr/WARNING:  55000: zklock lock "prep2" was lost/,
	'... and reports the loss, which fails no transaction that wrote nothing');
$holder->{stderr} = '';
is($node_a->safe_psql('postgres', q{SELECT count(*) FROM cs WHERE worker IN ('after', 'prep2')}),
	'2', 'both committed');
$holder->query(q{SELECT zk_lock_release_all()});
$holder->{stderr} = '';

# 5. A waiter whose own node another client deletes stops waiting at once,
# instead of waiting for its predecessor to leave.
my $blocker = session($node_b, 'blocker');
$blocker->query_safe(q{SELECT zk_lock_acquire('waited')});
my $waiter = session($node_a, 'waiter');
$waiter->query_safe('\set VERBOSITY verbose');
send_query($waiter, q{SELECT zk_lock_acquire('waited')}, 'wait-done');
ok(wait_for_wait_event($node_a, 'waiter'), 'a waiter queued on node_a');
my $queue = queue_nodes($zk, 'waited');
is(scalar @$queue, 2, 'holder and waiter queued');
my $t0 = time;
zk_delete($queue->[1]);
wait_marker($waiter, 'wait-done');
my $took = time - $t0;
like($waiter->{stderr}, qr/ERROR:  55000: ZooKeeper node ".*" was deleted while waiting for the lock/,
	'the waiter fails with 55000');
cmp_ok($took, '<', 3, 'at once, not when its predecessor releases');
note sprintf('the waiter stopped %.2f s after its node was deleted', $took);
is($blocker->query_safe(q{SELECT zk_lock_release('waited')}), 't', 'the holder releases as usual');

$_->quit for $holder, $other, $blocker, $waiter;
finish_checks($zk, [ $node_a, $node_b ]);
done_testing();
