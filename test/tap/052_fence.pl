
# Fencing at the resource (zk_lock_fence): a stale holder's writes refused by
# the data itself.  A central database on a server with no ZooKeeper and no
# zklock preloaded keeps the fences; writers of one resource are ordered by
# its row there, under READ COMMITTED and REPEATABLE READ; concurrent writers
# with random tokens never commit a lower token after a higher one; pg_dump
# keeps the fences; a node
# whose lock was taken away writes through dblink and postgres_fdw, and is
# refused after the next holder wrote.

use strict;
use warnings;

use FindBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

use ZklockTest;

# ---- The central database: no ZooKeeper, no preloading ----

# SQLSTATE and message of a statement, or 'ok' (as in the regression tests).
my $sqlstate_of = q{
CREATE FUNCTION sqlstate_of(query text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE query;
  RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
  RETURN SQLSTATE || ': ' || SQLERRM;
END $$};

my $central = PostgreSQL::Test::Cluster->new('central');
$central->init;
$central->start;
$central->safe_psql('postgres', $sqlstate_of);
is($central->safe_psql('postgres', 'SHOW shared_preload_libraries'), '',
	'central server: zklock is not preloaded');
$central->safe_psql('postgres', q{
CREATE EXTENSION zklock;
CREATE TABLE ledger (id int PRIMARY KEY, amount int, fence_token bigint,
                     writer text);
CREATE TRIGGER ledger_fence BEFORE INSERT OR UPDATE OR DELETE ON ledger
  FOR EACH ROW EXECUTE FUNCTION zk_lock_fence_trigger('acct', 'fence_token');
CREATE ROLE writer LOGIN;
GRANT ALL ON ledger TO writer;
});
is($central->safe_psql('postgres', q{SELECT zk_lock_fence('central-only', 7)}), '7',
	'a fence needs no ZooKeeper');
like($central->safe_psql('postgres', q{SELECT sqlstate_of($$SELECT zk_lock_acquire('x')$$)}),
	qr/^55000:/, 'while locks on that server do (55000: not preloaded)');
like($central->safe_psql('postgres', q{SELECT sqlstate_of('SELECT * FROM zk_locks')}),
	qr/^55000:/, 'as do zk_locks (it answered no rows)');
like($central->safe_psql('postgres', q{SELECT sqlstate_of('SELECT * FROM zk_cluster_locks')}),
	qr/^55000:/, 'and zk_cluster_locks');

# ---- Writers of one resource, ordered by its row ----

my $old = session($central, 'old_writer');
my $new = session($central, 'new_writer');

sub waits_for_row
{
	my ($app) = @_;
	return $central->poll_query_until('postgres', qq{
SELECT wait_event_type FROM pg_stat_activity WHERE application_name = '$app'}, 'Lock');
}

# Run $sql in $s in the background; returns a closure that collects its output.
sub in_background
{
	my ($s, $sql) = @_;
	my $marker = 'done_' . int(rand(1e9));
	send_query($s, $sql, $marker);
	return sub { my $out = wait_marker($s, $marker); $out =~ s/\s+$//; $out };
}

$central->safe_psql('postgres', q{SELECT zk_lock_fence('c1', 50)});
$new->query_safe(q{BEGIN; SELECT zk_lock_fence('c1', 200)});
my $stale = in_background($old,
	q{BEGIN; SELECT sqlstate_of($$SELECT zk_lock_fence('c1', 100)$$); COMMIT});
ok(waits_for_row('old_writer'),
	'READ COMMITTED: a stale fence waits for the newer holder\'s open fence');
$new->query_safe('COMMIT');
like($stale->(), qr/^40001: fencing token 100 of resource "c1" is below the highest seen, 200$/m,
	'and is refused once that commits (100 would have passed the 50 it read first)');

$old->query_safe(q{BEGIN; SELECT zk_lock_fence('c2', 300)});
my $newer = in_background($new, q{BEGIN; SELECT zk_lock_fence('c2', 400); COMMIT});
ok(waits_for_row('new_writer'), 'a newer fence queued behind an older open one waits');
$old->query_safe('COMMIT');
like($newer->(), qr/^400$/m, 'READ COMMITTED: and passes once the older commits');

$old->query_safe(q{BEGIN; SELECT zk_lock_fence('c2', 500)});
$newer = in_background($new, q{BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT 1 AS snapshot_taken;
SELECT sqlstate_of($$SELECT zk_lock_fence('c2', 600)$$);
ROLLBACK});
ok(waits_for_row('new_writer'), 'REPEATABLE READ: a newer fence waits too');
$old->query_safe('COMMIT');
like($newer->(), qr/^40001: could not serialize access due to concurrent update$/m,
	'REPEATABLE READ: 40001 once the older raised the fence after its snapshot');
is($new->query_safe(q{SELECT zk_lock_fence('c2', 600)}), '600', 'and its retry passes');

$old->query_safe(q{BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT 1});
$new->query_safe(q{SELECT zk_lock_fence('c2', 700)});
like($old->query_safe(q{SELECT sqlstate_of($$SELECT zk_lock_fence('c2', 650)$$); ROLLBACK}),
	qr/^40001: /m, 'REPEATABLE READ: a stale fence fails with 40001 too');

# One holder's connections, with the same token, write side by side; a higher
# token waits for all of them.
$central->safe_psql('postgres', q{SELECT zk_lock_fence('c5', 70)});
$old->query_safe(q{BEGIN; SELECT zk_lock_fence('c5', 70)});
is($central->safe_psql('postgres', q{SET lock_timeout = '2s'; BEGIN;
SELECT zk_lock_fence('c5', 70); COMMIT}), '70',
	'an equal token does not wait for another open fence of it');
$newer = in_background($new, q{SELECT zk_lock_fence('c5', 71)});
ok(waits_for_row('new_writer'), 'a higher token waits for the open equal one');
$old->query_safe('COMMIT');
like($newer->(), qr/^71$/m, 'and passes once it commits');
$old->query_safe(q{BEGIN; SELECT zk_lock_fence('c5', 72)});
$stale = in_background($new, q{SELECT sqlstate_of($$SELECT zk_lock_fence('c5', 71)$$)});
ok(waits_for_row('new_writer'),
	'the highest token so far waits for an open fence that raises it');
$old->query_safe('COMMIT');
like($stale->(), qr/^40001: fencing token 71 of resource "c5" is below the highest seen, 72$/m,
	'and is refused once that commits');

# SERIALIZABLE, as REPEATABLE READ.
$old->query_safe(q{BEGIN ISOLATION LEVEL SERIALIZABLE; SELECT 1});
$new->query_safe(q{SELECT zk_lock_fence('c5', 73)});
like($old->query_safe(q{SELECT sqlstate_of($$SELECT zk_lock_fence('c5', 74)$$); ROLLBACK}),
	qr/^40001: could not serialize access due to concurrent update$/m,
	'SERIALIZABLE: a fence raised after the snapshot fails with 40001');

# The first fence of a resource: two transactions insert its row at once.
$new->query_safe(q{BEGIN; SELECT zk_lock_fence('c3', 20)});
$stale = in_background($old,
	q{BEGIN; SELECT sqlstate_of($$SELECT zk_lock_fence('c3', 10)$$); COMMIT});
ok(waits_for_row('old_writer'), 'a first fence waits for another first fence of the resource');
$new->query_safe('COMMIT');
like($stale->(), qr/^40001: fencing token 10 of resource "c3" is below the highest seen, 20$/m,
	'and the lower is refused');
$old->query_safe(q{BEGIN; SELECT zk_lock_fence('c4', 10)});
$newer = in_background($new, q{SELECT zk_lock_fence('c4', 20)});
ok(waits_for_row('new_writer'), 'a higher first fence waits for a lower one');
$old->query_safe('COMMIT');
like($newer->(), qr/^20$/m, 'and passes');

# ---- Many writers with tokens that mostly rise ----

# Each writer's token is one handed out in order, less up to 20: a writer
# that drew less than one that already wrote is a stale holder.

# The fence's row lock is held to the end of each writing transaction, so
# the sequence value taken after the fence follows the commit order: in it,
# the committed tokens never go down.
$central->safe_psql('postgres', q{
CREATE SEQUENCE commit_order;
CREATE SEQUENCE token_source START 100;
CREATE TABLE written (n bigint, token bigint);
});
my $script = "$PostgreSQL::Test::Utils::tmp_check/fence.pgbench";
open my $fh, '>', $script or die "$script: $!";
print $fh q{SELECT nextval('token_source') AS base \gset
\set token :base - random(0, 20)
BEGIN;
SELECT zk_lock_fence('stress', :token);
INSERT INTO written VALUES (nextval('commit_order'), :token);
END;
};
close $fh;
my ($out, $err) = run_command([
	'pgbench', '-n', '-c', '8', '-j', '2', '-t', '150', '-f', $script,
	'-h', $central->host, '-p', $central->port, 'postgres' ]);
like($out, qr/number of failed transactions: \d+/, 'pgbench: 8 writers, 150 transactions each')
  or diag $err;
my ($committed, $failed) = ($out =~ /number of transactions actually processed: (\d+)/,
	$out =~ /number of failed transactions: (\d+)/);
$failed //= 0;
note "committed $committed, refused $failed";
ok($committed > 0 && $failed > 0, 'some writers passed, some were refused');
is($central->safe_psql('postgres', q{
SELECT count(*) FROM (SELECT token < lag(token) OVER (ORDER BY n) AS down FROM written) w
 WHERE down}), '0', 'no committed token is lower than one committed before it');
is($central->safe_psql('postgres', q{
SELECT (SELECT max(token) FROM written) = (SELECT token FROM zk_lock_fences WHERE resource = 'stress')}),
	't', 'the fence is the highest committed token');

# pg_dump keeps the fences: restored into another database, every resource
# keeps its highest token.
my $dump = "$PostgreSQL::Test::Utils::tmp_check/central.dump";
$central->command_ok([ 'pg_dump', '-Fc', '-f', $dump, '-d', $central->connstr('postgres') ],
	'pg_dump of the central database');
$central->safe_psql('postgres', 'CREATE DATABASE restored');
$central->command_ok([ 'pg_restore', '-d', $central->connstr('restored'), $dump ],
	'restored into another database');
my $fences = q{SELECT string_agg(resource || '=' || token, ',' ORDER BY resource) FROM zk_lock_fences};
is($central->safe_psql('restored', $fences), $central->safe_psql('postgres', $fences),
	'with every fence');
like($central->safe_psql('restored', q{SELECT sqlstate_of($$SELECT zk_lock_fence('stress', 1)$$)}),
	qr/^40001: /, 'which refuses a stale token there too');

# ---- A node's writers: dblink and postgres_fdw ----

my $zk = start_zk();
my $node = zk_node('node_a', $zk);
$node->safe_psql('postgres', $sqlstate_of);
my $central_conn = sprintf('host=%s port=%d dbname=postgres user=writer',
	$central->host, $central->port);
$node->safe_psql('postgres', qq{
CREATE EXTENSION dblink;
CREATE EXTENSION postgres_fdw;
CREATE SERVER central FOREIGN DATA WRAPPER postgres_fdw
  OPTIONS (host '@{[ $central->host ]}', port '@{[ $central->port ]}', dbname 'postgres');
CREATE USER MAPPING FOR PUBLIC SERVER central OPTIONS (user 'writer');
CREATE FOREIGN TABLE ledger (id int, amount int, fence_token bigint, writer text)
  SERVER central;
-- A job's write to the central database through dblink, fenced with its
-- token, in one remote transaction.
CREATE FUNCTION write_by_dblink(id int, token bigint, writer text) RETURNS text
LANGUAGE sql AS \$\$
  SELECT dblink_exec('$central_conn', format(
    'BEGIN; SET LOCAL zklock.fence_token = %s; INSERT INTO ledger (id, amount, writer) VALUES (%s, 1, %L); COMMIT',
    token, id, writer))
\$\$;
});

my $first = session($node, 'first_job');
my $second = session($node, 'second_job');
$first->query_safe(q{SELECT zk_lock_acquire('acct')});
my $t1 = $first->query_safe(q{SELECT zk_lock_token('acct')});
is($first->query_safe(qq{SELECT write_by_dblink(1, $t1, 'first')}), 'COMMIT',
	'the holder writes through dblink, fenced with its token');
is($first->query_safe(q{INSERT INTO ledger VALUES (2, 1, zk_lock_token('acct'), 'first') RETURNING fence_token IS NULL}),
	't', 'and through postgres_fdw (the row carries the token; the trigger clears it)');

# The first job's lock is taken from it: an administrator deletes its node.
# The next holder gets a higher token and writes; the first job, stalled
# before it noticed, writes with the token it read when it acquired.
my $znode = $first->query_safe(q{SELECT znode FROM zk_locks WHERE name = 'acct'});
system('/usr/bin/python3', "$FindBin::Bin/../zk/zkwrite.py", $zk->hosts, 'delete', $znode) == 0
  or die 'could not delete the node';
is($second->query_safe(q{SELECT zk_lock_acquire('acct', 20000)}), 't',
	'the next job gets the lock once the node is gone');
my $t2 = $second->query_safe(q{SELECT zk_lock_token('acct')});
cmp_ok($t2, '>', $t1, 'with a higher token');
is($second->query_safe(q{INSERT INTO ledger VALUES (3, 1, zk_lock_token('acct'), 'second') RETURNING true}),
	't', 'and writes through postgres_fdw');

# Its next statement warns that the lock was lost; the job goes on anyway.
like(scalar $first->query(qq{SELECT sqlstate_of(\$\$SELECT write_by_dblink(4, $t1, 'first')\$\$)}),
	qr/^40001: fencing token $t1 of resource "acct" is below the highest seen, $t2$/,
	'the stale job\'s write through dblink is refused with 40001');
like($first->{stderr}, qr/WARNING:  zklock lock "acct" was lost/,
	'(after the WARNING that its lock was lost)');
$first->{stderr} = '';
like($first->query_safe(qq{SELECT sqlstate_of(\$\$INSERT INTO ledger VALUES (5, 1, $t1, 'first')\$\$)}),
	qr/^40001: fencing token $t1 of resource "acct" is below the highest seen, $t2$/,
	'and through postgres_fdw');
is($central->safe_psql('postgres', q{SELECT string_agg(id || ':' || writer, ',' ORDER BY id) FROM ledger}),
	'1:first,2:first,3:second', 'nothing of the stale writes reached the table');

# postgres_fdw's remote transactions are REPEATABLE READ: a newer writer that
# waits behind an older one's open fence fails with 40001 and retries.
$old->query_safe(qq{BEGIN; SELECT zk_lock_fence('acct', $t2 + 1)});
my $fdw_write = in_background($second, qq{BEGIN;
SELECT sqlstate_of(\$\$INSERT INTO ledger VALUES (6, 1, $t2 + 2, 'second')\$\$);
ROLLBACK});
ok($central->poll_query_until('postgres', q{
SELECT wait_event_type FROM pg_stat_activity WHERE usename = 'writer' AND state = 'active'}, 'Lock'),
	'a write through postgres_fdw waits for an open fence');
$old->query_safe('COMMIT');
like($fdw_write->(), qr/^40001: could not serialize access due to concurrent update$/m,
	'and fails with 40001 when that raised the fence (REPEATABLE READ)');
is($second->query_safe(qq{INSERT INTO ledger VALUES (6, 1, $t2 + 2, 'second') RETURNING id}),
	'6', 'its retry passes');

# A node's own fence of the lock it holds, zk_lock_fence(name), and the
# first job: it no longer holds the lock.
like($first->query_safe(q{SELECT sqlstate_of($$SELECT zk_lock_fence('acct')$$)}),
	qr/^55000: /, 'zk_lock_fence(name) of a lock this session lost: 55000');

$_->quit for ($first, $second, $old, $new);
$node->stop;
$central->stop;
tree_empty_ok($zk, 'no lock node left');
$zk->stop;
done_testing();
