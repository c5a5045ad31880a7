
# ForeignProgram: the programs of other ZooKeeper clients (Curator's and
# Kazoo's, test/interop/) in the interop tests, under IPC::Run.  Every wait
# is bounded; a program still running when the test ends is killed.

package ForeignProgram;

use strict;
use warnings;

use Exporter 'import';
use IPC::Run ();
use Test::More;
use Time::HiRes qw(sleep time);

our @EXPORT = qw(clients_installed_ok program_run program_wait program_take
  program_said program_send program_end program_kill program_diag);

my @programs;

# The class path of the Curator programs.
our $curator_cp = join ':', map { "/usr/share/java/$_.jar" } qw(curator-recipes slf4j-nop);

# What the other side needs (test/setup.sh installs it): fail, not skip.
sub clients_installed_ok
{
	ok( -r '/usr/share/java/curator-recipes.jar'
		  && -r '/usr/share/java/slf4j-nop.jar'
		  && `java --list-modules 2>/dev/null` =~ /^jdk\.compiler\@/m,
		'Curator 5 and a JDK are installed (libcurator-recipes-java, openjdk-17-jdk-headless)'
	) or die "interop prerequisites missing\n";
	ok(system('/usr/bin/python3', '-c', 'import kazoo') == 0,
		'Kazoo is installed (python3-kazoo)')
	  or die "interop prerequisites missing\n";
	return;
}

# Start @$cmd; $what names it in messages.  Returns its handle.
sub program_run
{
	my ($cmd, $what) = @_;
	my $p = { what => $what, in => '', out => '', err => '' };
	$p->{h} = IPC::Run::start($cmd, '<', \$p->{in}, '>', \$p->{out}, '2>', \$p->{err});
	push @programs, $p;
	return $p;
}

sub _wait
{
	my ($p, $re, $secs, $take) = @_;
	my $deadline = time + $secs;
	while (1)
	{
		eval { $p->{h}->pump_nb };
		if ($p->{out} =~ $re)
		{
			my $got = defined $1 ? $1 : 1;
			$p->{out} =~ s/$re// if $take;
			return $got;
		}
		return undef if time > $deadline || !$p->{h}->pumpable;
		sleep 0.02;
	}
}

# Pump until its stdout matches $re, it exits, or $secs have passed.
# Returns $re's first capture (1 if it has none), undef if no match.
sub program_wait
{
	my ($p, $re, $secs) = @_;
	return _wait($p, $re, $secs, 0);
}

# The same, and the match is taken out of its output: a program that says
# the same thing again (each round) is waited for again.
sub program_take
{
	my ($p, $re, $secs) = @_;
	return _wait($p, $re, $secs, 1);
}

# Has it printed $re by now (without waiting)?
sub program_said
{
	my ($p, $re) = @_;
	eval { $p->{h}->pump_nb };
	return $p->{out} =~ $re;
}

# A line on its stdin.
sub program_send
{
	my ($p, $line) = @_;
	$p->{in} .= "$line\n";
	eval { $p->{h}->pump_nb };
	return;
}

# Wait (30 s at most) until it exits; returns its exit status, undef if it
# had to be killed.
sub program_end
{
	my ($p) = @_;
	my $deadline = time + 30;
	while ($p->{h}->pumpable && time < $deadline)
	{
		eval { $p->{h}->pump_nb };
		sleep 0.02;
	}
	if ($p->{h}->pumpable)
	{
		program_kill($p);
		return undef;
	}
	$p->{h}->finish;
	$p->{done} = 1;
	return $p->{h}->result(0);
}

sub program_kill
{
	my ($p) = @_;
	$p->{h}->kill_kill;
	$p->{done} = 1;
	return;
}

sub program_diag
{
	my ($p) = @_;
	diag "$p->{what}: stdout:\n$p->{out}stderr:\n$p->{err}";
	return;
}

END
{
	for my $p (@programs)
	{
		next if $p->{done};
		eval { $p->{h}->kill_kill };
	}
}

1;
