
# Deadlock detection when a member's ZooKeeper session is lost.  node_b
# reaches ZooKeeper through a proxy that can cut it off; its session then
# expires after the session timeout (3 s).
#
# 1. A member is cut off after publishing its wait: the other member finds
#    the cycle and that the cut-off one is the victim, pokes it (in vain),
#    and goes on waiting.  When the session expires its nodes go, and the
#    waiting member is granted: no 40P01 anywhere.
# 2. The victim is cut off just before it looks: its check cannot finish,
#    its session is lost (08006), the other member is granted, and no one
#    gets 40P01.
# 3. The victim's connection is cut while it looks and comes back at once:
#    it looks again and still finds the deadlock.
# Nothing either leaves in ZooKeeper outlives it.
#
# Runs alone: a cut must land before a look 0.3 s away.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep time);

use ZklockTest;

my $zk = start_zk();
my $proxied = $zk->start_proxy;
my $node_a = zk_node('node_a', $zk, 'zklock.session_timeout' => 3000);
my $node_b = zk_node('node_b', $zk,
	'zklock.hosts' => $proxied,
	'zklock.session_timeout' => 3000);

sub cut_off { $zk->proxy_signal('HUP'); $zk->proxy_signal('USR1'); }
sub reconnectable { $zk->proxy_signal('HUP'); }

sub published
{
	return scalar grep { $_->[0] =~ m{/%waits/} } @{ $zk->ephemerals(ZK_ROOT) };
}

for my $case ('after publishing', 'before looking')
{
	my $tag = $case eq 'after publishing' ? 'p' : 'l';
	my $a = session($node_a, "a_$tag");
	my $b = session($node_b, "b_$tag");
	# Case 1: b publishes first and finds nothing (a has not published).
	# Case 2: a looks first and finds nothing; b would look later.
	# Wide apart, so that the cut comes between the two first looks however
	# slow the machine.
	my ($dt_a, $dt_b) = $case eq 'after publishing' ? (3000, 200) : (300, 3000);
	$a->query_safe("SET deadlock_timeout = $dt_a");
	$b->query_safe("SET deadlock_timeout = $dt_b");
	$a->query_safe("SELECT zk_lock_acquire('f${tag}a')");
	$b->query_safe("SELECT zk_lock_acquire('f${tag}b')");
	send_query($a, "SELECT zk_lock_acquire('f${tag}b')", 'a_done');
	ok(wait_for_wait_event($node_a, "a_$tag"), "$case: a waits");
	send_query($b, "SELECT zk_lock_acquire('f${tag}a')", 'b_done');
	ok(wait_for_wait_event($node_b, "b_$tag"), "$case: b waits, closing a cycle");
	if ($case eq 'after publishing')
	{
		# b has looked once it published; a has not yet.
		my $t0 = time;
		sleep 0.05 until published() == 1 || time - $t0 > 5;
		is(published(), 1, "$case: b published its wait");
		sleep_for(0.3);
	}
	else
	{
		# a looks after 0.3 s, b after 3 s.
		my $t0 = time;
		sleep 0.05 until published() == 1 || time - $t0 > 2.5;
		is(published(), 1, "$case: a published its wait, b not yet");
	}
	cut_off();
	my $t_cut = time;

	like(wait_marker($a, 'a_done'), qr/^t$/m,
		"$case: a is granted once b's session expires");
	my $granted_after = time - $t_cut;
	cmp_ok($granted_after, '>=', 2, sprintf("$case: not before (%.2f s after the cut)", $granted_after));
	wait_marker($b, 'b_done');
	like($b->{stderr}, qr/ZooKeeper session was lost while /,
		"$case: b's wait ends with its lost session");
	unlike($a->{stderr} . $b->{stderr}, qr/deadlock detected/, "$case: no 40P01 for either");
	$b->{stderr} = '';

	reconnectable();
	$a->query_safe('SELECT zk_lock_release_all()');
	# b's next call writes off the lock it held, as documented (a WARNING,
	# and 40001 for the transaction that held it).
	$b->query('SELECT zk_lock_release_all()');
	like($b->{stderr}, qr/WARNING:  zklock lock "f${tag}b" was lost/, "$case: b is told its lock was lost");
	$b->{stderr} = '';
	is($b->query_safe(q{SELECT zk_lock_try_acquire('f} . $tag . q{a') AND zk_lock_release('f} . $tag . q{a')}),
		't', "$case: b locks again with a new session");
	no_orphans_ok($zk, "$case: nothing left without a live owner");
	is(published(), 0, "$case: no published wait is left");
	$_->quit for $a, $b;
}

# 3. The victim's connection is cut while it looks (the reply to publishing
# its wait is lost), but comes back at once: the look is tried again after
# another deadlock_timeout, finds the cycle, and the wait ends with 40P01,
# not with the lost reply.
{
	my $a = session($node_a, 'a_cut');
	my $b = session($node_b, 'b_cut');
	# a publishes first and finds nothing; b is the victim.
	$a->query_safe('SET deadlock_timeout = 500');
	$b->query_safe('SET deadlock_timeout = 1000');
	$a->query_safe(q{SELECT zk_lock_acquire('fca')});
	$b->query_safe(q{SELECT zk_lock_acquire('fcb')});
	send_query($a, q{SELECT zk_lock_acquire('fcb')}, 'a_done');
	ok(wait_for_wait_event($node_a, 'a_cut'), 'cut while looking: a waits');
	send_query($b, q{SELECT zk_lock_acquire('fca')}, 'b_done');
	ok(wait_for_wait_event($node_b, 'b_cut'), 'cut while looking: b waits, closing a cycle');
	my $t0 = time;
	# b's next create is the publication of its wait, after 1 s (its next
	# request could be its server's ping).
	$zk->proxy_signal('WINCH');
	wait_marker($b, 'b_done');
	my $took = time - $t0;
	like($b->{stderr}, qr/ERROR:  deadlock detected/, 'cut while looking: b still finds the deadlock');
	unlike($b->{stderr}, qr/connection loss/, 'and its wait did not fail on the lost reply');
	cmp_ok($took, '<', 2 * 1 + 1.5, sprintf('after looking again (%.2f s)', $took));
	$b->{stderr} = '';
	# The victim's session lock from before stays until it lets go.
	$b->query_safe('SELECT zk_lock_release_all()');
	like(wait_marker($a, 'a_done'), qr/^t$/m, 'cut while looking: a is granted');
	$a->query_safe('SELECT zk_lock_release_all()');
	no_orphans_ok($zk, 'cut while looking: nothing left without a live owner');
	is(published(), 0, 'cut while looking: no published wait is left');
	$_->quit for $a, $b;
}

finish_checks($zk, [ $node_a, $node_b ]);
done_testing();
