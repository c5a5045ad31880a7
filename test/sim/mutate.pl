#!/usr/bin/perl
# Makes a mutant of the commit guard's proof policy for the simulation:
# copies src/worker_proof.c and src/worker_proof.h to a build directory
# with one small change each (the table below), and fails if a change no
# longer applies exactly once (the policy's code moved: update the table).
#
#   perl mutate.pl MUTANT SRCDIR OUTDIR
use strict;
use warnings;

my %mutants = (
	# 1.6's rule: a send answered a ping bound (0.3 T) before the write was
	# sent counts as heard, no sync needed.
	m16 => [
		[ 'c', qr/static int64\nheard_for_write\(int64 w\)\n\{.*?\n\}\n/s, <<'C' ],
static int64
heard_for_write(int64 w)
{
	Step	   *heard = step_before(w - PROOF_PING_BOUND(connection_timeout), false);

	return heard == NULL ? connect_sent : Max(heard->sent_at, connect_sent);
}
C
		[ 'h', qr/#define PROOF_PING_BOUND\(t\) \(\(t\) \* 2 \/ 5\)/,
		  '#define PROOF_PING_BOUND(t) ((t) * 3 / 10)' ],
	],
	# a ping bound shorter than the leader's ping period (T/4 at most)
	mbound => [
		[ 'h', qr/#define PROOF_PING_BOUND\(t\) \(\(t\) \* 2 \/ 5\)/,
		  '#define PROOF_PING_BOUND(t) ((t) / 5)' ],
	],
	# a sync or write counted without the bound after the touched send
	mnobound => [
		[ 'c', qr/step_before\(from_leader->leader_sent_at - bound, false\)/,
		  'step_before(from_leader->leader_sent_at - 0 * bound, false)' ],
	],
	# the proof kept per session: steps and the first connect carried
	# across connections (the sim resets it with connect_sent_after -1)
	mcarry => [
		[ 'c', qr/\tfirst_step = 0;\n\tnsteps = 0;\n\tconnection_timeout = connect_sent_after > 0 \? timeout_ms : 0;\n\tconnect_sent = connection_timeout > 0 \? connect_sent_after : 0;\n/, <<'C' ],
	if (connect_sent_after < 0)
	{
		first_step = 0;
		nsteps = 0;
		connect_sent = 0;
	}
	connection_timeout = connect_sent_after > 0 ? timeout_ms : 0;
	if (connect_sent == 0)
		connect_sent = connection_timeout > 0 ? connect_sent_after : 0;
C
	],
	# a sync answered on the previous connection (another server) counted
	# for a write on this one: the steps carried, the new connect counted
	mother => [
		[ 'c', qr/\tfirst_step = 0;\n\tnsteps = 0;\n/,
		  "\tif (connect_sent_after < 0)\n\t{\n\t\tfirst_step = 0;\n\t\tnsteps = 0;\n\t}\n" ],
	],
	# ZSESSIONEXPIRED taken for the server's own answer, so a write's
	mexpired => [
		[ 'c', qr/rc == ZNOCHILDRENFOREPHEMERALS;/,
		  'rc == ZNOCHILDRENFOREPHEMERALS || rc == ZSESSIONEXPIRED;' ],
	],
	# ZNOAUTH taken for a write the leader answered
	mnoauth => [
		[ 'c', qr/\(op == PROOF_OP_WRITE && rc != ZNOAUTH\)/, '(op == PROOF_OP_WRITE)' ],
	],
);

my ($mutant, $srcdir, $outdir) = @ARGV;
die "usage: mutate.pl MUTANT SRCDIR OUTDIR\n" unless defined $outdir;
die "mutate.pl: no mutant $mutant (" . join(' ', sort keys %mutants) . ")\n"
	unless $mutants{$mutant};

my %text;
for my $ext ('c', 'h') {
	open my $in, '<', "$srcdir/worker_proof.$ext" or die "$srcdir/worker_proof.$ext: $!\n";
	local $/;
	$text{$ext} = <$in>;
}
for my $change (@{ $mutants{$mutant} }) {
	my ($ext, $re, $with) = @$change;
	my $n = () = $text{$ext} =~ /$re/g;
	die "mutate.pl: $mutant: worker_proof.$ext matches $re $n times, not once\n" if $n != 1;
	$text{$ext} =~ s/$re/$with/;
}
mkdir $outdir unless -d $outdir;
for my $ext ('c', 'h') {
	open my $out, '>', "$outdir/worker_proof.$ext" or die "$outdir/worker_proof.$ext: $!\n";
	print $out $text{$ext};
}
