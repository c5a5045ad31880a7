
# zk_cluster_locks with many locks: the tree is read in pipelined batches,
# each request given zklock.connect_timeout, not one deadline for the whole
# tree.  12,000 locks held over two nodes, connect_timeout 3 s: the view
# lists them all (it used to fail after 3 s, though every request was
# answered in about a millisecond).
#
# Runs alone: 12,000 locks, each read bounded by the connect timeout.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

use ZklockTest;

my $per_node = 6000;
my $zk = start_zk();
my ($node_a, $node_b) =
  map { zk_node($_, $zk, 'zklock.connect_timeout' => '3s') } qw(node_a node_b);

my @holders;
for my $node ($node_a, $node_b)
{
	my $s = session($node, 'holder');
	my $name = $node->name;
	send_query($s, qq{DO \$\$ BEGIN
  FOR i IN 1..$per_node LOOP PERFORM zk_lock_acquire('many-$name-' || i); END LOOP;
END \$\$}, 'held');
	push @holders, $s;
}
wait_marker($_, 'held') for @holders;
is($holders[0]->query_safe('SELECT count(*) FROM zk_locks'), $per_node, "node_a holds $per_node locks");

my $t0 = time;
my ($rows, $holding) = split /\|/, $node_a->safe_psql('postgres',
	q{SELECT count(*), count(*) FILTER (WHERE holding) FROM zk_cluster_locks});
my $took = time - $t0;
is($rows, 2 * $per_node, 'zk_cluster_locks lists every one of the ' . 2 * $per_node . ' locks');
is($holding, 2 * $per_node, 'each held');
note sprintf('zk_cluster_locks with %d locks: %.2f s', 2 * $per_node, $took);

$_->query_safe('SELECT zk_lock_release_all()') for @holders;
$_->quit for @holders;
finish_checks($zk, [ $node_a, $node_b ]);
done_testing();
