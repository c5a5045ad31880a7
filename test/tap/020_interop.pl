
# Interoperability with Apache Curator (Java) and Kazoo (Python): a zklock
# lock on an absolute path and the lock recipes of those libraries on the
# same path exclude each other, queue behind each other and hand over, in
# both directions.  The other side is test/interop/CuratorLock.java (run by
# Java's single-file source launcher) and test/interop/kazoo_lock.py.
#
#   Curator InterProcessMutex              zk_lock_acquire & co.
#   Kazoo Lock(extra_lock_patterns=["-lock-"])   zk_lock_acquire & co.
#   Curator InterProcessReadWriteLock
#     readLock()                           zk_lock_acquire_shared & co.
#     writeLock()                          zk_lock_acquire & co. with
#                                          zklock.exclusive_naming = readwrite
#   Kazoo ReadLock / WriteLock (with extra_lock_patterns)   the same
#
# Revocation, Curator's convention: whoever wants the holder of a lock to
# let go writes the bytes "__REVOKE__" into the data of the holder's node
# (Curator's Revoker.attemptRevoke; zklock's zk_lock_request_release); a
# holder that watches its node's data hears it (Curator's InterProcessMutex
# made Revocable calls its RevocationListener; zklock's session worker
# records it for zk_lock_release_requested and the views, and with
# zklock.revocable cancels the holder's statement with 57Z01).
#
#   zklock asks a Curator holder (makeRevocable): it hears it and releases
#   Curator's Revoker asks a zklock holder: zk_lock_release_requested says
#     so; the views still say who holds (the worker writes its node's info
#     back, with release_requested_at); nothing is released unless
#     zklock.revocable is on, and then once the transaction rolls back
#   Kazoo has no revocation in its Lock recipe (2.8: no "revoke" anywhere):
#     a Kazoo application that follows the convention by hand
#     (kazoo_lock.py revoke: set(holder_node, b"__REVOKE__")) asks a zklock
#     holder as the Revoker does; zklock's request reaches a Kazoo holder's
#     node, but Kazoo sets no watch on it, does not hear it and keeps holding

use strict;
use warnings;

use FindBin;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep time);

use ForeignProgram;
use ZklockTest;

my $interop = "$FindBin::Bin/../interop";
my $curator_cp = $ForeignProgram::curator_cp;
clients_installed_ok();
ok(-r "$interop/CuratorLock.java" && -r "$interop/kazoo_lock.py",
	"the interop programs are in $interop")
  or die "interop programs missing\n";

my $zk = start_zk(servers => 1);
my $node = zk_node('interop', $zk);

my %command = (
	curator => [
		'java', '-Xmx128m', '-XX:+UseSerialGC', '-cp', $curator_cp,
		"$interop/CuratorLock.java"
	],
	kazoo => [ '/usr/bin/python3', "$interop/kazoo_lock.py" ],);
my %display = (curator => 'Curator', kazoo => 'Kazoo');

# ---------------------------------------------------------------------------
# The other side: CuratorLock.java / kazoo_lock.py (test/perl/ForeignProgram.pm).

# Start "$lib HOSTS PATH KIND ACTION..."; returns a handle.
sub program_start
{
	my ($lib, $path, $kind, @action) = @_;
	return program_run([ @{ $command{$lib} }, $zk->hosts, $path, $kind, @action ],
		"$display{$lib} $kind $action[0]");
}

# "$lib $kind try" on $path: 'acquired' or 'busy' (or what went wrong).
sub program_try
{
	my ($lib, $path, $kind) = @_;
	my $p = program_start($lib, $path, $kind, 'try');
	my $answer = program_wait($p, qr/^(acquired|busy)$/m, 60);
	my $status = program_end($p);
	return $answer if defined $answer && defined $status && $status == 0;
	program_diag($p);
	return 'failed: exit status ' . ($status // 'none (killed)');
}

# Start "$lib $kind hold" on $path and wait until it is queued: it has
# printed "started" and its node is the $nodes'th child of $path.
sub program_hold
{
	my ($lib, $path, $kind, $nodes, $label) = @_;
	my $p = program_start($lib, $path, $kind, 'hold', 300);
	ok(program_wait($p, qr/^started$/m, 60), "$label: $p->{what} started")
	  or program_diag($p);
	ok(wait_children($path, $nodes, 30),
		"$label: $p->{what} has its node in $path")
	  or diag explain children($path);
	return $p;
}

# Tell a holder to let go; wait until it has and has exited.
sub program_release
{
	my ($p, $label) = @_;
	$p->{in} .= "release\n";
	my $ms = program_wait($p, qr/^released (\d+)$/m, 30);
	my $status = program_end($p);
	ok(defined $ms && defined $status && $status == 0,
		"$label: $p->{what} releases and exits with status 0")
	  or program_diag($p);
	return $ms;
}

# ---------------------------------------------------------------------------
# The lock nodes under a parent.

# The ephemeral children of $path, in queue order (by sequence suffix).
sub children
{
	my ($path) = @_;
	return [
		sort { substr($a, -10) <=> substr($b, -10) }
		  map { $_->[0] =~ m{^\Q$path\E/([^/]+)$} ? ($1) : () }
		  grep { hex($_->[1]) != 0 } @{ $zk->tree($path) } ];
}

# Wait up to $secs until $path has $n ephemeral children; returns them, or
# undef on timeout.
sub wait_children
{
	my ($path, $n, $secs) = @_;
	my $deadline = time + $secs;
	while (1)
	{
		my $kids = children($path);
		return $kids if @$kids == $n;
		return undef if time > $deadline;
		sleep 0.1;
	}
}

sub epoch_granted
{
	my ($s, $path) = @_;
	return $s->query_safe(
		"SELECT extract(epoch FROM acquired_at) FROM zk_locks WHERE name = '$path'"
	);
}

# ---------------------------------------------------------------------------
# The scenarios.

# zklock's lock on $path (functions $zl->{try}, {acquire}, {release}, session
# set up with $setup) and $lib's $kind lock exclude each other, both ways:
#  1. zklock holds: $lib's try fails; $lib's hold queues, acquires only
#     after zklock's release, promptly.
#  2. $lib holds: zklock's try fails and leaves no node; zklock's acquire
#     (with a 20 s timeout) waits, and is granted only after $lib's release,
#     promptly.
sub exclude_both_ways
{
	my (%a) = @_;
	my ($label, $lib, $kind, $path, $zl, $setup, $node_re) =
	  @a{qw(label lib kind path zl setup node_re)};
	my $Lib = $display{$lib};

	note "$label: zklock $zl->{acquire} vs $Lib $kind on $path";
	my $s = session($node, 'interop_holder');
	$s->query_safe($setup) if $setup;

	# 1. zklock first.
	is($s->query_safe("SELECT $zl->{try}('$path')"),
		't', "$label: zklock takes $path");
	my $kids = children($path);
	ok(@$kids == 1 && $kids->[0] =~ $node_re,
		"$label: zklock's node is $path/<name matching $node_re>")
	  or diag explain $kids;
	is(program_try($lib, $path, $kind),
		'busy', "$label: $Lib $kind try while zklock holds: busy");
	ok(wait_children($path, 1, 10), "$label: ${Lib}'s try left no node")
	  or diag explain children($path);

	my $p = program_hold($lib, $path, $kind, 2, $label);
	sleep_for(1);
	ok(!program_said($p, qr/acquired/),
		"$label: $Lib $kind does not acquire while zklock holds (1 s)")
	  or program_diag($p);
	my $t_release = time;
	is($s->query_safe("SELECT $zl->{release}('$path')"),
		't', "$label: zklock releases");
	my $ms = program_wait($p, qr/^acquired (\d+)$/m, 10);
	ok(defined $ms, "$label: $Lib $kind acquires after zklock's release")
	  or program_diag($p);
	$ms //= 0;
	cmp_ok($ms, '>=', int($t_release * 1000),
		"$label: $Lib $kind acquired after the release was sent, not before");
	cmp_ok($ms / 1000 - $t_release,
		'<', 5, "$label: $Lib $kind acquired within 5 s of the release");

	# 2. $lib holds ($p above).
	is($s->query_safe("SELECT $zl->{try}('$path')"),
		'f', "$label: zklock's try while $Lib $kind holds: false");
	ok(wait_children($path, 1, 10), "$label: zklock's failed try left no node")
	  or diag explain children($path);

	my $w = session($node, 'interop_waiter');
	$w->query_safe($setup) if $setup;
	send_query($w, "SELECT 'granted', $zl->{acquire}('$path', 20000)",
		'acquire_done');
	ok(wait_for_wait_event($node, 'interop_waiter'),
		"$label: zklock's $zl->{acquire} waits for $Lib $kind");
	ok(wait_children($path, 2, 10), "$label: zklock queued behind $Lib")
	  or diag explain children($path);
	sleep_for(1);
	$w->{run}->pump_nb;
	unlike($w->{stdout}, qr/granted|acquire_done/,
		"$label: zklock does not acquire while $Lib $kind holds (1 s)");
	my $t_program_release = time;
	program_release($p, $label);
	like(wait_marker($w, 'acquire_done'),
		qr/^granted\|t$/m, "$label: zklock acquires after ${Lib}'s release");
	my $granted = epoch_granted($w, $path);
	cmp_ok($granted, '>=', $t_program_release - 0.001,
		"$label: zklock granted after $Lib was told to release, not before");
	cmp_ok($granted - $t_program_release,
		'<', 5, "$label: zklock granted within 5 s of ${Lib}'s release");
	is($w->query_safe("SELECT $zl->{release}('$path')"),
		't', "$label: zklock releases again");
	ok(wait_children($path, 0, 10), "$label: no node left in $path")
	  or diag explain children($path);
	$w->quit;
	$s->quit;
	return;
}

# zklock's shared lock and $lib's $kind (read) lock on $path are held
# together, whichever came first.
sub share_both_ways
{
	my (%a) = @_;
	my ($label, $lib, $kind, $path, $node_re) =
	  @a{qw(label lib kind path node_re)};
	my $Lib = $display{$lib};

	note "$label: zklock shared vs $Lib $kind on $path";
	my $s1 = session($node, 'interop_reader1');
	my $s2 = session($node, 'interop_reader2');

	is($s1->query_safe("SELECT zk_lock_try_acquire_shared('$path')"),
		't', "$label: zklock takes $path shared");
	my $kids = children($path);
	ok(@$kids == 1 && $kids->[0] =~ $node_re,
		"$label: zklock's shared node is $path/<name matching $node_re>")
	  or diag explain $kids;
	is(program_try($lib, $path, $kind),
		'acquired', "$label: $Lib $kind try while zklock holds shared: acquired");

	my $p = program_hold($lib, $path, $kind, 2, $label);
	ok(defined program_wait($p, qr/^acquired (\d+)$/m, 10),
		"$label: $Lib $kind acquires while zklock holds shared")
	  or program_diag($p);
	is($s2->query_safe("SELECT zk_lock_try_acquire_shared('$path')"),
		't', "$label: a second zklock session takes it shared too");
	is($s2->query_safe("SELECT zk_lock_release_shared('$path')"),
		't', "$label: the second zklock session releases");
	is($s1->query_safe("SELECT zk_lock_release_shared('$path')"),
		't', "$label: zklock releases");
	is($s1->query_safe("SELECT zk_lock_acquire_shared('$path', 5000)"),
		't', "$label: zklock takes it shared again while only $Lib $kind holds");
	ok(wait_children($path, 2, 10), "$label: zklock and $Lib hold, nobody else")
	  or diag explain children($path);
	program_release($p, $label);
	is($s1->query_safe("SELECT zk_lock_release_shared('$path')"),
		't', "$label: zklock releases again");
	ok(wait_children($path, 0, 10), "$label: no node left in $path")
	  or diag explain children($path);
	$s1->quit;
	$s2->quit;
	return;
}

my %exclusive = (
	try => 'zk_lock_try_acquire',
	acquire => 'zk_lock_acquire',
	release => 'zk_lock_release');
my %shared = (
	try => 'zk_lock_try_acquire_shared',
	acquire => 'zk_lock_acquire_shared',
	release => 'zk_lock_release_shared');
my $readwrite = q{SET zklock.exclusive_naming = 'readwrite'};
my $mutex_node = qr/^_c_[^\/]+-lock-\d{10}$/;
my $write_node = qr/^_c_[^\/]+-__WRIT__\d{10}$/;
my $read_node = qr/^_c_[^\/]+-__READ__\d{10}$/;

# 1. Curator InterProcessMutex.
exclude_both_ways(
	label => 'Curator mutex',
	lib => 'curator',
	kind => 'mutex',
	path => '/interop/mutex',
	zl => \%exclusive,
	node_re => $mutex_node);

# 2. Kazoo Lock with extra_lock_patterns=["-lock-"].
exclude_both_ways(
	label => 'Kazoo Lock',
	lib => 'kazoo',
	kind => 'mutex',
	path => '/interop/kazoo',
	zl => \%exclusive,
	node_re => $mutex_node);

# 3. Curator InterProcessReadWriteLock.
share_both_ways(
	label => 'Curator read + zklock shared',
	lib => 'curator',
	kind => 'read',
	path => '/interop/rw',
	node_re => $read_node);
exclude_both_ways(
	label => 'Curator write vs zklock shared',
	lib => 'curator',
	kind => 'write',
	path => '/interop/rw',
	zl => \%shared,
	node_re => $read_node);
exclude_both_ways(
	label => 'Curator read vs zklock exclusive (readwrite naming)',
	lib => 'curator',
	kind => 'read',
	path => '/interop/rw',
	zl => \%exclusive,
	setup => $readwrite,
	node_re => $write_node);

# The reason for zklock.exclusive_naming: Curator's read/write lock counts
# only "__WRIT__" nodes as writers, so with the default naming ("-lock-", for
# InterProcessMutex) a Curator reader does not see zklock's exclusive lock.
{
	my $s = session($node, 'interop_control');
	is($s->query_safe(q{SELECT zk_lock_try_acquire('/interop/rw')}),
		't', 'control: zklock takes /interop/rw exclusive, default naming');
	like(
		children('/interop/rw')->[0] // '',
		$mutex_node,
		'control: its node is named like an InterProcessMutex node');
	is(program_try('curator', '/interop/rw', 'read'),
		'acquired',
		'control: Curator read does not see it: the setting is needed for Curator read/write locks'
	);
	is($s->query_safe(q{SELECT zk_lock_release('/interop/rw')}),
		't', 'control: zklock releases');
	$s->quit;
}

# 4. Kazoo ReadLock / WriteLock, with extra_lock_patterns for Curator's and
#    zklock's node names (Kazoo's own "__rlock__" readers count as readers in
#    zklock).
share_both_ways(
	label => 'Kazoo ReadLock + zklock shared',
	lib => 'kazoo',
	kind => 'read',
	path => '/interop/kazoo-rw',
	node_re => $read_node);
exclude_both_ways(
	label => 'Kazoo WriteLock vs zklock shared',
	lib => 'kazoo',
	kind => 'write',
	path => '/interop/kazoo-rw',
	zl => \%shared,
	node_re => $read_node);
exclude_both_ways(
	label => 'Kazoo ReadLock vs zklock exclusive',
	lib => 'kazoo',
	kind => 'read',
	path => '/interop/kazoo-rw',
	zl => \%exclusive,
	node_re => $mutex_node);

# ---------------------------------------------------------------------------
# Revocation (Curator's convention, see the top).

# "$lib mutex revoke" on $path: the node it asked ("revoked <node>" gives
# it; "none" gives ''), undef if it failed.  Its exit is waited for.
sub program_revoke
{
	my ($lib, $path, $label) = @_;
	my $p = program_start($lib, $path, 'mutex', 'revoke');
	my $said = program_wait($p, qr/^(revoked \S+|none)$/m, 60);
	my $status = program_end($p);
	ok(defined $said && defined $status && $status == 0,
		"$label: $p->{what} asks and exits with status 0")
	  or program_diag($p);
	return undef unless defined $said;
	return $said =~ /^revoked (\S+)$/ ? $1 : '';
}

# zklock asks a Curator holder whose InterProcessMutex was made Revocable:
# its RevocationListener hears it and lets go, promptly.
sub zklock_asks_curator
{
	my ($path) = @_;
	my $label = 'zklock asks Curator';
	note "$label: zk_lock_request_release vs a revocable Curator mutex on $path";
	my $p = program_start('curator', $path, 'mutex', 'revocable', 60);
	ok(defined program_wait($p, qr/^acquired (\d+)$/m, 60),
		"$label: $p->{what} acquires $path")
	  or program_diag($p);
	ok(wait_children($path, 1, 10), "$label: Curator's node is the only one")
	  or diag explain children($path);

	my $s = session($node, 'interop_asker');
	my $t_request = time;
	is($s->query_safe("SELECT zk_lock_request_release('$path')"),
		'1', "$label: zk_lock_request_release asks one holder");
	my $heard = program_wait($p, qr/^revoke-requested (\d+)$/m, 20);
	ok(defined $heard, "$label: Curator's RevocationListener hears it (20 s)")
	  or program_diag($p);
	my $released = program_wait($p, qr/^released (\d+)$/m, 20);
	ok(defined $released, "$label: Curator releases (20 s)")
	  or program_diag($p);
	my $status = program_end($p);
	ok(defined $status && $status == 0,
		"$label: $p->{what} exits with status 0")
	  or program_diag($p);
	note sprintf(
		"$label: from the request to Curator's listener %.3f s, to its release %.3f s",
		($heard // 0) / 1000 - $t_request,
		($released // 0) / 1000 - $t_request);

	is($s->query_safe("SELECT zk_lock_try_acquire('$path')"),
		't', "$label: then zklock takes $path");
	is($s->query_safe("SELECT zk_lock_release('$path')"),
		't', "$label: zklock releases");
	ok(wait_children($path, 0, 10), "$label: no node left in $path")
	  or diag explain children($path);
	$s->quit;
	return;
}

# $lib's "revoke" (Curator: Revoker.attemptRevoke; Kazoo: the same write by
# hand) asks a zklock holder: the holder sees it, the views still say who
# holds, and it keeps the lock (zklock.revocable is off).
sub lib_asks_zklock
{
	my (%a) = @_;
	my ($label, $lib, $path) = @a{qw(label lib path)};
	my $Lib = $display{$lib};

	note "$label: $Lib revoke vs a zklock holder of $path";
	my $h = session($node, 'interop_asked');
	my $o = session($node, 'interop_observer');
	is($h->query_safe("SELECT zk_lock_acquire('$path')"),
		't', "$label: zklock takes $path");
	my $pid = $h->query_safe('SELECT pg_backend_pid()');
	my $znode =
	  $h->query_safe("SELECT znode FROM zk_locks WHERE name = '$path'");
	is($h->query_safe("SELECT zk_lock_release_requested('$path')"),
		'f', "$label: no release requested yet");
	is( $o->query_safe(
			"SELECT pid, release_requested FROM zk_lock_holders('$path')"),
		"$pid|f",
		"$label: zk_lock_holders: the holder, no release requested");

	my $t_start = time;
	is(program_revoke($lib, $path, $label),
		$znode, "$label: $Lib asks the zklock holder's node ($znode)");
	my $t_exited = time;
	is( poll_query(
			$h, "SELECT zk_lock_release_requested('$path')", 't', 10),
		't',
		"$label: the holder sees it: zk_lock_release_requested is true (10 s)");
	note sprintf(
		"$label: zk_lock_release_requested true %.3f s after ${Lib}'s revoke was started, %.3f s after it exited",
		time - $t_start, time - $t_exited);

	# The worker writes the holder's info back (asynchronously).
	is( poll_query(
			$o,
			"SELECT pid, release_requested FROM zk_lock_holders('$path')",
			"$pid|t", 10),
		"$pid|t",
		"$label: zk_lock_holders: release requested, and still the holder's pid");
	is( $o->query_safe(
			"SELECT info ? 'release_requested_at', (info->>'pid')::int = $pid FROM zk_lock_queue('$path')"
		),
		't|t',
		"$label: the node's info is the holder's, with release_requested_at");
	is( $h->query_safe(
			"SELECT state, release_requested FROM zk_locks WHERE name = '$path'"),
		'held|t',
		"$label: the zklock holder still holds, release requested");
	is($o->query_safe("SELECT zk_lock_try_acquire('$path')"),
		'f', "$label: nobody else gets it");
	is($h->query_safe("SELECT zk_lock_release('$path')"),
		't', "$label: the holder releases when it chooses");
	ok(wait_children($path, 0, 10), "$label: no node left in $path")
	  or diag explain children($path);
	$o->quit;
	$h->quit;
	return;
}

# zklock asks a Kazoo holder: the request reaches its node, but Kazoo's Lock
# watches no data and keeps holding.
sub zklock_asks_kazoo
{
	my ($path) = @_;
	my $label = 'zklock asks Kazoo';
	note "$label: zk_lock_request_release vs a Kazoo Lock on $path";
	my $p = program_start('kazoo', $path, 'mutex', 'hold', 60);
	ok(defined program_wait($p, qr/^acquired (\d+)$/m, 60),
		"$label: $p->{what} acquires $path")
	  or program_diag($p);

	my $s = session($node, 'interop_asker');
	is($s->query_safe("SELECT zk_lock_request_release('$path')"),
		'1', "$label: zk_lock_request_release reaches the Kazoo holder's node");
	is( $s->query_safe(
			"SELECT holding, release_requested, pid IS NULL FROM zk_lock_holders('$path')"
		),
		't|t|t',
		"$label: zk_lock_holders: its node holds and says __REVOKE__ (nobody writes it back)"
	);
	sleep_for(1);
	ok(!program_said($p, qr/released|lost/),
		"$label: Kazoo does not hear it (1 s)")
	  or program_diag($p);
	is($s->query_safe("SELECT zk_lock_try_acquire('$path')"),
		'f', "$label: Kazoo keeps holding: zklock's try fails");
	program_release($p, $label);
	is($s->query_safe("SELECT zk_lock_try_acquire('$path')"),
		't', "$label: zklock takes $path after Kazoo's release");
	is($s->query_safe("SELECT zk_lock_release('$path')"),
		't', "$label: zklock releases");
	ok(wait_children($path, 0, 10), "$label: no node left in $path")
	  or diag explain children($path);
	$s->quit;
	return;
}

# Curator's Revoker asks a zklock holder that set zklock.revocable while it
# runs a statement: the statement fails with 57Z01, the lock is released
# when its transaction rolls back, and Curator gets it.
sub curator_asks_revocable_zklock
{
	my ($path) = @_;
	my $label = 'Curator asks a revocable zklock holder';
	note "$label: on $path";
	my $h = session($node, 'interop_revocable');
	$h->query_safe('SET zklock.revocable = on');
	$h->{stdin} .= "\\set VERBOSITY verbose\n";
	is($h->query_safe("SELECT zk_lock_acquire('$path')"),
		't', "$label: zklock takes $path");
	my $znode =
	  $h->query_safe("SELECT znode FROM zk_locks WHERE name = '$path'");
	send_query($h, 'SELECT pg_sleep(60)', 'sleep_done');
	ok( $node->poll_query_until(
			'postgres',
			"SELECT wait_event FROM pg_stat_activity WHERE application_name = 'interop_revocable'",
			'PgSleep'),
		"$label: the holder runs pg_sleep(60)");

	my $t_start = time;
	is(program_revoke('curator', $path, $label),
		$znode, "$label: Curator's Revoker asks the holder's node");
	wait_marker($h, 'sleep_done');
	# From the revoke program's start (the JVM's start-up included: the
	# program says nothing before it asks).
	my $failed_after = time - $t_start;
	# psql's error is on stderr, maybe not read yet.
	my $deadline = time + 5;
	while ($h->{stderr} !~ /ERROR/ && time < $deadline)
	{
		eval { $h->{run}->pump_nb };
		sleep 0.02;
	}
	like(
		$h->{stderr},
		qr/\bERROR:\s+57Z01: canceling statement because the release of zklock lock "\Q$path\E" was requested/,
		"$label: the holder's statement fails with SQLSTATE 57Z01");
	cmp_ok($failed_after, '<', 20,
		"$label: it fails within 20 s of the request (not at the end of the sleep)");
	note sprintf(
		"$label: the statement failed %.3f s after Curator's revoke was started",
		$failed_after);
	$h->{stderr} = '';
	is($h->query_safe('SELECT count(*) FROM zk_locks'),
		'0', "$label: the rollback released the lock");
	ok(wait_children($path, 0, 10), "$label: and its node is gone")
	  or diag explain children($path);
	is(program_try('curator', $path, 'mutex'),
		'acquired', "$label: then Curator mutex try acquires");
	ok(wait_children($path, 0, 10), "$label: no node left in $path")
	  or diag explain children($path);
	$h->quit;
	return;
}

# 5. Revocation, both ways.
zklock_asks_curator('/interop/revoke-curator');
lib_asks_zklock(
	label => 'Curator Revoker asks zklock',
	lib => 'curator',
	path => '/interop/revoke-zklock-curator');
lib_asks_zklock(
	label => 'Kazoo (by hand) asks zklock',
	lib => 'kazoo',
	path => '/interop/revoke-zklock-kazoo');
zklock_asks_kazoo('/interop/revoke-kazoo');
curator_asks_revocable_zklock('/interop/revocable');

# Nothing left behind, outside zklock.root too.
my $left = $zk->wait_no_ephemerals('/interop', 20);
is_deeply($left, [], 'no lock node left under /interop') or diag explain $left;
finish_checks($zk, [$node]);
done_testing();
