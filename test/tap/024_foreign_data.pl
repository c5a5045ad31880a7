
# What other servers and clients leave in ZooKeeper is read without trusting
# it.  A LATIN1 database's lock name goes to ZooKeeper in UTF-8, so a UTF8
# server reads it (and it is the same lock there); its node data does not,
# and nodes written by other clients hold anything at all.  None of it may
# make zk_lock_holders or zk_cluster_locks fail for everybody: names that do
# not decode are shown as their (ASCII) node names, data that is not a JSON
# object jsonb would accept reads as NULL info, and fields of the wrong type
# or range as NULL.

use strict;
use warnings;

use FindBin;
use PostgreSQL::Test::Utils;
use Test::More;

use ZklockTest;

my $zkwrite = "$FindBin::Bin/../zk/zkwrite.py";
my $zk = start_zk();
my $node_a = zk_node('node_a', $zk);
my $node_b = zk_node('node_b', $zk);

# node_b: a LATIN1 database, used by a role whose name is not ASCII.
$node_b->safe_psql('postgres', q{
CREATE DATABASE latin TEMPLATE template0 ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C';
CREATE ROLE "rené" LOGIN;
});
$node_b->safe_psql('latin', q{CREATE EXTENSION zklock; GRANT ALL ON SCHEMA public TO PUBLIC});
my $latin = $node_b->background_psql('latin', on_error_stop => 1,
	extra_params => [ '-U', 'rené' ]);
$latin->query_safe(q{SET client_encoding = 'UTF8'});
is($latin->query_safe(q{SELECT zk_lock_acquire('café')}), 't',
	'a LATIN1 database holds a lock with a non-ASCII name');
is($latin->query_safe(q{SELECT name FROM zk_locks()}), 'café',
	'and shows it as it was given');

my $s = $node_a->background_psql('postgres', on_error_stop => 1);
# Role names live in a shared catalog, in the bytes they were created with
# (UTF-8 here), so the owner data reads fine; the lock name went to
# ZooKeeper in UTF-8, so it reads fine too (it was "caf%E9", another lock).
my $rows = $s->query_safe(q{
SELECT lock_name, holding, usename, database
  FROM zk_cluster_locks WHERE lock_name LIKE 'caf%'});
is($rows, 'café|t|rené|latin',
	'a UTF8 server lists the LATIN1 database\'s lock under its name');
is($s->query_safe(q{SELECT zk_lock_try_acquire('café')}), 'f',
	'and it is the same lock there');

# Nodes written by other clients, in the queue of one lock.
my $parent = ZK_ROOT . '/foreign';
my %data = (
	wrong_types => '{"pid":"x","port":1e400,"requested_at":"garbage","user":5}',
	nul_escape => '{"cluster_name":"a\u0000b","pid":1}',
	not_utf8 => "{\"user\":\"\xff\xfe\",\"pid\":2}",
	pid_range => '{"pid":99999999999,"cluster_name":"big"}',
	bad_date => '{"pid":3,"requested_at":"2026-13-45 99:99:99+00"}',
	huge_number => '{"pid":4,"x":1e100000000}',
	nested => '{"pid":{"a":5},"host":["h"],"port":6}',
	deep => '{"pid":7,"x":' . ('[' x 100000) . (']' x 100000) . '}',
	deep_object => ('{"a":' x 50000) . '1' . ('}' x 50000),
	tiny_exponent => '{"pid":8,"x":1e-9223372036854775809}',
	unicode_escape => '{"pid":9,"user":"caf\\u00e9"}',
	plain_text => '127.0.0.1',
	good => '{"cluster_name":"other","host":"h","port":5432,"pid":42,"database":"d","user":"u","application_name":"app","requested_at":"2026-11-23T08:00:00.5Z","mode":"exclusive"}',
);
my @created;
for my $kind (sort keys %data)
{
	# Through a file: a command line argument holds at most 128 kB.
	my $hexfile = "$PostgreSQL::Test::Utils::tmp_check/foreign.hex";
	open my $fh, '>', $hexfile or die "$hexfile: $!";
	print $fh unpack('H*', $data{$kind});
	close $fh;
	my $path = `/usr/bin/python3 $zkwrite '@{[ $zk->hosts ]}' create '$parent/_c_$kind-lock-' \@$hexfile`;
	chomp $path;
	ok($? == 0 && $path =~ /-lock-\d{10}$/, "foreign node '$kind' created");
	push @created, $path;
}

$rows = $s->query_safe(q{
SELECT count(*), count(pid), count(requested_at), count(cluster_name)
  FROM zk_lock_holders('foreign')});
is($rows, '13|3|1|2', 'zk_lock_holders reads all thirteen, keeping only well-formed fields');
is($s->query_safe(q{SELECT usename FROM zk_lock_holders('foreign') WHERE pid = 9}),
	'café', 'a \\u escape reads as its character in a UTF8 database');
# In the LATIN1 database: escapes beyond ASCII are refused before the
# server's lexer (which raises on 15) sees them; nothing fails.
is($latin->query_safe(q{
SELECT count(*), count(pid), count(pid) FILTER (WHERE pid = 9)
  FROM zk_lock_holders('foreign')}), '13|3|0',
	'a LATIN1 database reads the same nodes, without the one with a \\u escape');
is($latin->query_safe(q{SELECT count(*) >= 13 FROM zk_cluster_locks}), 't',
	'and zk_cluster_locks too');
is($s->query_safe(q{
SELECT cluster_name, host_port, pid, database, usename, application_name,
       requested_at AT TIME ZONE 'UTC', holding
  FROM zk_lock_holders('foreign') WHERE pid = 42}),
	'other|h:5432|42|d|u|app|2026-11-23 08:00:00.5|f',
	'a well-formed foreign node shows every field');
is($s->query_safe(q{
SELECT count(*) FROM zk_lock_queue('foreign') WHERE info IS NOT NULL}),
	'6', 'zk_lock_queue keeps the info only of the documents jsonb accepts');
is($s->query_safe(q{
SELECT count(*) FROM zk_lock_queue('foreign') WHERE info ? 'pid'}),
	'6', 'every info it keeps is jsonb');
is($s->query_safe(q{SELECT count(*) >= 10 FROM zk_cluster_locks}), 't',
	'zk_cluster_locks lists everything, foreign and LATIN1 alike');
is($s->query_safe(q{
SELECT blocked_by FROM zk_lock_holders('foreign') WHERE position = 5}),
	'{_c_bad_date-lock-0000000000,_c_deep-lock-0000000001,_c_deep_object-lock-0000000002,other@h:5432/42}',
	'a waiter behind nodes that name no backend is blocked by their node names');

# A waiting acquisition behind the foreign nodes, looking for deadlocks
# while it waits, is not disturbed by them: it is granted once they go.
my $w = $node_a->background_psql('postgres', on_error_stop => 0);
$w->query_safe(q{SET deadlock_timeout = '100ms'});
$w->{stdin} .= "SELECT 'granted', zk_lock_acquire('foreign', 20000);\n";
$w->{run}->pump_nb;
sleep_for(1);
system('/usr/bin/python3', $zkwrite, $zk->hosts, 'delete', $_) for @created;
like($w->query_until(qr/granted/, ''), qr/granted\|t/,
	'a waiter behind them, checking for deadlocks, is granted once they go');
is($w->{stderr}, '', 'without any error');
$w->query_safe(q{SELECT zk_lock_release('foreign')});
$w->quit;
$latin->query_safe(q{SELECT zk_lock_release('café')});
$latin->quit;
$s->quit;
finish_checks($zk, [ $node_a, $node_b ]);
done_testing();
