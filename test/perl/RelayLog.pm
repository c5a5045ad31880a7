
# RelayLog: reading test/zk/zkrelay.py's log, and the times that the tests
# which time faults on ZooKeeper's own events (062, 068) derive from it.
#
# A relay line is [mono, link, conn, dir, text]: CLOCK_MONOTONIC seconds,
# "client"/"quorum"/"plain"/"relay", the connection's number, c>s, s>c, f>l
# or l>f, and the rest (see zkrelay.py's header).

package RelayLog;

use strict;
use warnings;

use Exporter 'import';
use POSIX qw(floor);
use PostgreSQL::Test::Utils;
use Time::HiRes qw(time clock_gettime CLOCK_MONOTONIC);
use Time::Local qw(timelocal);

use ZklockTest qw(sleep_for);

our @EXPORT = qw(
  relay_lines relay_line_count worker_sends heard_at touches
  leader_deadline sleep_until_mono now_mono mono_to_epoch expiring_at);

# CLOCK_MONOTONIC (the relay's clock) to epoch seconds.
my $mono_to_epoch = time - clock_gettime(CLOCK_MONOTONIC);

sub mono_to_epoch { return $_[0] + $mono_to_epoch }

sub now_mono { return clock_gettime(CLOCK_MONOTONIC) }

# The relay's log from line $from on.
sub relay_lines
{
	my ($zk, $from) = @_;
	open my $fh, '<', $zk->relay_log or die $zk->relay_log . ": $!";
	my @lines;
	while (my $line = <$fh>)
	{
		next if $. <= ($from // 0);
		chomp $line;
		my @f = split ' ', $line, 5;
		push @lines, [ @f[ 0 .. 3 ], $f[4] // '' ] if @f >= 4;
	}
	close $fh;
	return \@lines;
}

sub relay_line_count
{
	my ($zk) = @_;
	open my $fh, '<', $zk->relay_log or return 0;
	1 while <$fh>;
	my $n = $.;
	close $fh;
	return $n // 0;
}

# A's worker's requests on client connection $conn (default: the highest
# numbered one), as [mono, text]; the time is when the worker sent it (the
# relay read it).
sub worker_sends
{
	my ($lines, $conn) = @_;
	my @client = grep { $_->[1] eq 'client' } @$lines;
	return [] unless @client;
	$conn //= $client[-1][2];
	return [
		map { [ $_->[4] =~ /read=(\S+)/ ? $1 : $_->[0], $_->[4] ] }
		  grep { $_->[2] eq $conn && $_->[3] eq 'c>s' && $_->[4] =~ /^req / } @client
	];
}

# The follower's PING replies that touch session $sid, as the times the
# leader got them.
sub touches
{
	my ($lines, $sid) = @_;
	return [ map { $_->[0] } grep {
			$_->[1] eq 'quorum' && $_->[3] eq 'f>l'
			  && $_->[4] =~ /^PING .*touched=\S*\Q$sid\E/i
	} @$lines ];
}

# When the leader heard of a touch of session $sid made at $at: the first
# PING reply of the follower after $at that lists $sid (undef if none yet).
sub heard_at
{
	my ($lines, $sid, $at) = @_;
	my ($heard) = grep { $_ > $at } @{ touches($lines, $sid) };
	return $heard;
}

# The leader's deadline for a session touched (heard) at $heard: ZooKeeper's
# ExpiryQueue rounds heard + T up to the next multiple of tickTime, on
# System.nanoTime(), which is CLOCK_MONOTONIC on Linux.
sub leader_deadline
{
	my ($heard, $T, $tick) = @_;
	return (floor(($heard * 1000 + $T) / $tick) + 1) * $tick / 1000;
}

# Sleep until CLOCK_MONOTONIC reaches $at.
sub sleep_until_mono
{
	my ($at) = @_;
	my $left = $at - now_mono();
	sleep_for($left) if $left > 0;
	return;
}

# When the leader (server $leader, default 3) logged "Expiring session
# $sid", in epoch seconds, if it did.
sub expiring_at
{
	my ($zk, $sid, $leader) = @_;
	return undef unless $zk->is_logging;
	my $log = slurp_file($zk->dir . '/server' . ($leader // 3) . '.log');
	my ($y, $mo, $d, $h, $mi, $s, $ms) = $log =~
	  /^(\d+)-(\d+)-(\d+) (\d+):(\d+):(\d+),(\d+) .*Expiring session \Q$sid\E,/m
	  or return undef;
	return timelocal($s, $mi, $h, $d, $mo - 1, $y) + $ms / 1000;
}

1;
