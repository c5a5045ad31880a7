
# PgBouncer: a real PgBouncer (Debian package pgbouncer) in front of a
# PostgreSQL::Test::Cluster node, for zklock's tests.
#
# Listens on 127.0.0.1 on a free port, lives in a temporary directory, runs
# as the user running the test (PgBouncer refuses root, like PostgreSQL) and
# is stopped by its pid when the test ends or the object goes away.

package PgBouncer;

use strict;
use warnings;

use Carp;
use File::Temp ();
use IO::Socket::INET;
use POSIX qw(:sys_wait_h);
use PostgreSQL::Test::BackgroundPsql;
use Time::HiRes qw(sleep time);

use ZkServer;

my @live_objects;

# new(node => $node, databases => { alias => 'pool_mode=... pool_size=...' },
#     settings => { 'pool_mode' => 'session', ... })
# Each alias is a database of PgBouncer that leads to the node's postgres
# database, with the given per-database options.
sub new
{
	my ($class, %opts) = @_;
	my $node = $opts{node} or croak 'node is required';
	my $self = bless {
		node => $node,
		dir => File::Temp::tempdir('zklock_bouncer_XXXX', TMPDIR => 1, CLEANUP => 1),
		port => ZkServer::free_port(),
		user => scalar getpwuid($<),
	}, $class;

	my $databases = join '', map {
		sprintf "%s = host=%s port=%d dbname=postgres %s\n",
		  $_, $node->host, $node->port, $opts{databases}{$_}
	} sort keys %{ $opts{databases} };
	my %settings = (
		listen_addr => '127.0.0.1',
		listen_port => $self->{port},
		unix_socket_dir => '',
		auth_type => 'trust',
		auth_file => "$self->{dir}/users.txt",
		logfile => "$self->{dir}/pgbouncer.log",
		pool_mode => 'session',
		default_pool_size => 1,
		max_client_conn => 20,
		server_reset_query => 'DISCARD ALL',
		%{ $opts{settings} // {} });
	my $settings = join '', map { "$_ = $settings{$_}\n" } sort keys %settings;

	_write("$self->{dir}/users.txt", qq{"$self->{user}" ""\n});
	_write("$self->{dir}/pgbouncer.ini", "[databases]\n$databases\n[pgbouncer]\n$settings");
	push @live_objects, $self;
	return $self;
}

sub _write
{
	my ($path, $text) = @_;
	open my $fh, '>', $path or croak "$path: $!";
	print $fh $text;
	close $fh;
	return;
}

sub port { $_[0]->{port} }
sub log_file { "$_[0]->{dir}/pgbouncer.log" }

# A libpq connection string through PgBouncer to one of its databases.
sub connstr
{
	my ($self, $db) = @_;
	return "host=127.0.0.1 port=$self->{port} dbname=$db user=$self->{user}";
}

sub start
{
	my ($self) = @_;
	my $pid = fork();
	croak "fork: $!" unless defined $pid;
	if ($pid == 0)
	{
		open STDIN, '<', '/dev/null';
		open STDOUT, '>>', "$self->{dir}/stdout.log";
		open STDERR, '>&', \*STDOUT;
		POSIX::setsid();
		{ exec 'pgbouncer', "$self->{dir}/pgbouncer.ini"; }
		POSIX::_exit(127);
	}
	$self->{pid} = $pid;
	my $deadline = time + 30;
	until (IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $self->{port}))
	{
		croak "pgbouncer did not start; see $self->{dir}"
		  if time > $deadline || waitpid($pid, WNOHANG) != 0;
		sleep 0.1;
	}
	return $self;
}

# A background psql session through PgBouncer to database $db, with
# application_name $name: the BackgroundPsql a node's background_psql gives,
# on another connection string.
sub session
{
	my ($self, $db, $name) = @_;
	return PgBouncer::Client::background_psql_to(
		$self->{node}->installed_command('psql'),
		$self->connstr($db) . " application_name=$name");
}

# Stop PgBouncer by its pid (SIGTERM: immediate shutdown).
sub stop
{
	my ($self) = @_;
	my $pid = delete $self->{pid} or return;
	ZkServer::stop_process($pid);
	return;
}

sub DESTROY { $_[0]->stop }

END { $_->stop for @live_objects; }

# BackgroundPsql's constructor admits only PostgreSQL::Test::Cluster and its
# subclasses as callers, and a node's background_psql always connects to
# the node itself.
package PgBouncer::Client;

use parent -norequire, 'PostgreSQL::Test::Cluster';

sub background_psql_to
{
	my ($psql, $connstr) = @_;
	return PostgreSQL::Test::BackgroundPsql->new(0,
		[ $psql, '-XAtq', '-d', $connstr, '-f', '-' ], 300, 1);
}

1;
