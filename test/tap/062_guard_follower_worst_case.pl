
# The commit guard's worst case with a follower (issue 41.1).  Only the
# leader expires sessions, and it moves a session's deadline only when it
# hears of a touch: for a client of a follower, through the follower's reply
# to the leader's PING (every tickTime/2), which lists the sessions it saw.
# A create the follower forwards is checked by the leader, not touched.
#
# Three servers, tickTime = T/2 (the worst the default minSessionTimeout
# allows); node A talks only to follower 1, through test/zk/zkrelay.py,
# which also carries follower 1's link to the leader (server 3); node B
# talks to servers 2 and 3.  Each round builds this order of events: A's
# worker sends (a read of A's, timed just before a PING reply of the
# follower whose time the leader's rounding of deadlines favours least; or
# whatever the worker sends after it); just before the worker's next idle
# send would be due, A takes the lock in a transaction that wrote a row; the relay cuts follower 1's quorum link the moment the create's
# reply has passed to A, before the follower's next PING reply, so the last
# touch the leader heard is the one before the create.  B queues for the
# lock.  Then A commits:
#   a: at once-ish: 2T/3 - 100 ms after the create was sent (just young
#      enough for the 1.5 guard to pass without a sync);
#   b: the same, but with a pause of T/3 - 100 ms between the guard and the
#      commit record (another session holds NOTIFY's lock, so A's COMMIT
#      waits in PreCommit_Notify, after the pre-commit callbacks);
#   c: control: the link is never cut; the timings of a and b in turn.
# Unsafe: B's grant (clock_timestamp() right after its acquire returned)
# comes before A's commit record (pg_xact_commit_timestamp of A's row).  A
# COMMIT that fails with 40001 is safe; in c, A must commit.
#
# ZKLOCK_GUARD_ROUNDS (default 1) rounds per shape; ZKLOCK_GUARD_TIMEOUTS
# (default "4000": tickTime is T/2 at every T, so a longer T is the same
# shape, slower) the session timeouts T to run, in ms, each with its own
# ensemble (bench/run.sh: 30 rounds at 4000 and 8000).  Prints one line per
# round; times are in seconds from the create's sending.
#
# Runs alone: relay events placed to the millisecond.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time clock_gettime CLOCK_MONOTONIC);

use RelayLog;
use ZklockTest;

my $rounds = $ENV{ZKLOCK_GUARD_ROUNDS} // 1;
my @timeouts = split ' ', ($ENV{ZKLOCK_GUARD_TIMEOUTS} // '4000');
# The worker's idle send interval, per T, as last measured: a new session
# need not idle through several sends again before its round.
my %known_interval;
# How long before the worker's next idle send is due the acquire is sent
# (the backend, the worker and the relay take a few ms to pass it on).
my $LEAD = 0.12;
# Tries per round for the event order (a follower PING reply can fall
# between the create and its reply; the round is then made again).
my $TRIES = 4;

# The worker's idle send interval: the median gap between its idle pings,
# or, if it pings no more, between whatever it sends by itself (leaving out
# the gaps within a burst, such as an acquisition's several requests).
sub idle_interval
{
	my ($sends) = @_;
	my (@gaps, @ping_gaps);
	for my $k (1 .. $#$sends)
	{
		my $gap = $sends->[$k][0] - $sends->[ $k - 1 ][0];
		next unless $gap > 0.2;
		push @gaps, $gap;
		push @ping_gaps, $gap
		  if $sends->[$k][1] =~ /xid=-2 / && $sends->[ $k - 1 ][1] =~ /xid=-2 /;
	}
	@gaps = @ping_gaps if @ping_gaps >= 2;
	return undef unless @gaps >= 2;
	@gaps = sort { $a <=> $b } @gaps;
	return $gaps[ int(@gaps / 2) ];
}

sub run_timeout
{
	my ($T) = @_;
	my $tick = $T / 2;
	my $zk = start_zk(servers => 3, relay => 1, tick_ms => $tick,
		min_session_ms => 0, log4j => 1);
	is($zk->leader, 3, "T=$T: server 3 leads");
	is($zk->mode(1), 'follower', "T=$T: server 1 follows it through the relay");

	my $node_a = zk_node("node_a_$T", $zk,
		'zklock.hosts' => $zk->relay_hosts,
		'zklock.session_timeout' => $T,
		'track_commit_timestamp' => 'on',
		# WAL senders, or no commit waits for a standby.
		allows_streaming => 1,
		# Only the session holding NOTIFY's lock waits for a standby that
		# never comes (synchronous_commit = on), after its commit record.
		'synchronous_standby_names' => 'zkguard_nobody',
		'synchronous_commit' => 'local');
	my $node_b = zk_node("node_b_$T", $zk,
		'zklock.hosts' => $zk->hosts(2, 3),
		'zklock.session_timeout' => $T);
	$node_a->safe_psql('postgres',
		'CREATE TABLE work (round int, shape text); CREATE TABLE held (i int)');
	my $b = session($node_b, 'b');
	# It lives through every round: its timeout counts per query.
	$b->set_query_timer_restart;
	my $a_server = $zk->relay_hosts;

	my %unsafe = map { $_ => 0 } qw(a b c);
	my %refused = %unsafe;
	my %done = %unsafe;
	my %missed = %unsafe;
	my $round = 0;
	for my $shape (qw(a b c))
	{
		my $tries = 0;
		while ($done{$shape} < $rounds)
		{
			die "T=$T shape $shape: the event order missed $TRIES times in a row"
			  if $tries++ >= $TRIES;
			$round++;
			my $cut = $shape ne 'c';
			my $pause = $shape eq 'b' || ($shape eq 'c' && $done{c} % 2 == 1);
			my $r = one_round($zk, $node_a, $b, $T, $round, $cut, $pause, $a_server);
			if (!$r->{shape_ok})
			{
				$missed{$shape}++;
				diag "T=$T round $round ($shape): event order missed ($r->{why}); again";
				next;
			}
			$tries = 0;
			$done{$shape}++;
			$unsafe{$shape}++ if $r->{unsafe};
			$refused{$shape}++ if $r->{refused};
		}
		if ($shape eq 'c')
		{
			is($refused{c}, 0, "T=$T c (never cut): A committed in all $rounds rounds");
		}
		is($unsafe{$shape}, 0,
			"T=$T $shape: no commit record of A after B's grant, in $rounds rounds"
			  . " ($refused{$shape} COMMITs refused with 40001, $missed{$shape} rounds made again)");
	}
	$b->quit;
	finish_checks($zk, [ $node_a, $node_b ], 3 * $T / 1000 + 20);
	return;
}

# One round; returns { shape_ok, why, unsafe, refused }.
sub one_round
{
	my ($zk, $node_a, $b, $T, $round, $cut, $pause, $a_server) = @_;
	my $Ts = $T / 1000;
	my $tick = $T / 2;
	my $shape = $cut ? ($pause ? 'b' : 'a') : "c" . ($pause ? 'b' : 'a');

	# A's session, and where it is.
	my ($sid, $server) = split /\|/, $node_a->safe_psql('postgres',
		q{SELECT session_id, server FROM zk_session() WHERE state = 'connected'});
	die "T=$T round $round: node A has no connected session" unless $sid;
	my $sid_re = qr/sid=\Q$sid\E\b/i;
	my $ok_where = $server eq $a_server && ($zk->flw(1, 'cons') // '') =~ $sid_re
	  && $zk->mode(1) eq 'follower' && $zk->leader == 3;
	ok($ok_where, "T=$T round $round: A's session $sid is on follower 1 (via the relay), server 3 leads")
	  or diag "server $server; cons of 1: " . ($zk->flw(1, 'cons') // '');

	my $holder;
	if ($pause)
	{
		$holder = session($node_a, 'notify_holder');
		$holder->query_safe('SET synchronous_commit = on');
		send_query($holder,
			'BEGIN; INSERT INTO held VALUES (1); NOTIFY zkguard_hold; COMMIT', 'hold-done');
		$node_a->poll_query_until('postgres', q{
SELECT wait_event FROM pg_stat_activity WHERE application_name = 'notify_holder'},
			'SyncRep') or die 'the NOTIFY holder does not wait';
	}
	my $a = session($node_a, 'a');
	$a->query_safe('\set VERBOSITY verbose');
	$a->query_safe("BEGIN; INSERT INTO work VALUES ($round, '$shape')"
		  . ($pause ? '; NOTIFY zkguard_a' : ''));

	# The worker's last send before the create is made at the worst moment
	# for A: a read (zk_lock_holders, a touch at the follower) sent 0.1 s
	# before a PING reply of the follower, of the two phases of those
	# replies the one that the leader's rounding (heard + T up to a
	# multiple of tickTime) extends least.  The leader pings every
	# tickTime/2 and the follower answers at once.
	my $from = relay_line_count($zk);
	my @pings = map { $_->[0] }
	  grep { $_->[1] eq 'quorum' && $_->[3] eq 'f>l' && $_->[4] =~ /^PING/ }
	  @{ relay_lines($zk, 0) };
	my $half = $tick / 2000;
	my $ping = $pings[-1];
	$ping += $half while $ping < clock_gettime(CLOCK_MONOTONIC) + 0.3;
	$ping += $half
	  if leader_deadline($ping + $half, $T, $tick) - $ping - $half
	  < leader_deadline($ping, $T, $tick) - $ping;
	sleep_until_mono($ping - 0.1);
	$a->query_safe(q{SELECT count(*) FROM zk_lock_holders('zkguard_touch')});

	# The worker's idle send interval, then its last send (the read, or
	# whatever it sent after): the acquire is sent $LEAD before its next
	# idle send is due.
	my ($interval, $deadline);
	my $wait_until = time + 12 * $Ts;
	while (1)
	{
		die "T=$T round $round: no idle sends of A's worker seen"
		  if time > $wait_until;
		my $all = relay_lines($zk, 0);
		my $sends = worker_sends($all);
		$interval = idle_interval($sends) // $known_interval{$T};
		if (!$interval || !@$sends)
		{
			sleep_for(0.05);
			next;
		}
		my $send = $sends->[-1][0];
		my $due = $send + $interval - $LEAD;
		my $left = $due - clock_gettime(CLOCK_MONOTONIC);
		# Too late for this one, or so early that the follower's PING reply
		# at $ping would pass between the create and the cut (idle sends
		# closer together than PINGs): wait for the worker's next send.
		if ($left < 0.01 || $due < $ping + 0.05)
		{
			sleep_for(0.02);
			next;
		}
		if ($left <= 0.06)
		{
			my $heard = heard_at($all, $sid, $send);
			$deadline = leader_deadline($heard, $T, $tick) if defined $heard;
		}
		# Look again at most every 50 ms, in case the worker sends first.
		if ($left > 0.06)
		{
			sleep_for(0.05);
			next;
		}
		sleep_until_mono($due);
		last;
	}
	$known_interval{$T} = $interval;
	$zk->relay_cmd('arm create -lock-') if $cut;
	my $acq_mono = clock_gettime(CLOCK_MONOTONIC);
	send_query($a, q{SELECT zk_lock_acquire('G')}, 'acquired');
	wait_marker($a, 'acquired');
	my $cut_mono;
	if ($cut)
	{
		my $answer = $zk->relay_cmd('wait 10');
		($cut_mono) = $answer =~ /^cut (\S+)/ or die "relay: no cut ($answer)";
	}
	send_query($b,
		q{SELECT ok, extract(epoch FROM clock_timestamp()) FROM
		  (SELECT zk_lock_acquire('G', 60000) AS ok OFFSET 0) s},
		'b-done');

	# The create, as the relay saw it: the first request of the acquisition
	# (a create of the lock's parents may come first, when they are gone)
	# and the successful create of the lock node, whose reply is the
	# guard's proof.
	my $lines = relay_lines($zk, $from);
	my @creates = grep { $_->[1] eq 'client' && $_->[3] eq 'c>s' && $_->[4] =~ m{^req .*path=\S*-lock-} } @$lines;
	die "T=$T round $round: the create did not pass the relay" unless @creates;
	my $conn = $creates[0][2];
	my ($create, $reply);
	for my $c (@creates)
	{
		my ($x) = $c->[4] =~ /xid=(\d+)/;
		my ($r) = grep { $_->[1] eq 'client' && $_->[3] eq 's>c' && $_->[4] =~ /^rep xid=$x zxid=\S+ err=0 / } @$lines;
		($create, $reply) = ($c, $r) if $r;
	}
	$create //= $creates[-1];
	my $t0 = $create->[0];
	my ($xid) = $create->[4] =~ /xid=(\d+)/;
	my $first_send = (grep { $_->[0] >= $acq_mono } @{ worker_sends($lines, $conn) })[0][0];
	my @before = grep { $_->[0] < $first_send } @{ worker_sends(relay_lines($zk, 0), $conn) };
	my $prev_send = @before ? $before[-1][0] : undef;

	# A commits: 2T/3 - 100 ms after the create was sent; with a pause, the
	# holder of NOTIFY's lock lets go T/3 - 100 ms after the COMMIT began.
	sleep_until_mono($t0 + 2 * $Ts / 3 - 0.1);
	my $commit_sent = clock_gettime(CLOCK_MONOTONIC);
	send_query($a, 'COMMIT', 'committed');
	my $waited_on_notify = '';
	if ($pause)
	{
		sleep_until_mono($commit_sent + ($Ts / 3 - 0.1) / 2);
		$waited_on_notify = $node_a->safe_psql('postgres', q{
SELECT wait_event_type || '/' || wait_event FROM pg_stat_activity WHERE application_name = 'a'});
		sleep_until_mono($commit_sent + $Ts / 3 - 0.1);
		$node_a->safe_psql('postgres', q{
SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE application_name = 'notify_holder'});
	}
	wait_marker($a, 'committed');
	my $refused = $a->{stderr} =~ /40001/ ? 1 : 0;
	my $commit_at = $node_a->safe_psql('postgres', qq{
SELECT extract(epoch FROM pg_xact_commit_timestamp(xmin)) FROM work WHERE round = $round});
	$a->{stderr} = '';
	if (!$cut)
	{
		# The control: A lets go, so that B is granted.
		$a->query_safe(q{SELECT zk_lock_release('G')});
	}
	my $b_out = wait_marker($b, 'b-done');
	my ($b_ok, $b_at) = $b_out =~ /^(t|f)\|(\S+)/m;
	die "T=$T round $round: no answer from B ($b_out)" unless defined $b_ok;
	my $expiring = $cut ? expiring_at($zk, $sid) : undef;

	# Was the event order the one wanted?  The cut came after the create's
	# reply and before any PING reply of the follower after the create.
	my ($shape_ok, $why) = (1, '');
	my ($last_touch) = reverse grep {
		$_->[1] eq 'quorum' && $_->[3] eq 'f>l' && $_->[4] =~ /^PING .*touched=.*\Q$sid\E/i
		  && $_->[0] < ($cut_mono // 1e12)
	} @{ relay_lines($zk, 0) };
	if ($cut)
	{
		my @pings_between = grep {
			$_->[1] eq 'quorum' && $_->[3] eq 'f>l' && $_->[4] =~ /^PING/
			  && $_->[0] > $t0 && $_->[0] <= $cut_mono
		} @$lines;
		my ($cut_line) = grep { $_->[1] eq 'relay' && $_->[4] =~ /^cut / } @$lines;
		if (!$reply || $cut_mono < $reply->[0] || $cut_line->[4] !~ /xid=$xid\b/)
		{
			($shape_ok, $why) = (0, 'the cut did not follow the create reply');
		}
		elsif (@pings_between)
		{
			($shape_ok, $why) = (0, 'a follower PING reply passed between the create and the cut');
		}
	}
	if ($shape_ok && (!defined $prev_send || $first_send - $prev_send < $interval - 0.5))
	{
		($shape_ok, $why) = (0, sprintf('the acquisition came %.3f s after the last send, not just before the next idle one',
			$first_send - ($prev_send // 0)));
	}

	my $e0 = mono_to_epoch($t0);
	my $unsafe = $commit_at ne '' && $b_ok eq 't' && $b_at < $commit_at;
	my $rel = sub { defined $_[0] && $_[0] ne '' ? sprintf('%+.3f', $_[0] - $e0) : '-' };
	diag sprintf(
		'T=%d round %d shape %s: idle interval %.3f; last send %s; last touch heard %s; '
		  . 'create sent 0; reply %s; cut %s; COMMIT sent %s; leader deadline %s, expiring %s; '
		  . 'A %s, commit record %s; B granted %s; margin %s%s%s',
		$T, $round, $shape, $interval, $rel->(mono_to_epoch($prev_send // 0)),
		$last_touch ? $rel->(mono_to_epoch($last_touch->[0])) : '-',
		$reply ? $rel->(mono_to_epoch($reply->[0])) : '-',
		$cut_mono ? $rel->(mono_to_epoch($cut_mono)) : 'never',
		$rel->(mono_to_epoch($commit_sent)), $rel->(defined $deadline ? mono_to_epoch($deadline) : undef), $rel->($expiring),
		$refused ? 'refused (40001)' : $commit_at ne '' ? 'committed' : 'rolled back',
		$rel->($commit_at), $b_ok eq 't' ? $rel->($b_at) : 'not granted',
		$commit_at ne '' && $b_ok eq 't' ? sprintf('%+.3f', $b_at - $commit_at) : '-',
		$unsafe ? ' UNSAFE' : '',
		$pause && $waited_on_notify ne 'Lock/object'
		? " (A's COMMIT was not waiting for NOTIFY's lock mid-pause: $waited_on_notify)" : '');

	# Heal, and wait for A's next session on the rejoined follower, and for a
	# clean lock tree.
	$a->quit;
	if ($holder)
	{
		wait_marker($holder, 'hold-done');
		$holder->quit;
	}
	$zk->relay_cmd('heal') if $cut;
	$b->query_safe(q{SELECT zk_lock_release('G')}) if $b_ok eq 't';
	if ($cut)
	{
		$node_a->poll_query_until('postgres', qq{
SELECT state = 'connected' AND session_id <> '$sid' FROM zk_session()})
		  or die "T=$T round $round: node A has no new session after the heal";
	}
	my $left = $zk->wait_no_ephemerals(ZK_ROOT, 3 * $Ts + 20);
	die "T=$T round $round: lock nodes left: " . join(' ', map { $_->[0] } @$left) if @$left;
	return { shape_ok => $shape_ok, why => $why, unsafe => $unsafe,
		refused => $refused || $commit_at eq '' };
}

run_timeout($_) for @timeouts;
done_testing();
