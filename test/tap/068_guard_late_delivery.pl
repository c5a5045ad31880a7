
# The commit guard when the leader's messages reach the follower late
# (issue 47).  ZooKeeper bounds the leader's silence towards a follower only
# by the follower's read timeout (tickTime x syncLimit), and a follower
# answers its clients' reads by itself; so a one-way stall of the
# leader-to-follower stream, its bytes kept in order and delivered late,
# goes unnoticed while it is shorter than that.
#
# Three servers, tickTime = T/2 (the worst the default minSessionTimeout
# allows), syncLimit 5 (Debian's zoo.cfg); node A talks only to follower 1,
# through test/zk/zkrelay.py, which also carries follower 1's link to the
# leader (server 3); node B talks to servers 2 and 3.  Each stall round:
# the relay holds every byte the leader sends to follower 1 from the
# moment the follower's PING reply has reported A's session to the leader
# (its last touch the leader hears: at P).  The leader expires the session
# at X, P + T rounded up to its next tick (checked against its "Expiring
# session" line).  B queues for lock G and is granted after X.  At X + 0.6 s
# the relay releases what the leader sent before X - 0.1 s, the rest a
# second later.  Meanwhile the relay refuses A's new connections: a client
# whose requests wait behind a sync the follower cannot answer hears
# nothing and reconnects after 2T/3, and the reconnect's REVALIDATE would
# touch the session, which then lives on; refused, it expires at X, and
# A's COMMIT must fail rather than pass after B's grant.  Shapes:
#   i:   A holds G in a transaction; during the stall another backend of A
#        reads (zk_lock_queue) at X - 0.35 s - 0.3 T, and A commits at
#        X - 0.3 s;
#   ii:  the same with no read of a backend during the stall, only the
#        worker's own idle reads: A's read before P times them so that one
#        falls at X - 0.38 s - 0.3 T, and A commits 0.3 T + 50 ms after
#        the last of them by X - 0.32 s - 0.3 T;
#   iii: the create path: A takes G at X - 0.3 s (after the read of i) and
#        commits at once, so the COMMIT needs no round trip; B queues 0.1 s
#        after A's create;
#   control: the timings of i, ii, iii in turn, nothing held: A must
#        commit every round.
# Unsafe: B's grant (clock_timestamp() right after its acquire returned)
# before A's commit record (pg_xact_commit_timestamp of A's row).  A COMMIT
# that fails with 40001 is safe.
#
# Lag shapes (the first T only): every byte of the quorum link lagged
# T/2..2T each way; the leader-to-follower stream lagged longer than
# tickTime x syncLimit with nothing written (ZooKeeper must not notice:
# the follower keeps its connection to the leader; then A commits); the client link lagged T/24..T/12 each way.  A and
# B take G in transactions over and over meanwhile; no two committed
# sections (grant to commit record) may overlap.
#
# ZKLOCK_GUARD_ROUNDS (default 1) rounds per stall shape and control;
# ZKLOCK_GUARD_TIMEOUTS (default "4000": tickTime is T/2 at every T, so a
# longer T is the same shape, slower; bench/run.sh adds 8000) the session
# timeouts T, in ms, each with its own ensemble; ZKLOCK_GUARD_LAG_TIMEOUTS (default the
# first of those) where the lag shapes run; ZKLOCK_ZK_ROOT runs another
# ZooKeeper (test/perl/ZkServer.pm).  bench/run.sh: 30 rounds.  Prints one
# line per round; times are in seconds from X.
#
# Runs alone: relay events placed to the millisecond.

use strict;
use warnings;

use File::Copy qw(copy);
use FindBin;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

use RelayLog;
use ZklockTest;

my $rounds = $ENV{ZKLOCK_GUARD_ROUNDS} // 1;
# Control rounds so far: they take the stall shapes' timings in turn.
my $controls = 0;
my @timeouts = split ' ', ($ENV{ZKLOCK_GUARD_TIMEOUTS} // '4000');
my %lag_at = map { $_ => 1 } split ' ', ($ENV{ZKLOCK_GUARD_LAG_TIMEOUTS} // $timeouts[0]);
my $SYNC_LIMIT = 5;
# Rounds in a row whose event order missed, before the test gives up.
my $TRIES = 3;
# The lags' rate of change (seconds of delay per second): below 1, so the
# stream is never silent for longer than 1.9 times a gap of the sender's.
my $LAG_RATE = 0.9;
my $B_ACQUIRE = q{SELECT ok, extract(epoch FROM clock_timestamp()) FROM
  (SELECT zk_lock_acquire('G', 60000) AS ok OFFSET 0) s};

sub run_timeout
{
	my ($T) = @_;
	my $tick = $T / 2;
	my $zk = start_zk(servers => 3, relay => 1, tick_ms => $tick,
		sync_limit => $SYNC_LIMIT, min_session_ms => 0, log4j => 1);
	diag sprintf('T=%d: ZooKeeper %s, tickTime %d, syncLimit %d (the follower\'s read '
		  . 'timeout %.0f s), initLimit 20, minSessionTimeout 2 x tickTime; '
		  . 'zklock.session_timeout %d',
		$T, $zk->version // '?', $tick, $SYNC_LIMIT, $tick * $SYNC_LIMIT / 1000, $T);
	is($zk->leader, 3, "T=$T: server 3 leads");
	is($zk->mode(1), 'follower', "T=$T: server 1 follows it through the relay");
	ok($zk->is_logging, "T=$T: the leader logs its expiries");

	my $env = { zk => $zk, T => $T, tick => $tick };
	$env->{node_a} = zk_node("node_a_$T", $zk,
		'zklock.hosts' => $zk->relay_hosts,
		'zklock.session_timeout' => $T,
		'track_commit_timestamp' => 'on');
	$env->{node_b} = zk_node("node_b_$T", $zk,
		'zklock.hosts' => $zk->hosts(2, 3),
		'zklock.session_timeout' => $T,
		'track_commit_timestamp' => 'on');
	for my $node ($env->{node_a}, $env->{node_b})
	{
		$node->safe_psql('postgres', q{
CREATE TABLE work (round int, shape text);
CREATE TABLE sections (shape text, i int, granted timestamptz)});
	}
	# G's parent is persistent: a container could be gone when the create
	# path's create is sent, and its create would take a second round trip.
	system('/usr/bin/python3', "$FindBin::Bin/../zk/zkwrite.py", $zk->hosts, 'mkdir', ZK_ROOT . '/G') == 0
	  or die 'zkwrite.py mkdir failed';
	$env->{b} = session($env->{node_b}, 'b');
	$env->{r} = session($env->{node_a}, 'r');
	$_->set_query_timer_restart for @$env{qw(b r)};
	$env->{r}->query_safe('\set VERBOSITY verbose');

	my $round = 0;
	for my $shape (qw(i ii iii control))
	{
		my %n = map { $_ => 0 } qw(done unsafe refused missed);
		my $tries = 0;
		while ($n{done} < $rounds)
		{
			die "T=$T shape $shape: the event order missed $TRIES times in a row"
			  if $tries++ >= $TRIES;
			$round++;
			my $held = $shape ne 'control';
			my $timing = $held ? $shape : (qw(i ii iii))[ $controls++ % 3 ];
			my $r = stall_round($env, $timing, $held, $round);
			if (!$r->{shape_ok})
			{
				$n{missed}++;
				diag "T=$T round $round ($shape): event order missed ($r->{why}); again";
				next;
			}
			$tries = 0;
			$n{done}++;
			$n{unsafe}++ if $r->{unsafe};
			$n{refused}++ if $r->{refused};
		}
		is($n{refused}, 0, "T=$T control (nothing held): A committed in all $rounds rounds")
		  if $shape eq 'control';
		is($n{unsafe}, 0,
			"T=$T $shape: no commit record of A after B's grant, in $rounds rounds"
			  . " ($n{refused} COMMITs refused, $n{missed} rounds made again)");
	}
	if ($lag_at{$T})
	{
		lag_quorum($env);
		lag_long($env);
		lag_client($env);
	}
	$env->{$_}->quit for qw(b r);
	# The relay's and the leader's logs, beside the test's.
	copy($zk->relay_log, "$PostgreSQL::Test::Utils::log_path/068_relay_$T.log");
	copy($zk->dir . '/server3.log', "$PostgreSQL::Test::Utils::log_path/068_leader_$T.log");
	finish_checks($zk, [ $env->{node_a}, $env->{node_b} ], 3 * $T / 1000 + 20);
	return;
}

# A's session id, after checking it is on follower 1 through the relay.
sub a_session
{
	my ($env, $what) = @_;
	my $zk = $env->{zk};
	# A session given up in the shape before may still be replaced by now.
	wait_worker_session($env->{node_a}, 3 * $env->{T} / 1000 + 60);
	my ($sid, $server) = split /\|/, $env->{node_a}->safe_psql('postgres',
		q{SELECT session_id, server FROM zk_session() WHERE state = 'connected'});
	die "$what: node A has no connected session" unless $sid;
	my $cons = $zk->flw(1, 'cons') // '';
	ok($server eq $zk->relay_hosts && $cons =~ /sid=\Q$sid\E\b/i
		  && $zk->mode(1) eq 'follower' && $zk->leader == 3,
		"$what: A's session $sid is on follower 1 (via the relay), server 3 leads")
	  or diag "server $server; cons of 1: $cons";
	return $sid;
}

# The next PING reply of the follower at or after $after, from the phase
# of the last one seen (the leader pings every tickTime/2).
sub next_ping_reply
{
	my ($env, $after) = @_;
	my @pings = map { $_->[0] }
	  grep { $_->[1] eq 'quorum' && $_->[3] eq 'f>l' && $_->[4] =~ /^PING/ }
	  @{ relay_lines($env->{zk}, $env->{from}) };
	die 'no PING reply of the follower seen' unless @pings;
	my $p = $pings[-1];
	$p += $env->{tick} / 2000 while $p < $after;
	return $p;
}

# Wait for the follower's next PING reply that touches $sid after $after;
# returns its time.
sub wait_touch
{
	my ($env, $sid, $after, $timeout) = @_;
	my $until = now_mono() + $timeout;
	while (now_mono() < $until)
	{
		my ($p) = grep { $_ > $after } @{ touches(relay_lines($env->{zk}, $env->{from}), $sid) };
		return $p if defined $p;
		sleep_for(0.01);
	}
	die "no PING reply touching $sid within $timeout s";
}

# A read of another backend of A's, sent now; read_outcome says later how
# it ended (during a stall it may wait behind a request the leader must
# answer, and fail).
sub send_read
{
	my ($env) = @_;
	send_query($env->{r}, q{SELECT count(*) FROM zk_lock_queue('G')}, 'read-done');
	return;
}

sub read_outcome
{
	my ($env) = @_;
	my $r = $env->{r};
	wait_marker($r, 'read-done');
	my ($state) = $r->{stderr} =~ /ERROR:\s+(\w{5}):/;
	$r->{stderr} = '';
	return defined $state ? "failed with $state" : 'answered';
}

# One stall round (or its control, $held false); returns { shape_ok, why,
# unsafe, refused }.
sub stall_round
{
	my ($env, $shape, $held, $round) = @_;
	my ($zk, $T, $tick, $node_a, $b) = @$env{qw(zk T tick node_a b)};
	my $Ts = $T / 1000;
	my $bound = 0.3 * $Ts;
	my $name = $held ? $shape : "control-$shape";
	my $sid = a_session($env, "T=$T round $round");
	$env->{from} = relay_line_count($zk) - 200;
	# A's worker's connection through the relay: the latest.
	my ($conn) = map { $_->[2] } (grep { $_->[1] eq 'client' } @{ relay_lines($zk, $env->{from}) })[-1];

	my $a = session($node_a, 'a');
	$a->query_safe('\set VERBOSITY verbose');
	$a->query_safe($shape eq 'iii' ? 'BEGIN'
		: "BEGIN; INSERT INTO work VALUES ($round, '$name'); SELECT zk_lock_xact_acquire('G')");
	if ($shape ne 'iii')
	{
		send_query($b, $B_ACQUIRE, 'b-done');
		wait_for_wait_event($env->{node_b}, 'b') or die 'B does not wait for G';
	}

	# ii: a read of A's, before the touch the leader hears last, sets the
	# phase of the worker's idle reads (every T/6 from its last send, each
	# a few ms late) so that one falls 0.3 T + 80 ms before X - 0.3 s.
	my $aligned_at;
	if ($shape eq 'ii')
	{
		my $after = now_mono() + 0.3;
		while (1)
		{
			my $p = next_ping_reply($env, $after);
			my $want = leader_deadline($p, $T, $tick) - 0.38 - $bound;
			$want -= $Ts / 6 while $want > $p - 0.06;
			if ($want >= now_mono() + 0.05)
			{
				$aligned_at = $want;
				last;
			}
			$after = $p + 0.01;
		}
		sleep_until_mono($aligned_at);
		send_read($env);
		read_outcome($env);
	}

	# P: the follower's PING reply that reports A's session to the leader
	# for the last time (with the stall) or the next one (the control).
	my $P;
	if ($held)
	{
		$zk->relay_cmd("arm hold l>f touch $sid");
		$zk->relay_cmd('refuse client on');
		my $answer = $zk->relay_cmd('wait ' . 2 * $Ts);
		($P) = $answer =~ /^hold (\S+)/ or die "relay: no hold ($answer)";
	}
	else
	{
		$P = wait_touch($env, $sid, now_mono(), 2 * $Ts);
	}
	my $X = leader_deadline($P, $T, $tick);
	my $read_at = $X - 0.35 - $bound;
	# ii: the last idle read that leaves the COMMIT, 0.3 T + 50 ms after
	# it, before X - 0.27 s.
	my $idle_by = $X - 0.32 - $bound;

	my ($W, $read_sent, $missed);
	if ($shape eq 'ii')
	{
		sleep_until_mono($idle_by + 0.01);
		my @idle = grep { $_->[0] > $P && $_->[0] <= $idle_by }
		  @{ worker_sends(relay_lines($zk, $env->{from}), $conn) };
		$missed = 'no idle read of the worker by X - 0.32 s - 0.3 T' unless @idle;
		$W = @idle ? $idle[-1][0] + $bound + 0.05 : $X - 0.3;
	}
	else
	{
		sleep_until_mono($read_at);
		$read_sent = now_mono();
		send_read($env);
		$W = $X - 0.3;
	}
	sleep_until_mono($W);
	my $commit_sent = now_mono();
	if ($shape eq 'iii')
	{
		# A's row only if A got G: its create may come after B's (behind a
		# request of the session that the follower holds until the leader's
		# answer comes), and then A waits for B until it gives up.
		send_query($a, qq{INSERT INTO work SELECT $round, '$name'
  FROM (SELECT zk_lock_xact_acquire('G', $T) AS ok OFFSET 0) s WHERE ok; COMMIT}, 'committed');
		sleep_until_mono($W + 0.1);
		send_query($b, $B_ACQUIRE, 'b-done');
	}
	else
	{
		send_query($a, 'COMMIT', 'committed');
	}
	my @released;
	if ($held)
	{
		sleep_until_mono($X + 0.6);
		push @released, $zk->relay_cmd(sprintf('release l>f before %.6f', $X - 0.1));
		sleep_until_mono($X + 1.6);
		push @released, $zk->relay_cmd('release l>f all');
		$zk->relay_cmd('refuse client off');
	}
	wait_marker($a, 'committed');
	my $read = defined $read_sent ? ' (' . read_outcome($env) . ')' : '';
	my $refused = $a->{stderr} =~ /40001/ ? 1 : 0;
	my $errors = join ' ', $a->{stderr} =~ /ERROR:\s+(\w{5})/g;
	my $commit_at = $node_a->safe_psql('postgres', qq{
SELECT extract(epoch FROM pg_xact_commit_timestamp(xmin)) FROM work WHERE round = $round});
	$a->{stderr} = '';
	$a->quit;
	my $b_out = wait_marker($b, 'b-done');
	my ($b_ok, $b_at) = $b_out =~ /^(t|f)\|(\S+)/m;
	die "T=$T round $round: no answer from B ($b_out)" unless defined $b_ok;
	my $expiring = $held ? expiring_at($zk, $sid) : undef;

	# The event order: the COMMIT (or the create) was sent before
	# X - 0.1 s, the leader heard of A no more after P (no REVALIDATE: the
	# relay refused A's reconnects) and expired the session at X (within
	# 0.1 s).
	my $lines = relay_lines($zk, $env->{from});
	my ($revalidated) = map { $_->[0] } grep {
		$_->[1] eq 'quorum' && $_->[3] eq 'f>l' && $_->[0] > $P && $_->[0] < $X
		  && $_->[4] =~ /^(REVALIDATE .*sid=\Q$sid\E |PING .*touched=\S*\Q$sid\E)/i
	} @$lines;
	my ($shape_ok, $why) = (1, '');
	if ($missed)
	{
		($shape_ok, $why) = (0, $missed);
	}
	elsif ($held && defined $revalidated)
	{
		($shape_ok, $why) = (0, sprintf('the leader heard of A at X %+.3f s',
				$revalidated - $X));
	}
	elsif ($held && (!defined $expiring || abs($expiring - mono_to_epoch($X)) > 0.1))
	{
		($shape_ok, $why) = (0, 'the leader did not expire the session at X');
	}
	elsif ($commit_sent > $X - 0.1)
	{
		($shape_ok, $why) = (0, sprintf('the COMMIT was sent at X %+.3f s', $commit_sent - $X));
	}
	# What A's worker sent from the COMMIT on, and what of the leader's
	# answers to it came in the first part.
	my @sent = map { $_->[1] =~ /type=(-?\d+)/ ? $1 : '?' }
	  grep { $_->[0] >= $commit_sent && $_->[0] < $X } @{ worker_sends($lines, $conn) };
	my @part1 = grep {
		$_->[1] eq 'quorum' && $_->[3] eq 'l>f' && $_->[4] =~ /^PROPOSAL .*sid=\Q$sid\E /i
		  && $_->[4] =~ /read=(\S+)/ && $1 >= $commit_sent && $1 < $X - 0.1
	} @$lines;
	my $unsafe = $commit_at ne '' && $b_ok eq 't' && $b_at < $commit_at;
	my $rel = sub { defined $_[0] && $_[0] ne '' ? sprintf('%+.3f', $_[0] - mono_to_epoch($X)) : '-' };
	diag sprintf(
		'T=%d round %d %s: P %s%s; read %s%s; COMMIT %s; sent then (types) %s, %d proposal(s) '
		  . 'of A\'s in part 1; expiring %s; %s; A %s, commit record %s; B granted %s; '
		  . 'margin %s%s',
		$T, $round, $name, $rel->(mono_to_epoch($P)),
		defined $aligned_at ? ' (aligning read ' . $rel->(mono_to_epoch($aligned_at)) . ')' : '',
		$rel->(defined $read_sent ? mono_to_epoch($read_sent) : undef), $read,
		$rel->(mono_to_epoch($commit_sent)), join(',', @sent) || '-', scalar @part1,
		defined $expiring ? $rel->($expiring) : '-',
		@released ? 'released: ' . join('; ', map { /release l>f (\d+ bytes \d+ frames)/ ? $1 : $_ } @released) : 'nothing held',
		$refused ? 'refused (40001)' : $commit_at ne '' ? 'committed'
		: $errors ? "rolled back ($errors)" : 'not granted G in time',
		$rel->($commit_at), $b_ok eq 't' ? $rel->($b_at) : 'not granted',
		$commit_at ne '' && $b_ok eq 't' ? sprintf('%+.3f', $b_at - $commit_at) : '-',
		$unsafe ? ' UNSAFE' : '');

	# B lets go; after a stall, wait for A's next session; and for a clean
	# lock tree.
	$b->query_safe(q{SELECT zk_lock_release('G')}) if $b_ok eq 't';
	if ($held && defined $expiring)
	{
		$node_a->poll_query_until('postgres', qq{
SELECT state = 'connected' AND session_id <> '$sid' FROM zk_session()})
		  or die "T=$T round $round: node A has no new session after the stall";
	}
	elsif ($held)
	{
		defined wait_worker_session($node_a, 3 * $Ts + 20)
		  or die "T=$T round $round: node A has no session after the stall";
	}
	my $left = $zk->wait_no_ephemerals(ZK_ROOT, 3 * $Ts + 20);
	die "T=$T round $round: lock nodes left: " . join(' ', map { $_->[0] } @$left) if @$left;
	return { shape_ok => $shape_ok, why => $why, unsafe => $unsafe,
		refused => $refused || $commit_at eq '' };
}

# A and B take G in transactions, each over and over, for $seconds; each
# acquisition waits at most 2 T.  Returns { side => { outcome => count } }:
# a transaction ended (committed, or its acquisition timed out), or failed
# with a SQLSTATE.
sub contend
{
	my ($env, $shape, $seconds) = @_;
	my $to = 2 * $env->{T};
	my %s = (a => session($env->{node_a}, "lag_a"), b => session($env->{node_b}, "lag_b"));
	my (%busy, %tally, %n);
	$_->query_safe('\set VERBOSITY verbose') for values %s;
	my $until = time + $seconds;
	while (1)
	{
		my $active = 0;
		for my $side (sort keys %s)
		{
			my $s = $s{$side};
			if ($busy{$side})
			{
				$s->{run}->pump_nb;
				next unless $s->{stdout} =~ /\Q$busy{$side}\E/;
				my @errors = $s->{stderr} =~ /ERROR:\s+(\w{5})/g;
				$tally{$side}{ @errors ? "failed with $errors[-1]" : 'ended' }++;
				$s->{stdout} = $s->{stderr} = '';
				delete $busy{$side};
			}
			next if time > $until;
			my $i = ++$n{$side};
			send_query($s, qq{BEGIN;
INSERT INTO sections SELECT '$shape', $i, clock_timestamp()
  FROM (SELECT zk_lock_xact_acquire('G', $to) AS ok OFFSET 0) s WHERE ok;
COMMIT}, "$shape-$side-$i");
			$busy{$side} = "$shape-$side-$i";
		}
		$active += !!$busy{$_} for keys %s;
		last if !$active && time > $until;
		sleep_for(0.02);
	}
	$_->quit for values %s;
	return \%tally;
}

# The committed sections of $shape on both nodes, [grant, commit record],
# that overlap another (each pair once).
sub overlapping_sections
{
	my ($env, $shape) = @_;
	my @rows;
	for my $node (@$env{qw(node_a node_b)})
	{
		push @rows, map { [ $node->name, split /\|/ ] } grep { length } split /\n/,
		  $node->safe_psql('postgres', qq{
SELECT i, extract(epoch FROM granted), extract(epoch FROM pg_xact_commit_timestamp(xmin))
  FROM sections WHERE shape = '$shape'});
	}
	@rows = sort { $a->[2] <=> $b->[2] } @rows;
	my @overlaps;
	for my $k (1 .. $#rows)
	{
		push @overlaps, sprintf('%s %d [%.3f, %.3f] and %s %d granted %.3f',
			@{ $rows[ $k - 1 ] }, @{ $rows[$k] }[ 0 .. 2 ])
		  if $rows[$k][2] < $rows[ $k - 1 ][3];
	}
	return (\@overlaps, scalar @rows);
}

# After a lag: A's session (the same or a new one) connected, no lock node
# left.
sub after_lag
{
	my ($env, $what) = @_;
	my $Ts = $env->{T} / 1000;
	defined wait_worker_session($env->{node_a}, 3 * $Ts + 60)
	  or die "$what: node A has no session after the lag";
	my $left = $env->{zk}->wait_no_ephemerals(ZK_ROOT, 3 * $Ts + 20);
	die "$what: lock nodes left: " . join(' ', map { $_->[0] } @$left) if @$left;
	return;
}

sub report_contention
{
	my ($env, $shape, $tally, $note) = @_;
	my ($overlaps, $sections) = overlapping_sections($env, $shape);
	$tally->{$_}{'with a section committed'} = $env->{"node_$_"}->safe_psql('postgres',
		"SELECT count(*) FROM sections WHERE shape = '$shape'") for keys %$tally;
	my $t = join '; ', map {
		my $side = $_;
		"$side: " . join(', ', map { "$tally->{$side}{$_} $_" } sort keys %{ $tally->{$side} })
	} sort keys %$tally;
	is_deeply($overlaps, [],
		"T=$env->{T} $shape: no two committed sections of G overlap ($sections committed; $t)$note");
	return;
}

# Every byte of the quorum link lagged T/2..2T each way.
sub lag_quorum
{
	my ($env) = @_;
	my ($zk, $T) = @$env{qw(zk T)};
	my $Ts = $T / 1000;
	a_session($env, "T=$T lag-quorum");
	$zk->relay_cmd(sprintf('lag %s %.3f %.3f %.2f %s', $_, $Ts / 2, 2 * $Ts, $LAG_RATE, "068$_"))
	  for qw(l>f f>l);
	my $tally = contend($env, 'lag-quorum', 2 * $Ts);
	$zk->relay_cmd("lag $_ off") for qw(l>f f>l);
	after_lag($env, "T=$T lag-quorum");
	report_contention($env, 'lag-quorum', $tally, '');
	return;
}

# The client link lagged T/24..T/12 each way: a round trip takes up to T/6,
# which leaves 1.6's guard a proof long enough to commit.
sub lag_client
{
	my ($env) = @_;
	my ($zk, $T) = @$env{qw(zk T)};
	my $Ts = $T / 1000;
	a_session($env, "T=$T lag-client");
	$zk->relay_cmd(sprintf('lag %s %.3f %.3f 0.5 %s', $_, $Ts / 24, $Ts / 12, "068$_"))
	  for qw(c>s s>c);
	my $tally = contend($env, 'lag-client', 2 * $Ts);
	$zk->relay_cmd("lag $_ off") for qw(c>s s>c);
	after_lag($env, "T=$T lag-client");
	report_contention($env, 'lag-client', $tally, '');
	return;
}

# The leader-to-follower stream lagged longer than tickTime x syncLimit
# while no proposal is outstanding: A holds G in a transaction, B waits
# for it, nothing writes.  ZooKeeper must not notice (the follower keeps
# its connection to the leader); then A commits, which needs the leader.
sub lag_long
{
	my ($env) = @_;
	my ($zk, $T, $tick, $node_a, $b) = @$env{qw(zk T tick node_a b)};
	my $Ts = $T / 1000;
	my $limit = $tick * $SYNC_LIMIT / 1000;
	my $sid = a_session($env, "T=$T lag-long");
	my $a = session($node_a, 'a');
	$a->query_safe('\set VERBOSITY verbose');
	$a->query_safe(q{BEGIN; INSERT INTO work VALUES (0, 'lag-long'); SELECT zk_lock_xact_acquire('G')});
	# A waiter past deadlock_timeout publishes its wait: a write.
	$b->query_safe(q{SET deadlock_timeout = '10min'});
	send_query($b, $B_ACQUIRE, 'b-done');
	wait_for_wait_event($env->{node_b}, 'b') or die 'B does not wait for G';
	my $from = relay_line_count($zk);
	my ($lo, $hi) = (1.1 * $limit, 1.2 * $limit);
	$zk->relay_cmd(sprintf('lag l>f %.3f %.3f %.2f 068long', $lo, $hi, $LAG_RATE));
	# The delay passes the read timeout after $lo / rate, and the PING the
	# leader sends then reaches the follower that much later.
	my ($lines, $delay);
	my $until = now_mono() + $lo / $LAG_RATE + $hi + 10;
	while (now_mono() < $until)
	{
		sleep_for(0.5);
		$lines = relay_lines($zk, $from);
		($delay) = map { $_->[0] - ($_->[4] =~ /read=(\S+)/)[0] }
		  (grep { $_->[3] eq 'l>f' && $_->[4] =~ /^PING .*read=/ } @$lines)[-1];
		last if defined $delay && $delay > $limit;
	}
	my %conns = map { $_->[2] => 1 } grep { $_->[1] eq 'quorum' } @$lines;
	my $rejoined = grep { $_->[4] =~ /^FOLLOWERINFO / } @$lines;
	# Nothing written: no write forwarded (a sync, type 9, is no proposal),
	# no proposal delivered.
	my $quiet = !grep {
		($_->[3] eq 'f>l' && $_->[4] =~ /^REQUEST / && $_->[4] !~ / type=9\b/)
		  || ($_->[3] eq 'l>f' && $_->[4] =~ /^PROPOSAL /)
	} @$lines;
	my $same = $node_a->safe_psql('postgres', 'SELECT session_id FROM zk_session()') eq $sid;
	ok(defined $delay && $delay > $limit && keys %conns == 1 && !$rejoined
		  && $zk->mode(1) eq 'follower',
		sprintf('T=%d lag-long: the leader\'s PINGs reach the follower %.1f s late (> %.0f s, '
			  . 'tickTime x syncLimit), and it still follows on the same connection', $T,
			$delay // -1, $limit))
	  or diag explain { delay => $delay, connections => [ keys %conns ], rejoined => $rejoined,
		mode => $zk->mode(1) };
	# What zklock did meanwhile: whether it wrote (a new session is a
	# write), and whether A's session lived through the lag.
	diag sprintf('T=%d lag-long: %s written while the delay grew; A\'s session %s', $T,
		$quiet ? 'nothing' : 'something', $same ? 'the same' : 'given up for another');
	my $commit_sent = now_mono();
	$a->query_until(qr/committed/, "COMMIT;\n\\echo committed\n");
	my $took = now_mono() - $commit_sent;
	my $refused = $a->{stderr} =~ /40001/ ? 1 : 0;
	my $commit_at = $node_a->safe_psql('postgres', q{
SELECT extract(epoch FROM pg_xact_commit_timestamp(xmin)) FROM work WHERE shape = 'lag-long'});
	$a->quit;
	my $b_out = wait_marker($b, 'b-done');
	my ($b_ok, $b_at) = $b_out =~ /^(t|f)\|(\S+)/m;
	$zk->relay_cmd('lag l>f off');
	$b->query_safe(q{SELECT zk_lock_release('G')}) if $b_ok eq 't';
	$b->query_safe('RESET deadlock_timeout');
	after_lag($env, "T=$T lag-long");
	my $unsafe = $commit_at ne '' && $b_ok eq 't' && $b_at < $commit_at;
	ok(!$unsafe, sprintf('T=%d lag-long: A\'s COMMIT (%s %.1f s after it was sent) has no '
		  . 'commit record after B\'s grant (B granted %s)', $T,
		$refused ? 'refused with 40001' : $commit_at ne '' ? 'committed' : 'rolled back',
		$took,
		$b_ok ne 't' ? 'never' : $commit_at ne '' ? sprintf('%+.3f s after the commit record', $b_at - $commit_at)
		: sprintf('%+.1f s from the COMMIT\'s sending', $b_at - mono_to_epoch($commit_sent))));
	return;
}

run_timeout($_) for @timeouts;
done_testing();
