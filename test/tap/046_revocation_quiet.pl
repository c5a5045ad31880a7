
# Revocation never interrupts a COMMIT or a release, nor cancels a statement
# with 57014 (issue 25.5).  Under zklock.revocable the session worker
# signals a holder when another client asks it to let go; a request heard
# while the holder commits, or releases that very lock, must not fail the
# COMMIT or the release, and a request heard before a statement executes
# (while it is read, parsed or planned) fails it at its start with 57Z01,
# never with 57014.
#
#  1. Releases: acquire, 15 ms, release, 1,000 rounds, while another node
#     asks without pause; replies reach the holder's node 10 ms late (a
#     proxy), so that a release waits that long for its delete's answer.
#  2. COMMITs: the same with a deferred trigger that sleeps 10 ms in every
#     COMMIT.
#  3. The window before execution, forced: the release statement waits in
#     its parse for a table lock while the request is heard (the old code's
#     SIGINT cancelled it there with 57014, every time).
#  4. A user's own cancel still ends a statement in that window, and a
#     release that waits for its answer.
#
# Runs alone: two busy loops of 1,000 rounds race each other.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

use ZklockTest;

my $rounds = 1000;
my $zk = start_zk();
my $delayed = $zk->start_proxy(delay_ms => 10);
my $node_a = zk_node('node_a', $zk,
	'zklock.hosts' => $delayed,
	'zklock.session_timeout' => 10000);
my $node_b = zk_node('node_b', $zk);
$node_b->safe_psql('postgres', 'CREATE TABLE stop (x int); CREATE TABLE asked (n bigint)');
$node_a->safe_psql('postgres', q{
CREATE TABLE work (x int);
CREATE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_sleep(0.01);
  RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT ON work
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION slow_commit();
});

# Ask for the release of $lock until told to stop; returns how many holders
# were asked.
sub start_requester
{
	my ($lock) = @_;
	$node_b->safe_psql('postgres', 'TRUNCATE stop, asked');
	my $s = session($node_b, 'requester');
	send_query($s, qq{DO \$\$
DECLARE
  n bigint := 0;
  t0 timestamptz := clock_timestamp();
BEGIN
  WHILE NOT EXISTS (SELECT FROM stop) AND clock_timestamp() < t0 + interval '300 s' LOOP
    n := n + zk_lock_request_release('$lock');
    PERFORM pg_sleep(random() * 0.004);
  END LOOP;
  INSERT INTO asked VALUES (n);
END \$\$}, 'requester-done');
	return $s;
}

sub stop_requester
{
	my ($s) = @_;
	$node_b->safe_psql('postgres', 'INSERT INTO stop VALUES (1)');
	wait_marker($s, 'requester-done');
	$s->quit;
	return $node_b->safe_psql('postgres', 'SELECT n FROM asked');
}

# Run a script on node_a; returns { line => error } of its errors.
sub run_script
{
	my ($name, @lines) = @_;
	my $file = "$PostgreSQL::Test::Utils::tmp_check/$name.sql";
	open my $fh, '>', $file or die "$file: $!";
	print $fh "SET zklock.revocable = on;\n\\set VERBOSITY terse\n", map { "$_\n" } @lines;
	close $fh;
	my ($ret, $out, $err) = $node_a->psql('postgres', undef,
		on_error_stop => 0, extra_params => [ '-f', $file ]);
	my %errors;
	$errors{ $1 - 2 } = $2 while $err =~ /^psql:\Q$file\E:(\d+): ERROR:  (.*)$/mg;
	return \%errors;
}

# Errors that must not happen: a cancel left over from the worker's SIGINT
# (57014, no user cancels here), and any error of a COMMIT.  The others are
# the interrupts allowed: 57Z01 in a statement that runs while the request
# is heard, or at the start of the next one (a release's too: the request
# came before the release did).
sub tally
{
	my ($errors, $lines) = @_;
	my ($bad, $interrupts) = (0, 0);
	for my $line (sort { $a <=> $b } keys %$errors)
	{
		if ($lines->[ $line - 1 ] =~ /^COMMIT/ ||
			$errors->{$line} =~ /canceling statement due to user request/)
		{
			$bad++;
			diag "line $line ($lines->[$line - 1]): $errors->{$line}" if $bad <= 5;
		}
		else
		{
			$interrupts++;
		}
	}
	return ($bad, $interrupts);
}

# Run $name's rounds (the lines of one round: $round) on node_a while node_b
# asks for the release of $lock without pause; returns how many holders
# were asked, the errors that must not happen and the interrupts.
sub race
{
	my ($name, $lock, @round) = @_;
	my $requester = start_requester($lock);
	my @lines = map { @round } 1 .. $rounds;
	my $errors = run_script($name, @lines);
	my $asked = stop_requester($requester);
	my ($bad, $interrupts) = tally($errors, \@lines);
	note "$name: $asked holders asked, $interrupts statements interrupted (57Z01)";
	return ($asked, $bad, $interrupts);
}

# 1. Releases: the lock is held 15 ms, then released.
{
	my (undef, $bad, $interrupts) = race('releases', 'RR',
		q{SELECT zk_lock_acquire('RR');}, q{SELECT pg_sleep(0.015);}, q{SELECT zk_lock_release('RR');});
	cmp_ok($interrupts, '>=', $rounds / 4, "the holder was interrupted often ($interrupts times)");
	is($bad, 0, "no cancel left over in $rounds acquire/release rounds");
}

# 2. COMMITs: every COMMIT runs a deferred trigger for 10 ms.
{
	my ($asked, $bad) = race('commits', 'RC',
		q{BEGIN;}, q{SELECT zk_lock_xact_acquire('RC');}, q{INSERT INTO work VALUES (1);}, q{COMMIT;});
	cmp_ok($asked, '>=', $rounds / 4, "the other node asked the holder to let go often ($asked times)");
	is($bad, 0, "no COMMIT failed and no cancel was left over in $rounds rounds");
	cmp_ok($node_a->safe_psql('postgres', 'SELECT count(*) FROM work'), '>', $rounds / 2,
		'most transactions committed');
}

# 3. The release statement waits for a table lock in its parse, before
# it executes, while the request is heard; then the table is let go.  The
# last round cancels it there instead (4).
{
	$node_a->safe_psql('postgres', 'CREATE TABLE gate (x int); INSERT INTO gate VALUES (1)');
	my $holder = session($node_a, 'gated');
	$holder->query_safe(q{SET zklock.revocable = on});
	my $locker = session($node_a, 'locker');
	my $asker = session($node_b, 'asker');
	my ($gated_rounds, $cancels, $interrupts, $released, $user_cancels) = (20, 0, 0, 0, 0);
	for my $round (1 .. $gated_rounds + 1)
	{
		my $by_user = $round > $gated_rounds;
		$holder->query_safe(q{SELECT zk_lock_acquire('RG')});
		$locker->query_safe(q{BEGIN; LOCK TABLE gate IN ACCESS EXCLUSIVE MODE});
		$holder->{stdin} .= qq{SELECT zk_lock_release('RG') FROM gate;\n\\echo gated-$round :SQLSTATE\n};
		$holder->{run}->pump_nb;
		$node_a->poll_query_until('postgres',
			q{SELECT wait_event_type FROM pg_stat_activity WHERE application_name = 'gated'}, 'Lock')
		  or die 'the release does not wait for the table';
		if ($by_user)
		{
			$node_a->safe_psql('postgres',
				q{SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE application_name = 'gated'});
		}
		else
		{
			$asker->query_safe(q{SELECT zk_lock_request_release('RG')});
			# The worker wrote the request back into the node: it has heard it.
			poll_query($asker, q{SELECT bool_and(release_requested) FROM zk_lock_holders('RG')}, 't') eq 't'
			  or die 'the request was not heard';
			sleep_for(0.1);
		}
		$locker->query_safe('COMMIT');
		my $out = $holder->query_until(qr/gated-$round \w+\n/, '');
		my ($code) = $out =~ /gated-$round (\w+)/;
		$holder->{stderr} = '';
		if ($by_user)
		{
			$user_cancels++ if $code eq '57014';
		}
		elsif ($code eq '57014')
		{
			$cancels++;
		}
		elsif ($code eq '57Z01')
		{
			$interrupts++;
		}
		elsif ($code eq '00000' && $out =~ /^t$/m)
		{
			$released++;
		}
		else
		{
			diag "round $round: $out";
		}
		# The next round starts without the lock, whatever happened (the old
		# code raised the request here, after a 57014).
		$holder->query(q{SELECT zk_lock_release_all()});
		$holder->{stderr} = '';
	}
	is($cancels, 0, "no 57014 in $gated_rounds requests heard before the release executed");
	is($interrupts + $released, $gated_rounds,
		"each failed at its start with 57Z01 or released ($interrupts, $released)");
	is($user_cancels, 1, "the user's own cancel in that window is 57014");
	$_->quit for $holder, $locker, $asker;
}

# 4. A user's cancel still ends a release that waits for its answer.
{
	my $s = session($node_a, 'cancelled');
	$s->query_safe(q{SET zklock.revocable = on});
	# The ROLLBACK after the cancel waits for the delete this long at most.
	$s->query_safe(q{SET zklock.connect_timeout = 1000});
	$s->query_safe(q{SELECT zk_lock_acquire('UC')});
	$zk->signal($_, 'STOP') for $zk->running;
	send_query($s, q{SELECT zk_lock_release('UC')}, 'release-done');
	ok(wait_for_wait_event($node_a, 'cancelled'), 'the release waits for its answer');
	my $t0 = time;
	$node_a->safe_psql('postgres',
		q{SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE application_name = 'cancelled'});
	wait_marker($s, 'release-done');
	my $took = time - $t0;
	$zk->signal($_, 'CONT') for $zk->running;
	like($s->{stderr}, qr/canceling statement due to user request/, 'pg_cancel_backend cancels it');
	cmp_ok($took, '<', 3, sprintf('at once (%.2f s; the session timeout is 10 s)', $took));
	$s->quit;
}

finish_checks($zk, [ $node_a, $node_b ]);
done_testing();
