
# Revocation never interrupts a COMMIT, deferred triggers included, however
# the transaction commits (issue 41.4).  The old code was quiet only from a
# COMMIT statement's start, or else from the pre-commit callbacks, which
# PostgreSQL calls after the deferred triggers: a release request heard while
# they ran cancelled the commit of an autocommit statement, or a procedure's
# COMMIT, with 57Z01.
#
# Each case holds a session lock under zklock.revocable = on and commits a
# row whose deferred constraint trigger sleeps 2 s; the request is sent once
# the holder is seen sleeping in that trigger, and heard while it still
# does (checked, so that no case can pass by missing the window).  The
# commit must keep its rows; the request then fails the next statement with
# 57Z01, and the rollback releases the lock.
#
#  1. Commits without a COMMIT statement: an autocommit INSERT, a query
#     string of two statements, the extended protocol (pgbench -M extended,
#     one statement and a pipeline of two), autocommit utility statements
#     (CALL, EXECUTE, COPY), and a deferred trigger that releases another
#     lock before it sleeps.
#  2. PL/pgSQL's COMMIT and COMMIT AND CHAIN in a procedure and in a DO
#     block: the COMMIT succeeds, the statement after it fails.
#  3. COMMIT and PREPARE TRANSACTION statements (quiet before too).
#  4. The quiet section ends with the transaction: a statement that sleeps
#     after an autocommit statement, inside a block after another
#     statement, after a failed COMMIT, and in a procedure after its COMMIT
#     or ROLLBACK AND CHAIN, is interrupted while it sleeps.
#
# Runs alone: a request must be heard while a 2 s trigger sleep still runs.

use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;

use ZklockTest;

my $zk = start_zk();
my $node = zk_node('node_a', $zk, max_prepared_transactions => 2);
$node->safe_psql('postgres', q{
CREATE TABLE work (tag text, n int);
CREATE TABLE plain (tag text, n int);
CREATE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_sleep(2);
  RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT ON work
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION slow_commit();
-- A trigger that releases a lock in the commit, then sleeps.
CREATE TABLE work_release (tag text, n int);
CREATE FUNCTION release_then_sleep() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM zk_lock_release('RY');
  PERFORM pg_sleep(2);
  RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER release_then_sleep AFTER INSERT ON work_release
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION release_then_sleep();
CREATE PROCEDURE insert_one(t text) LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO work VALUES (t, 1);
END $$;
CREATE PROCEDURE commit_then_more(t text) LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO work VALUES (t, 1);
  COMMIT;
  INSERT INTO work VALUES (t, 2);
END $$;
CREATE PROCEDURE chain_then_more(t text) LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO work VALUES (t, 1);
  COMMIT AND CHAIN;
  INSERT INTO work VALUES (t, 2);
END $$;
CREATE PROCEDURE commit_then_sleep(t text) LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO plain VALUES (t, 1);
  COMMIT;
  PERFORM pg_sleep(3);
  INSERT INTO plain VALUES (t, 2);
END $$;
CREATE PROCEDURE rollback_then_sleep(t text) LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO plain VALUES (t, 1);
  ROLLBACK AND CHAIN;
  PERFORM pg_sleep(3);
  INSERT INTO plain VALUES (t, 2);
END $$;
});

my $holder = session($node, 'holder');
$holder->query_safe(q{SET zklock.revocable = on});
$holder->query_safe(q{PREPARE ins(text) AS INSERT INTO work VALUES ($1, 1)});
my $asker = session($node, 'asker');
my $marker = 0;

# Once the backend named $app sleeps in pg_sleep, ask the holders of RX to
# let go, and wait until the request is heard (or RX let go already); true
# if the backend was still in that sleep then (the window the case is
# about).
sub ask_while_sleeping
{
	my ($app) = @_;
	$node->poll_query_until('postgres',
		qq{SELECT wait_event FROM pg_stat_activity WHERE application_name = '$app'}, 'PgSleep')
	  or die "$app never sleeps";
	$asker->query_safe(q{SELECT zk_lock_request_release('RX')}) eq '1'
	  or die 'RX has no holder';
	poll_query($asker,
		q{SELECT coalesce(bool_and(release_requested), true) FROM zk_lock_holders('RX')}, 't') eq 't'
	  or die 'the request was not heard';
	return $asker->query_safe(
		qq{SELECT wait_event FROM pg_stat_activity WHERE application_name = '$app'}) eq 'PgSleep';
}

# Run $sql in the holder (which holds RX, and RY if asked) and ask for RX
# while it sleeps; returns the SQLSTATE $sql ended with, whether the
# request came in the window, that of the holder's next statement, and how
# many hold RX then.
sub run_asked
{
	my ($sql, @also) = @_;
	$holder->query_safe(qq{SELECT zk_lock_acquire('$_')}) for 'RX', @also;
	$marker++;
	$holder->{stdin} .= "$sql\n\\echo done-$marker :SQLSTATE\n";
	$holder->{run}->pump_nb;
	my $in_window = ask_while_sleeping('holder');
	my ($code) = $holder->query_until(qr/done-$marker \w+\n/, '') =~ /done-$marker (\w+)/;
	$marker++;
	my ($next) = $holder->query_until(qr/next-$marker \w+\n/,
		"SELECT 1;\n\\echo next-$marker :SQLSTATE\n") =~ /next-$marker (\w+)/;
	$holder->query(q{ROLLBACK});
	my $held = $asker->query_safe(q{SELECT count(*) FROM zk_lock_holders('RX')});
	$holder->query(q{SELECT zk_lock_release_all()});
	$holder->{stderr} = '';
	return ($code, $in_window, $next, $held);
}

sub rows
{
	my ($table, $tag) = @_;
	return $node->safe_psql('postgres', "SELECT count(*) FROM $table WHERE tag = '$tag'");
}

# A case whose transaction commits under the request: its SQLSTATE, the rows
# it committed, and where the request was raised.
sub commits_ok
{
	my ($what, $sql, %want) = @_;
	my ($code, $in_window, $next, $held) = run_asked($sql, @{ $want{also} // [] });
	ok($in_window, "$what: the request was heard while its deferred trigger ran");
	is($code, $want{code} // '00000', "$what: ends with " . ($want{code} // '00000'));
	is(rows($want{table} // 'work', $want{tag}), $want{rows}, "$what: $want{rows} rows committed");
	is($next, $want{next} // '57Z01', "$what: the next statement fails with "
		  . ($want{next} // '57Z01'));
	is($held, '0', "$what: RX is released");
	return;
}

# 1. Commits without a COMMIT statement.
commits_ok('autocommit INSERT', q{INSERT INTO work VALUES ('auto', 1);}, tag => 'auto', rows => 1);
commits_ok('two statements in one query string',
	q{INSERT INTO work VALUES ('multi', 1) \; INSERT INTO work VALUES ('multi', 2);},
	tag => 'multi', rows => 2);
commits_ok('autocommit CALL', q{CALL insert_one('call');}, tag => 'call', rows => 1);
commits_ok('autocommit EXECUTE', q{EXECUTE ins('execute');}, tag => 'execute', rows => 1);
commits_ok('autocommit COPY', q{COPY work FROM PROGRAM 'echo copy,1' (FORMAT csv);},
	tag => 'copy', rows => 1);
commits_ok('a deferred trigger that releases a lock', q{INSERT INTO work_release VALUES ('rel', 1);},
	table => 'work_release', tag => 'rel', rows => 1, also => ['RY']);

# The extended protocol: pgbench sends Parse/Bind/Execute/Sync, the commit
# comes with the Sync (after a pipeline's last Execute).
for my $shape (
	[ 'extended protocol', 'ext', "INSERT INTO work VALUES ('ext', 1);\n", 1 ],
	[ 'extended protocol pipeline', 'pipe',
		"\\startpipeline\nINSERT INTO work VALUES ('pipe', 1);\nINSERT INTO work VALUES ('pipe', 2);\n\\endpipeline\n", 2 ])
{
	my ($what, $tag, $script, $rows) = @$shape;
	my $file = "$PostgreSQL::Test::Utils::tmp_check/$tag.sql";
	open my $fh, '>', $file or die "$file: $!";
	print $fh "SET zklock.revocable = on;\nSELECT zk_lock_acquire('RX');\n", $script, "SELECT 1;\n";
	close $fh;
	my ($out, $err) = ('', '');
	my $h = IPC::Run::start(
		[ 'pgbench', '-n', '-M', 'extended', '-t', '1', '-f', $file,
		  $node->connstr('postgres') . " application_name=$tag" ],
		'>', \$out, '2>', \$err, IPC::Run::timeout(60));
	my $in_window = ask_while_sleeping($tag);
	$h->finish;
	ok($in_window, "$what: the request was heard while its deferred trigger ran");
	is(rows('work', $tag), $rows, "$what: $rows rows committed");
	my $last = $tag eq 'pipe' ? 6 : 3;
	like($err, qr/aborted in command $last .*canceling statement because the release/s,
		"$what: the next statement (command $last) fails with 57Z01")
	  or diag $err;
}

# 2. PL/pgSQL's COMMIT: it keeps its row, the INSERT after it fails.
commits_ok('COMMIT in a procedure', q{CALL commit_then_more('proc');},
	tag => 'proc', rows => 1, code => '57Z01', next => '00000');
commits_ok('COMMIT AND CHAIN in a procedure', q{CALL chain_then_more('chain');},
	tag => 'chain', rows => 1, code => '57Z01', next => '00000');
commits_ok('COMMIT in a DO block',
	q{DO $$BEGIN INSERT INTO work VALUES ('do', 1); COMMIT; INSERT INTO work VALUES ('do', 2); END$$;},
	tag => 'do', rows => 1, code => '57Z01', next => '00000');

# 3. Statements.
commits_ok('COMMIT', qq{BEGIN;\nINSERT INTO work VALUES ('block', 1);\nCOMMIT;},
	tag => 'block', rows => 1);
{
	my ($code, $in_window, $next) =
	  run_asked(qq{BEGIN;\nINSERT INTO work VALUES ('2pc', 1);\nPREPARE TRANSACTION 'zk2pc';});
	ok($in_window, 'PREPARE TRANSACTION: the request was heard while its deferred trigger ran');
	is($code, '00000', 'PREPARE TRANSACTION succeeds');
	is($next, '57Z01', 'PREPARE TRANSACTION: the next statement fails with 57Z01');
	$node->safe_psql('postgres', q{COMMIT PREPARED 'zk2pc'});
	is(rows('work', '2pc'), 1, 'PREPARE TRANSACTION: its row is committed');
}

# 4. The quiet section ends with the transaction: each sleep is interrupted.
for my $case (
	[ 'a statement after an autocommit one', qq{INSERT INTO plain VALUES ('q', 1);\nSELECT pg_sleep(3);} ],
	[ 'a statement after another in a block', qq{BEGIN;\nINSERT INTO plain VALUES ('q', 1);\nSELECT pg_sleep(3);} ],
	[ 'a statement after a failed COMMIT', qq{BEGIN;\nSELECT 1/0;\nCOMMIT;\nSELECT pg_sleep(3);} ],
	[ 'a procedure after its COMMIT', q{CALL commit_then_sleep('qc');} ],
	[ 'a procedure after its ROLLBACK AND CHAIN', q{CALL rollback_then_sleep('qr');} ])
{
	my ($what, $sql) = @$case;
	my ($code, undef, undef, $held) = run_asked($sql);
	is($code, '57Z01', "$what: its sleep is interrupted with 57Z01");
	is($held, '0', "$what: RX is released");
}
is(rows('plain', 'qc'), 1, 'the procedure kept what it committed');

$_->quit for $holder, $asker;
finish_checks($zk, [$node]);
done_testing();
