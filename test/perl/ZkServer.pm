
# ZkServer: a ZooKeeper server or 3-server ensemble for zklock's tests.
#
# Runs Debian's ZooKeeper (Java) on 127.0.0.1 only, on free ports, in a
# temporary directory, and stops every server it started, by pid, when the
# object goes away (or the test dies).  Also answers the questions the tests
# ask ZooKeeper: four-letter commands, the live sessions, the nodes under a
# path and whether any of them has no live owner.

package ZkServer;

use strict;
use warnings;

use Carp;
use File::Basename qw(dirname);
use File::Path qw(make_path);
use File::Temp ();
use IO::Socket::INET;
use IO::Socket::UNIX;
use IO::Uncompress::Unzip qw($UnzipError);
use POSIX qw(:sys_wait_h);
use Time::HiRes qw(sleep time);

my $ZKTREE = dirname(__FILE__) . '/../zk/zktree.py';
my $TCPPROXY = dirname(__FILE__) . '/../zk/tcpproxy.py';
my $ZKRELAY = dirname(__FILE__) . '/../zk/zkrelay.py';
# With a logger on the classpath a server logs at INFO (the leader's
# "Expiring session"); without one, slf4j drops everything.  Under the
# ZooKeeper's root (see zk_root).
my @LOG4J_JARS = map { "/usr/share/java/$_.jar" } qw(slf4j-log4j12 log4j-1.2);
my @live_objects;
my %ports_taken;

# A TCP port on 127.0.0.1 that nothing listens on right now.  In a TAP
# script it is reserved through PostgreSQL's port locks, against the script
# running beside it (test/suites.sh runs them two at a time); elsewhere
# (zkctl) the kernel picks it.
sub free_port
{
	return PostgreSQL::Test::Cluster::get_free_port()
	  if defined &PostgreSQL::Test::Cluster::get_free_port;
	for (1 .. 200)
	{
		my $sock = IO::Socket::INET->new(
			LocalAddr => '127.0.0.1',
			LocalPort => 0,
			Proto => 'tcp',
			ReuseAddr => 0) or next;
		my $port = $sock->sockport;
		close $sock;
		next if $ports_taken{$port}++;
		return $port;
	}
	croak "no free port found";
}

# End a child process: TERM, then KILL if it is still there after 10 s.
sub stop_process
{
	my ($pid) = @_;
	kill 'TERM', $pid;
	my $deadline = time + 10;
	while (waitpid($pid, WNOHANG) == 0)
	{
		if (time > $deadline)
		{
			kill 'KILL', $pid;
			waitpid($pid, 0);
			last;
		}
		sleep 0.05;
	}
	return;
}

# new(servers => 1|3, tick_ms => 500, dir => ..., durable => 0, keep => 0,
#     max_client_cnxns => 0 (no limit), partitionable => 0,
#     default_containers => 0, relay => 0, min_session_ms => 1000,
#     log4j => 0, sync_limit => 10, zk_root => $ENV{ZKLOCK_ZK_ROOT} // '/')
#
# Empty container nodes go within a second on a server that is not durable,
# so that tests see them go; default_containers keeps ZooKeeper's minute.
#
# partitionable (3 servers): server 1 reaches the leader, server 3, through
# a proxy that cut_link() blackholes: a follower cut off from its leader.
# The proxy refuses connections while server 3 is down (tcpproxy.py
# --refuse), as a closed port does.
#
# relay (implies partitionable): that proxy is test/zk/zkrelay.py, which
# also offers a client link to server 1 (relay_hosts), logs both links'
# frames with their times (relay_log) and takes commands (relay_cmd), such
# as cutting the quorum link the moment a given client reply has passed.
#
# min_session_ms => 0 leaves ZooKeeper's default minimum (2 x tickTime);
# log4j => 1 has each server log at INFO to its serverN.log (is_logging
# says whether the jars are there).
#
# zk_root: the root of the Debian system whose ZooKeeper runs (its
# /usr/share/java/zookeeper.jar, the jars its manifest names, its
# /etc/zookeeper/conf), on this host's java: a chroot's, such as sid's
# ZooKeeper 3.9 in /var/cache/zklock/chroots/sid.  $ENV{ZKLOCK_ZK_ROOT}
# sets it for every test.
sub new
{
	my ($class, %opts) = @_;
	my $self = bless {
		servers => $opts{servers} // 1,
		tick_ms => $opts{tick_ms} // 500,
		durable => $opts{durable} // 0,
		keep => $opts{keep} // 0,
		max_client_cnxns => $opts{max_client_cnxns} // 0,
		partitionable => $opts{partitionable} // 0,
		default_containers => $opts{default_containers} // 0,
		relay => $opts{relay} // 0,
		min_session_ms => $opts{min_session_ms} // 1000,
		log4j => $opts{log4j} // 0,
		sync_limit => $opts{sync_limit} // 10,
		zk_root => $opts{zk_root} // $ENV{ZKLOCK_ZK_ROOT} // '/',
		dir => $opts{dir}
		  // File::Temp::tempdir('zklock_zk_XXXX', TMPDIR => 1, CLEANUP => 1),
		pids => {},
	}, $class;
	$self->{partitionable} ||= $self->{relay};
	croak "servers must be 1 or 3" unless $self->{servers} == 1 || $self->{servers} == 3;
	croak "partitionable needs 3 servers" if $self->{partitionable} && $self->{servers} != 3;
	make_path($self->{dir});
	for my $i (1 .. $self->{servers})
	{
		$self->{client_port}{$i} = free_port();
		$self->{quorum_port}{$i} = free_port();
		$self->{election_port}{$i} = free_port();
	}
	if ($self->{partitionable})
	{
		$self->{link_quorum_port} = free_port();
		$self->{link_election_port} = free_port();
	}
	$self->{relay_client_port} = free_port() if $self->{relay};
	$self->_write_configs;
	push @live_objects, $self;
	return $self;
}

sub dir { $_[0]->{dir} }
sub servers { $_[0]->{servers} }
sub client_port { $_[0]->{client_port}{ $_[1] } }

# The connection string for zklock.hosts: of every server, or of those given.
sub hosts
{
	my ($self, @which) = @_;
	@which = (1 .. $self->{servers}) unless @which;
	return join ',', map { "127.0.0.1:$self->{client_port}{$_}" } @which;
}

sub _write_configs
{
	my ($self) = @_;
	for my $i (1 .. $self->{servers})
	{
		my $data = "$self->{dir}/data$i";
		make_path($data);
		my $cfg = "$self->{dir}/zoo$i.cfg";
		open my $fh, '>', $cfg or croak "$cfg: $!";
		print $fh <<"EOF";
tickTime=$self->{tick_ms}
initLimit=20
syncLimit=$self->{sync_limit}
dataDir=$data
clientPort=$self->{client_port}{$i}
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=*
maxClientCnxns=$self->{max_client_cnxns}
maxSessionTimeout=60000
EOF
		print $fh "minSessionTimeout=$self->{min_session_ms}\n"
		  if $self->{min_session_ms};
		print $fh "forceSync=no\n" unless $self->{durable};
		if ($self->{servers} > 1)
		{
			for my $j (1 .. $self->{servers})
			{
				my ($q, $e) = ($self->{quorum_port}{$j}, $self->{election_port}{$j});
				($q, $e) = ($self->{link_quorum_port}, $self->{link_election_port})
				  if $self->{partitionable} && $i == 1 && $j == 3;
				print $fh "server.$j=127.0.0.1:$q:$e\n";
			}
			open my $id, '>', "$data/myid" or croak "$data/myid: $!";
			print $id "$i\n";
			close $id;
		}
		close $fh;
	}
}

# Start one server (default: all) and wait until it serves clients.  A
# partitionable ensemble starts 3 and 2 first, so that 3 leads, then 1.
sub start
{
	my ($self, @which) = @_;
	if (!@which && $self->{partitionable})
	{
		$self->start(3, 2);
		$self->{link_proxy} = [ $self->{relay}
			? $self->_spawn_proxy($ZKRELAY,
				"--log=$self->{dir}/relay.log",
				"--control=$self->{dir}/relay.sock",
				"quorum:$self->{link_quorum_port}:$self->{quorum_port}{3}",
				"plain:$self->{link_election_port}:$self->{election_port}{3}",
				"client:$self->{relay_client_port}:$self->{client_port}{1}")
			: $self->_spawn_proxy($TCPPROXY, '--refuse',
				"$self->{link_quorum_port}:$self->{quorum_port}{3}",
				"$self->{link_election_port}:$self->{election_port}{3}") ];
		return $self->start(1);
	}
	@which = (1 .. $self->{servers}) unless @which;
	for my $i (@which)
	{
		croak "server $i already running" if $self->{pids}{$i};
		my $log = "$self->{dir}/server$i.log";
		my $pid = fork();
		croak "fork: $!" unless defined $pid;
		if ($pid == 0)
		{
			open STDIN, '<', '/dev/null';
			open STDOUT, '>>', $log;
			open STDERR, '>&', \*STDOUT;
			POSIX::setsid();
			{
				# A system property: zoo.cfg cannot set it.
				my @container =
				  $self->{durable} || $self->{default_containers}
				  ? ()
				  : ('-Dznode.container.checkIntervalMs=1000');
				my @log = $self->is_logging
				  ? ('-Dzookeeper.root.logger=INFO,CONSOLE') : ();
				my $cp = join ':', $self->classpath,
				  $self->is_logging ? $self->_rooted(@LOG4J_JARS) : ();
				exec 'java', '-Xmx256m', '-XX:+UseSerialGC', @container, @log,
				  "-Dzookeeper.log.dir=$self->{dir}",
				  '-cp', $cp,
				  'org.apache.zookeeper.server.quorum.QuorumPeerMain',
				  "$self->{dir}/zoo$i.cfg";
			}
			POSIX::_exit(127);
		}
		$self->{pids}{$i} = $pid;
	}
	$self->wait_serving(@which);
	return $self;
}

# Wait until each given server answers client requests (quorum formed).
sub wait_serving
{
	my ($self, @which) = @_;
	@which = $self->running unless @which;
	my $deadline = time + 60;
	for my $i (@which)
	{
		until (($self->mode($i) // '') =~ /^(standalone|leader|follower)$/)
		{
			croak "ZooKeeper server $i did not start; see $self->{dir}/server$i.log"
			  if time > $deadline || !$self->_alive($i);
			sleep 0.1;
		}
	}
	return;
}

sub _alive
{
	my ($self, $i) = @_;
	my $pid = $self->{pids}{$i} or return 0;
	return waitpid($pid, WNOHANG) == 0;
}

sub running
{
	my ($self) = @_;
	return sort { $a <=> $b } grep { $self->{pids}{$_} } keys %{ $self->{pids} };
}

sub pid { $_[0]->{pids}{ $_[1] } }

# Send a four-letter command to server i; returns the reply (undef if none).
sub flw
{
	my ($self, $i, $cmd) = @_;
	my $sock = IO::Socket::INET->new(
		PeerAddr => '127.0.0.1',
		PeerPort => $self->{client_port}{$i},
		Proto => 'tcp',
		Timeout => 2) or return undef;
	print $sock $cmd;
	my $reply = '';
	local $SIG{ALRM} = sub { die "flw timeout\n" };
	eval {
		alarm 5;
		while (my $line = <$sock>) { $reply .= $line; }
		alarm 0;
	};
	alarm 0;
	close $sock;
	return $reply;
}

sub mode
{
	my ($self, $i) = @_;
	my $srvr = $self->flw($i, 'srvr') // return undef;
	return $srvr =~ /^Mode: (\w+)/m ? $1 : undef;
}

# Index of the current leader (or the standalone server).
sub leader
{
	my ($self) = @_;
	for my $i ($self->running)
	{
		my $mode = $self->mode($i) // '';
		return $i if $mode eq 'leader' || $mode eq 'standalone';
	}
	return undef;
}

# Session ids (lowercase hex, 0x...) with a live connection to any server.
sub live_sessions
{
	my ($self) = @_;
	my %sids;
	for my $i ($self->running)
	{
		my $cons = $self->flw($i, 'cons') // next;
		$sids{ lc $1 } = 1 while $cons =~ /sid=(0x[0-9a-fA-F]+)/g;
	}
	return \%sids;
}

# { path => [session ids watching it] } from every running server ('wchp').
sub watches
{
	my ($self) = @_;
	my %watches;
	for my $i ($self->running)
	{
		my $path;
		for my $line (split /\n/, $self->flw($i, 'wchp') // '')
		{
			if ($line =~ m{^(/\S*)})
			{
				$path = $1;
			}
			elsif ($line =~ /^\s+(0x[0-9a-fA-F]+)/ && defined $path)
			{
				push @{ $watches{$path} }, lc $1;
			}
		}
	}
	return \%watches;
}

# [ [path, owner(, acl)], ... ] for every node under root (owner 0x0 if
# persistent); with $with_acl, each node's ACL as a third field.
sub tree
{
	my ($self, $root, $with_acl) = @_;
	my $hosts = $self->hosts;
	my $acl = $with_acl ? '--acl' : '';
	my @lines = `/usr/bin/python3 $ZKTREE '$hosts' '$root' $acl 2>&1`;
	croak "zktree.py failed: @lines" if $?;
	return [ map { chomp; [ split /\t/ ] } @lines ];
}

sub ephemerals
{
	my ($self, $root) = @_;
	return [ grep { hex($_->[1]) != 0 } @{ $self->tree($root) } ];
}

# Ephemeral nodes under root whose owning session is not connected.
sub orphans
{
	my ($self, $root) = @_;
	my $live = $self->live_sessions;
	return [ grep { !$live->{ lc $_->[1] } } @{ $self->ephemerals($root) } ];
}

# Wait (up to timeout seconds) until check->() returns an empty list ref.
# Returns the last non-empty list, or [] on success.
sub wait_until_empty
{
	my ($self, $check, $timeout) = @_;
	my $deadline = time + ($timeout // 10);
	my $last;
	while (1)
	{
		# The ensemble may be electing a leader (after a freeze or a kill):
		# a look that cannot reach it is tried again until the deadline.
		my $looked = eval { $last = $check->(); 1 };
		die $@ if !$looked && time > $deadline;
		return [] if $looked && !@$last;
		return $last if $looked && time > $deadline;
		sleep 0.2;
	}
}

sub wait_no_orphans
{
	my ($self, $root, $timeout) = @_;
	return $self->wait_until_empty(sub { $self->orphans($root) }, $timeout);
}

sub wait_no_ephemerals
{
	my ($self, $root, $timeout) = @_;
	return $self->wait_until_empty(sub { $self->ephemerals($root) }, $timeout);
}

# Send a signal to server i (e.g. 'KILL', 'STOP', 'CONT').
sub signal
{
	my ($self, $i, $sig) = @_;
	my $pid = $self->{pids}{$i};
	kill $sig, $pid or croak "kill $sig server $i: $!";
	# A stop takes effect when each thread is next scheduled, after kill
	# returned: on a busy machine a server could still answer a request sent
	# right after.  Return once every thread is stopped.
	if ($sig eq 'STOP')
	{
		my $until = time + 10;
		while (time < $until)
		{
			my $running = 0;
			for my $stat (glob("/proc/$pid/task/*/stat"))
			{
				open(my $fh, '<', $stat) or next;
				my ($state) = (<$fh> // '') =~ /.*\)\s+(\S)/;
				$running++ if defined $state && $state !~ /^[Tt]$/;
			}
			last unless $running;
			select(undef, undef, undef, 0.01);
		}
	}
	return;
}

# Kill -9 server i and reap it.
sub kill9
{
	my ($self, $i) = @_;
	my $pid = delete $self->{pids}{$i} or return;
	kill 'KILL', $pid;
	waitpid($pid, 0);
	return;
}

# Stop one server (default: all), politely, then firmly.
sub stop
{
	my ($self, @which) = @_;
	@which = $self->running unless @which;
	for my $i (@which)
	{
		my $pid = delete $self->{pids}{$i} or next;
		kill 'CONT', $pid;
		stop_process($pid);
	}
	return;
}

# Whether the servers log at INFO (log4j asked for, and its jars there).
sub is_logging
{
	my ($self) = @_;
	return $self->{log4j} && !grep { !-r $_ } $self->_rooted(@LOG4J_JARS);
}

sub tick_ms { $_[0]->{tick_ms} }
sub sync_limit { $_[0]->{sync_limit} }

# Paths of the ZooKeeper's system (zk_root).
sub _rooted
{
	my ($self, @paths) = @_;
	(my $root = $self->{zk_root}) =~ s{/+$}{};
	return map { "$root$_" } @paths;
}

# The servers' classpath: the configuration directory, the jars that
# zookeeper.jar's manifest names (absolute paths, which the JVM would take
# from this host's /usr/share/java, ahead of what follows the jar), and
# zookeeper.jar, all under zk_root.
sub classpath
{
	my ($self) = @_;
	my ($conf, $jar) = $self->_rooted('/etc/zookeeper/conf', '/usr/share/java/zookeeper.jar');
	croak "no ZooKeeper at $jar" unless -r $jar;
	my $unzip = IO::Uncompress::Unzip->new($jar, Name => 'META-INF/MANIFEST.MF')
	  or croak "$jar: $UnzipError";
	my $manifest = do { local $/; <$unzip> } // '';
	$manifest =~ s/\r?\n //g;
	my ($deps) = $manifest =~ /^Class-Path: *(.*?)\r?$/m;
	return ($conf, $self->_rooted(split ' ', $deps // ''), $jar);
}

# The servers' ZooKeeper version, as server $i says (srvr).
sub version
{
	my ($self, $i) = @_;
	my $srvr = $self->flw($i // ($self->running)[0], 'srvr') // return undef;
	return $srvr =~ /^Zookeeper version: ([\d.]+)/m ? $1 : undef;
}

# Run a proxy (test/zk/tcpproxy.py or zkrelay.py) with these arguments;
# returns its pid and the handle it acknowledges signals on.
sub _spawn_proxy
{
	my ($self, $script, @args) = @_;
	pipe(my $ready_r, my $ready_w) or croak "pipe: $!";
	my $pid = fork();
	croak "fork: $!" unless defined $pid;
	if ($pid == 0)
	{
		close $ready_r;
		open STDIN, '<', '/dev/null';
		open STDOUT, '>&', $ready_w;
		open STDERR, '>>', "$self->{dir}/proxy.log";
		{ exec '/usr/bin/python3', $script, @args; }
		POSIX::_exit(127);
	}
	close $ready_w;
	my $line = <$ready_r>;
	croak "proxy did not start; see $self->{dir}/proxy.log"
	  unless defined $line && $line =~ /ready/;
	return ($pid, $ready_r);
}

# Start a TCP proxy in front of every server (test/zk/tcpproxy.py); returns
# the connection string that goes through it.  delay_ms => N: every reply
# reaches the client N ms late; faulty => PATH: proxy_signal('TTOU') starts
# or stops answering as a server whose data tree lost PATH.
sub start_proxy
{
	my ($self, %opts) = @_;
	my @args = $opts{delay_ms} ? ("--delay=$opts{delay_ms}") : ();
	push @args, "--faulty=$opts{faulty}" if $opts{faulty};
	for my $i (1 .. $self->{servers})
	{
		$self->{proxy_port}{$i} = free_port();
		push @args, "$self->{proxy_port}{$i}:$self->{client_port}{$i}";
	}
	($self->{proxy_pid}, $self->{proxy_out}) = $self->_spawn_proxy($TCPPROXY, @args);
	return $self->proxy_hosts;
}

sub proxy_hosts
{
	my ($self) = @_;
	return join ',',
	  map { "127.0.0.1:$self->{proxy_port}{$_}" } 1 .. $self->{servers};
}

# 'USR1': drop every connection; 'USR2': lose the reply to each connection's
# next request; 'HUP': start or stop refusing new connections; 'TTOU': see
# start_proxy's faulty (test/zk/tcpproxy.py has the rest).
sub proxy_signal
{
	my ($self, $sig) = @_;
	kill $sig, $self->{proxy_pid} or croak "kill $sig proxy: $!";
	# Returns once the proxy has acted on it.
	my $fh = $self->{proxy_out};
	my $ack = <$fh>;
	croak "proxy did not acknowledge $sig" unless defined $ack && $ack =~ /^done $sig/;
	return;
}

# Partition server 1 from its leader (partitionable), or heal the link:
# the quorum link goes silent, stays open; healed, it is dropped and made
# again.
sub cut_link { $_[0]->{relay} ? $_[0]->relay_cmd('cut') : $_[0]->_link_signal }
sub heal_link { $_[0]->{relay} ? $_[0]->relay_cmd('heal') : $_[0]->_link_signal }

# The relay's client link to server 1, for zklock.hosts.
sub relay_hosts
{
	my ($self) = @_;
	croak 'no relay' unless $self->{relay};
	return "127.0.0.1:$self->{relay_client_port}";
}

sub relay_log { "$_[0]->{dir}/relay.log" }

# Send one command to the relay (see test/zk/zkrelay.py); returns its answer.
sub relay_cmd
{
	my ($self, $cmd) = @_;
	croak 'no relay' unless $self->{relay};
	$self->{relay_sock} //= IO::Socket::UNIX->new(
		Type => SOCK_STREAM(),
		Peer => "$self->{dir}/relay.sock") or croak "relay control: $!";
	my $sock = $self->{relay_sock};
	print $sock "$cmd\n";
	$sock->flush;
	my $answer = <$sock>;
	croak "relay gave no answer to $cmd" unless defined $answer;
	chomp $answer;
	croak "relay: $cmd: $answer" if $answer =~ /^error/;
	return $answer;
}

sub _link_signal
{
	my ($self) = @_;
	my ($pid, $fh) = @{ $self->{link_proxy} or croak 'not partitionable' };
	kill 'TTIN', $pid or croak "kill TTIN link proxy: $!";
	my $ack = <$fh>;
	croak 'link proxy did not acknowledge' unless defined $ack && $ack =~ /^done TTIN/;
	return;
}

sub stop_proxy
{
	my ($self) = @_;
	close delete $self->{relay_sock} if $self->{relay_sock};
	if (my $link = delete $self->{link_proxy})
	{
		close $link->[1];
		kill 'TERM', $link->[0];
		waitpid($link->[0], 0);
	}
	my $pid = delete $self->{proxy_pid} or return;
	close delete $self->{proxy_out};
	kill 'TERM', $pid;
	waitpid($pid, 0);
	return;
}

# Write the pids so that another process can stop the servers (zkctl).
sub save_state
{
	my ($self) = @_;
	open my $fh, '>', "$self->{dir}/pids" or croak $!;
	print $fh "$_ $self->{pids}{$_}\n" for $self->running;
	close $fh;
	open $fh, '>', "$self->{dir}/hosts" or croak $!;
	print $fh $self->hosts, "\n";
	close $fh;
	return;
}

sub DESTROY
{
	my ($self) = @_;
	local ($?, $!, $@);
	return if $self->{keep};
	$self->stop_proxy;
	$self->stop;
}

END
{
	local $?;
	for my $zk (@live_objects)
	{
		next unless $zk && !$zk->{keep};
		$zk->stop_proxy;
		$zk->stop;
	}
}

1;
