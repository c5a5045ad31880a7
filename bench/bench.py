#!/usr/bin/python3
"""zklock's benchmark; bench/run.sh builds what it needs and runs it.

Starts two PostgreSQL 15 nodes, then, for each ZooKeeper under test (a
standalone server, then a 3-server ensemble, both durable: fsync on), points
the nodes at it and measures what follows; then the same two with
forceSync=no, where round trips rather than the disk are the cost, for the
cycles (1) and a long queue (8, standalone only); then the cycles again
with forceSync=no and every reply LINK_MS late (a proxy), as when ZooKeeper
runs on hosts of its own and a round trip outweighs the server's work:

  1. uncontended acquire+release cycles: zklock session and transaction
     locks from PL/pgSQL and from pgbench (transaction locks also in a
     transaction that writes, so that the commit guard checks the session),
     against the bare recipe done by bench/zkbare.c with the same C client,
     and pg_advisory_lock for scale;
  2. contended handoff: N backends over both nodes taking turns on one lock,
     latency from a release to the next holder's return, and grants/s,
     against N bare clients doing the same;
  3. many locks in one backend: time per acquire and release at several
     sizes, and backend memory per held lock;
  4. many waiters on one lock: grant order against queue order, watches per
     waiter (from the servers' wchc), CPU used while waiting;
  5. first use: the first zklock call in a new backend, and later ones;
  6. deadlock detection: from a cycle's closing to its 40P01;
  7. zk_cluster_locks with 1,000 and 10,000 locks held over both nodes;
  8. a long queue of one server's waiters at the default deadlock_timeout:
     ZooKeeper's packets per waiter and second, and the drain.

Last, on a durable ensemble of its own (also alone: BENCH_ONLY=proof), what
the commit guard's proof costs (issue 47), in a section of RESULTS.md with a
column per build: the first acquisition + COMMIT on an idle server, a COMMIT
shortly after the last write, a lock held across transactions, latency
under write load, and ZooKeeper's requests per second.

Each figure is the median of several rounds; a round runs every variant of
its section once, in turn (every other round in reverse), so that drift on
this shared machine hits all variants alike.  Prints one table and writes
bench/RESULTS.md.

Python 3 standard library only; PostgreSQL is driven through psql and
pgbench, ZooKeeper through test/zk/zkctl, zkbare and four-letter commands.
"""

import json
import math
import os
import platform
import re
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

BENCH = Path(__file__).resolve().parent
SRC = BENCH.parent
# BENCH_PGBIN: a private copy of PostgreSQL 15 with zklock installed there,
# which leaves the machine's shared install alone.
PGBIN = Path(os.environ.get('BENCH_PGBIN', '/usr/lib/postgresql/15/bin'))
ZKCTL = SRC / 'test' / 'zk' / 'zkctl'
# The link of the "ms away" columns: every reply from ZooKeeper this late
# (a round trip within a data centre is 0.1-1 ms).
LINK_MS = 1
ZK_ROOT = '/zklock_bench'           # zklock.root of both nodes
BARE_ROOT = '/zklock_bench_bare'    # zkbare's lock parents
NODES = ('node_a', 'node_b')

QUICK = os.environ.get('BENCH_QUICK', '') not in ('', '0')
# BENCH_ONLY=proof: only the commit guard's proof (issue 47), in minutes.
ONLY = os.environ.get('BENCH_ONLY', '')
if ONLY not in ('', 'proof'):
    sys.exit('BENCH_ONLY must be empty or proof, not %r' % ONLY)

# How much of everything.  Counts of uncontended cycles are calibrated per
# ZooKeeper (an ensemble is several times slower than a standalone server)
# so that a measurement takes about cycle_seconds.
if QUICK:
    CONF = dict(
        cycle_rounds=3, cycle_seconds=0.3,
        advisory_plpgsql=5000, advisory_pgbench=1000,
        handoff_rounds=1, handoff_clients=(1, 4, 16), handoff_seconds=1.0,
        many_rounds=1, many_sizes=(10, 100, 1000), many_once=(),
        reacquire_max=1000, local_calls=1000,
        waiters=20, waiter_rounds=1, waiter_cpu_seconds=2.0,
        queue_sizes=(100,), queue_seconds=6.0,
        first_use_rounds=3, first_use_later=10, deadlock_rounds=3,
        view_sizes=(1000,), view_reads=3,
        backends=200, burst=300, throughput_clients=(64,), throughput_seconds=2.0,
        disconnects=400, terminations=200,
        kill9_rounds=1, revoke_rounds=1, revoke_requests=20,
        fence_rounds=1, fence_transactions=300,
        proof_idle_rounds=2, proof_commit_rounds=3, proof_held_rounds=1,
        proof_held_seconds=10.0, proof_paced_rounds=1, proof_paced_seconds=10.0,
        proof_rate_seconds=10.0)
else:
    CONF = dict(
        cycle_rounds=5, cycle_seconds=0.8,
        advisory_plpgsql=20000, advisory_pgbench=3000,
        handoff_rounds=3, handoff_clients=(1, 4, 16, 64), handoff_seconds=2.0,
        # 10,000 locks take a minute or more per pass on an ensemble: that
        # size runs in one round only, and is not re-acquired.
        many_rounds=3, many_sizes=(10, 1000, 10000), many_once=(10000,),
        reacquire_max=1000, local_calls=2000,
        waiters=100, waiter_rounds=2, waiter_cpu_seconds=5.0,
        queue_sizes=(100, 300, 1000), queue_seconds=10.0,
        first_use_rounds=5, first_use_later=20, deadlock_rounds=7,
        view_sizes=(1000, 10000), view_reads=5,
        backends=1000, burst=2000, throughput_clients=(64, 512), throughput_seconds=5.0,
        disconnects=20000, terminations=1000,
        kill9_rounds=3, revoke_rounds=3, revoke_requests=50,
        fence_rounds=3, fence_transactions=2000,
        proof_idle_rounds=3, proof_commit_rounds=5, proof_held_rounds=2,
        proof_held_seconds=20.0, proof_paced_rounds=2, proof_paced_seconds=20.0,
        proof_rate_seconds=20.0)


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# ---- processes ----

# Every child that may outlive the call that started it, to be stopped by
# pid on the way out.
children = []


def as_postgres(cmd):
    """PostgreSQL refuses to run as root: run cmd as postgres if we are."""
    if os.geteuid() == 0:
        return ['runuser', '-u', 'postgres', '--'] + cmd
    return cmd


def give_to_postgres(path):
    if os.geteuid() == 0:
        shutil.chown(path, 'postgres', 'postgres')


def run(cmd, timeout=600, **kw):
    """Run cmd, return its stdout; fail loudly with its stderr."""
    cmd = [str(c) for c in cmd]
    res = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, timeout=timeout, **kw)
    if res.returncode != 0:
        raise RuntimeError('%s failed (%d):\n%s' % (' '.join(cmd), res.returncode,
                                                     res.stderr.strip()))
    return res.stdout


def spawn(cmd, **kw):
    proc = subprocess.Popen([str(c) for c in cmd], **kw)
    children.append(proc)
    return proc


def reap(procs, timeout):
    """Wait for procs to end; fail if one did not or failed."""
    deadline = time.time() + timeout
    for p in procs:
        try:
            p.wait(max(0.1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            raise RuntimeError('%s did not finish in time' % ' '.join(p.args))
        if p.returncode != 0:
            err = p.stderr.read() if p.stderr else ''
            raise RuntimeError('%s failed (%d): %s' % (' '.join(p.args), p.returncode, err))
        if p in children:
            children.remove(p)


def stop_children():
    for p in children:
        if p.poll() is None:
            p.kill()
            p.wait()
    children.clear()


def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


# ---- statistics ----

def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def percentile(xs, p):
    """Nearest-rank percentile of a non-empty list."""
    xs = sorted(xs)
    return xs[max(0, math.ceil(p / 100 * len(xs)) - 1)]


# ---- ZooKeeper ----

class ZooKeeper:
    """A standalone server or ensemble, started by test/zk/zkctl: durable
    (fsync on), or with forceSync=no, where round trips are what costs.
    With link_ms, clients reach it through test/zk/tcpproxy.py, which hands
    every reply on link_ms later: ZooKeeper on hosts of its own, where a
    round trip costs more than the server's work on a request."""

    def __init__(self, work, servers, durable=True, link_ms=0, tag=''):
        self.servers = servers
        self.durable = durable
        self.link_ms = link_ms
        self.label = 'standalone' if servers == 1 else 'ensemble(%d)' % servers
        if link_ms:
            self.label = '%d ms away: %d' % (link_ms, servers)
        elif not durable:
            self.label = 'no fsync: %d' % servers
        if tag:
            self.label += ', ' + tag
        self.dir = work / ('zk%d%s%s%s' % (servers, '' if durable else '-nosync',
                                           '-link%d' % link_ms if link_ms else '',
                                           '-' + tag if tag else ''))
        self.hosts = None
        self.proxy = None

    def start(self):
        # Lock parents are containers: empty ones go after ZooKeeper's
        # default minute, as in production, not zkctl's second for tests.
        self.hosts = run([ZKCTL, 'start', self.dir, '--servers', self.servers,
                          '--default-containers']
                         + (['--durable'] if self.durable else [])).strip()
        self.ports = [int(h.rsplit(':', 1)[1]) for h in self.hosts.split(',')]
        srvr = self.flw(self.ports[0], 'srvr')
        m = re.search(r'Zookeeper version: ([\d.]+)', srvr)
        self.version = m.group(1) if m else 'unknown'
        if self.link_ms:
            self.start_proxy()

    def start_proxy(self):
        """Clients' hosts become the proxy's ports; four-letter commands
        (self.ports) still go to the servers directly.  Not one of children:
        a failed measurement's recovery must not stop it."""
        pairs = [(free_port(), port) for port in self.ports]
        # Its stderr (tracebacks of connections cancelled when it stops)
        # goes to a file beside the servers' logs.
        with open(self.dir / 'tcpproxy.log', 'w') as log_file:
            self.proxy = subprocess.Popen(
                [sys.executable, SRC / 'test' / 'zk' / 'tcpproxy.py', '--delay=%d' % self.link_ms]
                + ['%d:%d' % pair for pair in pairs],
                stdout=subprocess.PIPE, stderr=log_file, text=True)
        if self.proxy.stdout.readline().strip() != 'ready':
            raise RuntimeError('tcpproxy.py did not start')
        self.hosts = ','.join('127.0.0.1:%d' % listen for listen, _ in pairs)

    def stop(self):
        if self.proxy:
            self.proxy.terminate()
            self.proxy.wait()
            self.proxy = None
        if self.hosts:
            run([ZKCTL, 'stop', self.dir])
            self.hosts = None

    def pids(self):
        """The servers' pids (zkctl keeps them)."""
        return [int(line.split()[1]) for line in (self.dir / 'pids').read_text().splitlines()]

    def signal(self, sig):
        """Send sig to every server."""
        for pid in self.pids():
            os.kill(pid, sig)

    def flw(self, port, cmd):
        """A four-letter command's reply."""
        with socket.create_connection(('127.0.0.1', port), timeout=10) as s:
            s.sendall(cmd.encode())
            chunks = []
            while True:
                data = s.recv(65536)
                if not data:
                    break
                chunks.append(data)
        return b''.join(chunks).decode()

    def mode(self, port):
        """leader, follower or standalone ('srvr')."""
        return re.search(r'^Mode: (\w+)', self.flw(port, 'srvr'), re.M).group(1)

    def connection(self, port, sid):
        """The 'cons' figures (recved, maxlat, ...) of session sid's connection
        to the server at port, as ints; None: it has none there."""
        for line in self.flw(port, 'cons').splitlines():
            if 'sid=%s,' % sid in line.lower():
                return {k: int(v, 0) for k, v in re.findall(r'(\w+)=(0x[0-9a-f]+|\d+)', line)}
        return None

    def watches_by_session(self):
        """{session id: [watched paths]} over all servers ('wchc')."""
        watches = {}
        for port in self.ports:
            sid = None
            for line in self.flw(port, 'wchc').splitlines():
                if line.startswith('0x'):
                    sid = line.strip().lower()
                elif line.strip().startswith('/') and sid:
                    watches.setdefault(sid, []).append(line.strip())
        return watches

    def ephemeral_owners(self, part):
        """Sessions that own ephemeral nodes whose path contains part
        ('dump', which only the leader answers in full)."""
        owners = set()
        for port in self.ports:
            sid = None
            for line in self.flw(port, 'dump').splitlines():
                if line.startswith('0x'):
                    sid = line.split()[0].lower()
                elif line.strip().startswith('/') and sid and part in line:
                    owners.add(sid)
        return owners

    def watch_count(self, prefix):
        """Watches on paths under prefix, over all servers ('wchp')."""
        count = 0
        for port in self.ports:
            path = None
            for line in self.flw(port, 'wchp').splitlines():
                if line.startswith('/'):
                    path = line.strip()
                elif line.strip().startswith('0x') and path and path.startswith(prefix):
                    count += 1
        return count


class Zkbare:
    """bench/zkbare.c, built by run.sh."""

    def __init__(self, path):
        self.path = path

    def __call__(self, zk, *args, timeout=600, hosts=None):
        return run([self.path, hosts or zk.hosts] + list(args), timeout=timeout)

    def spawn(self, hosts, *args):
        return spawn([self.path, hosts] + list(args), stdout=subprocess.PIPE,
                     stderr=subprocess.PIPE, text=True)

    def queue(self, zk, parent):
        """[(child, owner session)] of parent, in queue order."""
        rows = [line.split() for line in self(zk, 'queue', parent).splitlines()]
        return sorted(((c, o.lower()) for c, o in rows), key=lambda r: r[0][-10:])


# ---- PostgreSQL ----

class Node:
    """A PostgreSQL 15 node in a temporary directory, on 127.0.0.1 only."""

    def __init__(self, work, name):
        self.name = name
        self.dir = work / name
        self.data = self.dir / 'data'
        self.port = free_port()
        self.started = False

    def conninfo(self, app='bench'):
        return ('host=127.0.0.1 port=%d user=postgres dbname=postgres '
                'application_name=%s' % (self.port, app))

    def start(self):
        self.dir.mkdir()
        give_to_postgres(self.dir)
        run(as_postgres([PGBIN / 'initdb', '-D', self.data, '-U', 'postgres',
                         '-A', 'trust', '--no-sync']))
        with open(self.data / 'postgresql.conf', 'a') as f:
            f.write("\n# zklock benchmark\n"
                    "listen_addresses = '127.0.0.1'\n"
                    "port = %d\n"
                    "unix_socket_directories = '%s'\n"
                    "max_connections = %d\n"
                    "shared_preload_libraries = 'zklock'\n"
                    "cluster_name = '%s'\n"
                    "include_if_exists = 'zklock_bench.conf'\n"
                    % (self.port, self.dir, max(CONF['backends'], CONF['burst']) + 100, self.name))
        self.write_zk_conf('')
        run(as_postgres([PGBIN / 'pg_ctl', '-D', self.data, '-l',
                         self.dir / 'server.log', '-w', '-s', 'start']))
        self.started = True
        self.psql_file(BENCH / 'bench.sql')

    def stop(self):
        if self.started:
            run(as_postgres([PGBIN / 'pg_ctl', '-D', self.data, '-m', 'fast',
                             '-w', '-s', 'stop']))
            self.started = False

    def use_zk(self, zk, hosts=None, settings=''):
        """Point zklock at zk (at hosts of it, if given): the session worker
        opens a session there."""
        hosts = hosts or zk.hosts
        self.write_zk_conf("zklock.hosts = '%s'\nzklock.root = '%s'\n%s"
                           % (hosts, ZK_ROOT, settings))
        run(as_postgres([PGBIN / 'pg_ctl', '-D', self.data, '-s', 'reload']))
        self.await_session(hosts)

    def await_session(self, hosts=None):
        """Wait until the server takes zklock.hosts and its worker is connected."""
        deadline = time.time() + 30
        while True:
            try:
                ok = ((hosts is None or self.sql('SHOW zklock.hosts') == [[hosts]]) and
                      self.sql('SELECT state FROM zk_session()') == [['connected']])
            except RuntimeError:
                ok = False      # restarting after a crash
            if ok:
                return
            if time.time() > deadline:
                raise RuntimeError('%s has no ZooKeeper session on %s' % (self.name, hosts))
            time.sleep(0.05)

    def write_zk_conf(self, text):
        conf = self.data / 'zklock_bench.conf'
        conf.write_text(text)
        give_to_postgres(conf)

    def psql_cmd(self, app='bench'):
        return [PGBIN / 'psql', '-X', '-q', '-At', '-F', '\t', '-v', 'ON_ERROR_STOP=1',
                '-d', self.conninfo(app)]

    def psql_file(self, path):
        run(self.psql_cmd() + ['-f', path])

    def sql(self, query, app='bench'):
        """Rows of one query, in a new session, as lists of strings."""
        out = run(self.psql_cmd(app) + ['-c', query])
        return [line.split('\t') for line in out.splitlines()]

    def value(self, query):
        return self.sql(query)[0][0]

    def spawn(self, query, app):
        """Run query in a new session in the background."""
        return spawn(self.psql_cmd(app) + ['-c', query], stdout=subprocess.DEVNULL,
                     stderr=subprocess.PIPE, text=True)

    def session(self, app='bench'):
        return Session(self, app)

    def pgbench(self, script, transactions, clients=1):
        """Transactions per second of clients each running script."""
        out = run([PGBIN / 'pgbench', '-n', '-f', script, '-t', transactions,
                   '-c', clients, '-j', min(clients, 2),
                   '-h', '127.0.0.1', '-p', self.port, '-U', 'postgres', 'postgres'])
        return float(re.search(r'tps = ([\d.]+) \(without initial connection time\)',
                               out).group(1))


class Session:
    """A psql session kept open, for queries that must share a backend."""

    MARK = '__bench_query_done__'

    def __init__(self, node, app):
        self.proc = spawn(node.psql_cmd(app), stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, bufsize=1)

    def query(self, sql):
        self.proc.stdin.write('%s;\n\\echo %s\n' % (sql, self.MARK))
        self.proc.stdin.flush()
        rows = []
        for line in self.proc.stdout:
            if line.rstrip('\n') == self.MARK:
                return rows
            rows.append(line.rstrip('\n').split('\t'))
        raise RuntimeError('psql session ended: %s' % self.proc.stderr.read())

    def value(self, sql):
        return self.query(sql)[0][0]

    def close(self):
        self.proc.stdin.close()
        reap([self.proc], 60)


def pg_array(text):
    """A float8[] as psql prints it."""
    return [float(x) for x in text.strip('{}').split(',')]


def quote(s):
    return "'" + s.replace("'", "''") + "'"


# ---- what the sections share ----

class Target:
    """The ZooKeeper under test, and what measures against it: zkbare and
    the PostgreSQL nodes pointed at it."""

    def __init__(self, zk, zkbare, nodes):
        self.zk = zk
        self.zkbare = zkbare
        self.nodes = nodes
        self.failures = []

    def rounds(self, n, variants, measure):
        """Run every variant once per round, reversing the order every other
        round; returns {variant: [measure(variant, round) of each round]}.
        A measurement that fails is repeated once, after cleaning up."""
        results = {v: [] for v in variants}
        for r in range(n):
            for v in (variants if r % 2 == 0 else list(reversed(variants))):
                try:
                    results[v].append(measure(v, r))
                except (RuntimeError, subprocess.TimeoutExpired) as e:
                    log('  %s failed, repeating it: %s' % (v, e))
                    self.failures.append('%s, %s: %s' % (self.zk.label, v, e))
                    self.recover()
                    results[v].append(measure(v, r))
        return results

    def recover(self):
        """End every session a failed measurement left behind.  A backend
        waiting for a lock does not notice that its client went away, so
        they are terminated, which also ends their ZooKeeper sessions."""
        stop_children()
        for n in self.nodes:
            n.sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                  "WHERE application_name LIKE 'bench\\_%' AND pid <> pg_backend_pid()")


# ---- 1. uncontended cycles ----

def bench_cycles(t):
    zk, zkbare, node = t.zk, t.zkbare, t.nodes[0]
    parent = BARE_ROOT + '/cycle'
    zkbare(zk, 'mkdir', parent)
    # A server just started runs its first requests cold (the JVM compiles
    # as it goes): warm it up, with zklock's path too, before calibrating.
    zkbare(zk, 'cycle', parent, 500)
    node.value("CALL bench_cycles('session', 'bench-cycle', 500)")
    # Calibrate on the bare client: about cycle_seconds per measurement.
    per_cycle = float(zkbare(zk, 'cycle', parent, 100)) / 100
    n = max(200, min(3000, int(CONF['cycle_seconds'] / per_cycle)))
    n_adv, n_adv_pgbench = CONF['advisory_plpgsql'], CONF['advisory_pgbench']

    def plpgsql(kind, count):
        secs = float(node.value('CALL bench_cycles(%s, %s, %d)'
                                % (quote(kind), quote('bench-cycle'), count)))
        return count / secs

    measure = {
        'bare': lambda: n / float(zkbare(zk, 'cycle', parent, n)),
        'session_plpgsql': lambda: plpgsql('session', n),
        'session_pgbench': lambda: node.pgbench(BENCH / 'pgbench' / 'session.sql', n),
        'xact_plpgsql': lambda: plpgsql('xact', n),
        'xact_pgbench': lambda: node.pgbench(BENCH / 'pgbench' / 'xact.sql', n),
        'xact_write_plpgsql': lambda: plpgsql('xact_write', n),
        'xact_write_pgbench': lambda: node.pgbench(BENCH / 'pgbench' / 'xact_write.sql', n),
        'advisory_plpgsql': lambda: plpgsql('advisory', n_adv),
        'advisory_pgbench': lambda: node.pgbench(BENCH / 'pgbench' / 'advisory.sql',
                                                 n_adv_pgbench),
    }
    log('  uncontended cycles: %d per measurement, %d rounds' % (n, CONF['cycle_rounds']))
    res = t.rounds(CONF['cycle_rounds'], list(measure), lambda v, r: measure[v]())
    out = {'cycles_n': n}
    for v, xs in res.items():
        out['cycle_' + v] = median(xs)
        # Time ratios, each round's against the bare client's in that round.
        ratios = [bare / x for bare, x in zip(res['bare'], xs)]
        out['cycle_ratios_' + v] = (min(ratios), median(ratios), max(ratios))
    return out


# ---- 2. contended handoff ----

def handoff_stats(grants, start, end):
    """grants: (token, acquired, released) of all holders.  Latency of each
    handoff (next holder's acquired - previous holder's released, in token
    order) that happened within [start, end]; grants/s in it."""
    grants = sorted(grants)
    in_window = [g for g in grants if start <= g[1] <= end]
    lat = [b[1] - a[2] for a, b in zip(grants, grants[1:])
           if a[2] >= start and b[1] <= end]
    if any(x < 0 for x in lat):
        raise RuntimeError('two holders at once: a grant came before the previous release')
    return dict(rate=len(in_window) / (end - start),
                p50=percentile(lat, 50) * 1000 if lat else None,
                p99=percentile(lat, 99) * 1000 if lat else None)


def handoff_zklock(nodes, clients, run_id):
    """clients backends split over the nodes; they open their ZooKeeper
    sessions, then wait on an advisory lock held by us on each node, so that
    all start when we let go."""
    seconds = CONF['handoff_seconds']
    barrier = 4242
    gates = [n.session('bench_gate') for n in nodes]
    for g in gates:
        g.query('SELECT pg_advisory_lock(%d)' % barrier)
    procs = [nodes[i % 2].spawn(
        "CALL bench_handoff(%s, 'handoff', %s, %d)" % (quote(run_id), seconds, barrier),
        'bench_handoff') for i in range(clients)]
    waiting_sql = ("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                   "AND NOT granted AND objid = %d" % barrier)
    deadline = time.time() + 60 + clients
    while sum(int(g.value(waiting_sql)) for g in gates) < clients:
        if time.time() > deadline or any(p.poll() is not None for p in procs):
            raise RuntimeError('handoff backends did not get ready')
        time.sleep(0.1)
    # Every backend wakes after this instant and runs for seconds from its
    # wake-up, so the window is covered by all of them.
    start = time.time()
    for g in gates:
        g.query('SELECT pg_advisory_unlock(%d)' % barrier)
    reap(procs, seconds + 60)
    for g in gates:
        g.close()
    grants = []
    for n in nodes[:min(clients, 2)]:
        grants += [(int(t), float(a), float(r)) for t, a, r in n.sql(
            'SELECT token, extract(epoch FROM acquired), extract(epoch FROM released) '
            'FROM bench_grants WHERE run = %s' % quote(run_id))]
    return handoff_stats(grants, start, start + seconds)


def handoff_bare(zk, zkbare, clients):
    out = zkbare(zk, 'handoff', BARE_ROOT + '/handoff', clients, CONF['handoff_seconds'])
    lines = out.splitlines()
    start = float(lines[0].split()[1])
    end = float(lines[1].split()[1])
    grants = [(int(t), float(a), float(r)) for t, a, r in (l.split() for l in lines[2:])]
    return handoff_stats(grants, start, end)


def bench_handoff(t):
    t.zkbare(t.zk, 'mkdir', BARE_ROOT + '/handoff')
    variants = [(kind, c) for c in CONF['handoff_clients'] for kind in ('zklock', 'bare')]

    def measure(v, r):
        kind, c = v
        if kind == 'bare':
            return handoff_bare(t.zk, t.zkbare, c)
        return handoff_zklock(t.nodes, c, '%d-%d-%d' % (t.zk.servers, c, r))

    log('  contended handoff: %s backends, %.1f s each, %d rounds'
        % ('/'.join(map(str, CONF['handoff_clients'])), CONF['handoff_seconds'],
           CONF['handoff_rounds']))
    res = t.rounds(CONF['handoff_rounds'], variants, measure)
    out = {}
    for (kind, c), xs in res.items():
        for stat in ('p50', 'p99', 'rate'):
            out['handoff_%s_%d_%s' % (kind, c, stat)] = median([x[stat] for x in xs])
    return out


# ---- 3. many locks ----

def private_dirty_kb(pid):
    with open('/proc/%d/smaps_rollup' % pid) as f:
        return sum(int(line.split()[1]) for line in f
                   if line.startswith('Private_Dirty:'))


def many_locks(zk, zkbare, node, n, run_id, reacquire):
    """One new backend acquires n fresh names, then releases them; the names'
    parents are then pinned (kept from being removed as empty containers)
    and, with reacquire, the names are acquired again with their parents in
    place.  Returns seconds per operation and memory per held lock."""
    prefix = 'many-%s-' % run_id
    s = node.session('bench_many')
    # Warm up: the ZooKeeper session is opened, the functions are planned.
    s.query("SELECT bench_many('acquire', 'many-warm-', 10)")
    s.query("SELECT bench_many('release', 'many-warm-', 10)")
    pid = int(s.value('SELECT pg_backend_pid()'))
    contexts = 'SELECT sum(total_bytes) FROM pg_backend_memory_contexts'
    mem0, ctx0 = private_dirty_kb(pid), int(s.value(contexts))
    acquire = pg_array(s.value("SELECT bench_many('acquire', %s, %d)" % (quote(prefix), n)))
    mem1, ctx1 = private_dirty_kb(pid), int(s.value(contexts))
    token_s, commit_s = (float(x) for x in s.query(
        'CALL bench_local(%s, %d)' % (quote(prefix + '1'), CONF['local_calls']))[0])
    release = pg_array(s.value("SELECT bench_many('release', %s, %d)" % (quote(prefix), n)))
    zkbare(zk, 'pin', '%s/%s' % (ZK_ROOT, prefix), n)
    out = dict(acquire=sum(acquire) / n, release=sum(release) / n,
               growth=acquire[-1] / acquire[0],
               mem=(mem1 - mem0) * 1024 / n, ctx=(ctx1 - ctx0) / n,
               token=token_s, commit=commit_s)
    if reacquire:
        again = pg_array(s.value("SELECT bench_many('acquire', %s, %d)" % (quote(prefix), n)))
        out['reacquire'] = sum(again) / n
    # Ending the session ends its ZooKeeper session: the server drops the
    # nodes still held, in one go.
    s.close()
    return out


def bench_many(t):
    sizes = CONF['many_sizes']
    log('  many locks: %s, %d rounds' % ('/'.join(map(str, sizes)), CONF['many_rounds']))

    def measure(n, r):
        # The largest sizes only in the middle round.
        if n in CONF['many_once'] and r != CONF['many_rounds'] // 2:
            return None
        return many_locks(t.zk, t.zkbare, t.nodes[0], n, '%d-%d' % (n, r),
                          n <= CONF['reacquire_max'])

    res = t.rounds(CONF['many_rounds'], list(sizes), measure)
    out = {}
    for n, xs in res.items():
        xs = [x for x in xs if x]
        for k in ('acquire', 'release', 'reacquire', 'growth', 'mem', 'ctx',
                  'token', 'commit'):
            if k in xs[0]:
                out['many_%s_%d' % (k, n)] = median([x[k] for x in xs])
        out['many_rounds_%d' % n] = len(xs)
    return out


def bench_cluster_view(t):
    """zk_cluster_locks read on node_a while n locks are held, half on each
    node; milliseconds per read (median)."""
    out = {}
    for n in CONF['view_sizes']:
        log('  zk_cluster_locks with %d locks held over two nodes, %d reads'
            % (n, CONF['view_reads']))
        holders = [node.session('bench_view') for node in t.nodes]
        for k, s in enumerate(holders):
            s.value("SELECT bench_many('acquire', %s, %d)" % (quote('view-%d-%d-' % (n, k)), n // 2))
        times = []
        for _ in range(CONF['view_reads']):
            t0 = time.time()
            rows = int(t.nodes[0].value("SELECT count(*) FROM zk_cluster_locks WHERE lock_name LIKE 'view-%%'"))
            times.append((time.time() - t0) * 1000)
            if rows != n:
                raise RuntimeError('zk_cluster_locks listed %d of %d locks' % (rows, n))
        out['view_%d' % n] = median(times)
        for s in holders:
            s.close()
    return out


# ---- 4. many waiters ----

def proc_cpu_seconds(pids):
    """CPU time of the processes so far, all their threads', from the
    scheduler's own count (schedstat).  Not utime and stime of
    /proc/PID/stat: sampled by the clock tick, they lost four fifths of the
    time of 512 backends that each run a few microseconds at a time."""
    ns = 0
    for pid in pids:
        for task in os.listdir('/proc/%d/task' % pid):
            try:
                with open('/proc/%d/task/%s/schedstat' % (pid, task)) as f:
                    ns += int(f.read().split()[0])
            except FileNotFoundError:
                pass    # a thread that just ended
    return ns / 1e9


class MachineClock:
    """The cores' time since it was made: busy and idle seconds.  Idle
    (idle and iowait of /proc/stat) is counted exactly on a tickless
    kernel; busy is the rest of the wall clock's time on every core."""

    @staticmethod
    def _idle():
        with open('/proc/stat') as f:
            v = f.readline().split()[1:]
        return (int(v[3]) + int(v[4])) / os.sysconf('SC_CLK_TCK')

    def __init__(self):
        self.wall0 = time.monotonic()
        self.idle0 = self._idle()

    def read(self):
        idle = self._idle() - self.idle0
        return (time.monotonic() - self.wall0) * os.cpu_count() - idle, idle


def many_waiters(zk, zkbare, nodes, run_id):
    lock = 'queue-%s' % run_id
    parent = '%s/%s' % (ZK_ROOT, lock)
    nwait = CONF['waiters']
    holder = nodes[0].session('bench_holder')
    holder.query('SELECT zk_lock_acquire(%s)' % quote(lock))
    procs = [nodes[i % 2].spawn('SELECT bench_wait(%s, %s)' % (quote(run_id), quote(lock)),
                                'bench_waiter') for i in range(nwait)]
    # Queued: a node each, and the watches: every owner's on its own node,
    # every waiter's on its predecessor.  A PostgreSQL server has one
    # session, and ZooKeeper keeps one watch per session and path: a waiter
    # behind a node of its own server shares the owner's watch.
    def expected(queue):
        exp = {}
        for k, (name, owner) in enumerate(queue):
            exp.setdefault(owner, set()).add('%s/%s' % (parent, name))
            if k >= 1:
                exp[owner].add('%s/%s' % (parent, queue[k - 1][0]))
        return exp

    def watched():
        return {sid: set(p for p in paths if p.startswith(parent + '/'))
                for sid, paths in zk.watches_by_session().items()}

    deadline = time.time() + 60 + nwait
    while True:
        queue = zkbare.queue(zk, parent)
        if len(queue) >= nwait + 1:
            exp = expected(queue)
            got = watched()
            if all(got.get(sid, set()) >= paths for sid, paths in exp.items()):
                break
        if time.time() > deadline or any(p.poll() is not None for p in procs):
            raise RuntimeError('waiters did not queue up')
        time.sleep(0.25)
    pids = [int(p) for n in nodes for (p,) in n.sql(
        "SELECT pid FROM pg_stat_activity WHERE application_name = 'bench_waiter'")]
    if len(pids) != nwait:
        raise RuntimeError('found %d waiting backends, not %d' % (len(pids), nwait))
    cpu0 = proc_cpu_seconds(pids)
    time.sleep(CONF['waiter_cpu_seconds'])
    cpu_ms = (proc_cpu_seconds(pids) - cpu0) * 1000

    # Each waiter's session watches its predecessor, and nothing is watched
    # but the queue's nodes by their owners' and their successors' sessions.
    queue = zkbare.queue(zk, parent)
    exp = expected(queue)
    got = watched()
    on_pred = sum('%s/%s' % (parent, queue[k - 1][0]) in got.get(owner, set())
                  for k, (name, owner) in enumerate(queue) if k >= 1)
    extra = sum(len(paths - exp.get(sid, set())) for sid, paths in got.items())
    # Watches beyond each owner's on its own node, per waiter.
    total = sum(len(paths) for paths in got.values()) - len(queue)

    holder.query('SELECT zk_lock_release(%s)' % quote(lock))
    reap(procs, 120)
    holder.close()
    rows = [(float(g), z.rsplit('-', 1)[1]) for n in nodes for g, z in n.sql(
        'SELECT extract(epoch FROM granted), znode FROM bench_queue WHERE run = %s'
        % quote(run_id))]
    rows.sort()
    seqs = [s for _, s in rows]
    in_order = sum(a == b for a, b in zip(seqs, sorted(seqs)))
    return dict(in_order=in_order, granted=len(rows), on_pred=on_pred, extra=extra,
                per_waiter=total / nwait, cpu_ms=cpu_ms,
                drain=(len(rows) - 1) / (rows[-1][0] - rows[0][0]))


def bench_waiters(t):
    log('  many waiters: %d, %d rounds' % (CONF['waiters'], CONF['waiter_rounds']))
    res = t.rounds(CONF['waiter_rounds'], ['zklock'],
                   lambda v, r: many_waiters(t.zk, t.zkbare, t.nodes, '%d-%d' % (t.zk.servers, r)))
    xs = res['zklock']
    out = {'waiters_' + k: median([x[k] for x in xs]) for k in ('cpu_ms', 'per_waiter', 'drain')}
    # Order and watches must hold in every round: report the worst.
    for k in ('in_order', 'granted', 'on_pred'):
        out['waiters_' + k] = min(x[k] for x in xs)
    out['waiters_extra'] = max(x['extra'] for x in xs)
    return out


def packets_received(zk):
    """Packets the ZooKeeper servers received, all of them together."""
    total = 0
    for port in zk.ports:
        m = re.search(r'^Received: (\d+)', zk.flw(port, 'srvr'), re.M)
        total += int(m.group(1))
    return total


QUEUE_GATE = 4272


def long_queue(t, nwait, deadlock_timeout='1s', seconds=None):
    """nwait backends of one server queued on one lock at deadlock_timeout
    (1 s: the default): ZooKeeper's packets per waiter per second while
    they wait (their deadlock looks), the seconds from the release to the
    last grant, and how many were granted in queue order."""
    run_id = 'queue-%d-%d-%s' % (t.zk.servers, nwait, deadlock_timeout)
    lock = run_id
    parent = '%s/%s' % (ZK_ROOT, lock)
    node = t.nodes[0]
    holder = node.session('bench_holder')
    holder.query('SELECT zk_lock_acquire(%s), pg_advisory_lock(%d)' % (quote(lock), QUEUE_GATE))
    procs = [node.spawn("SET deadlock_timeout = '%s'; SELECT bench_wait(%s, %s, %d)"
                        % (deadlock_timeout, quote(run_id), quote(lock), QUEUE_GATE),
                        'bench_queued') for _ in range(nwait)]
    deadline = time.time() + 60 + nwait / 10
    while len(t.zkbare.queue(t.zk, parent)) < nwait + 1:
        if time.time() > deadline or any(p.poll() is not None for p in procs):
            raise RuntimeError('waiters did not queue up')
        time.sleep(0.25)
    p0, t0 = packets_received(t.zk), time.time()
    time.sleep(seconds or CONF['queue_seconds'])
    rate = (packets_received(t.zk) - p0) / (time.time() - t0) / nwait
    released = float(holder.query('SELECT zk_lock_release(%s), extract(epoch FROM clock_timestamp())'
                                  % quote(lock))[0][-1])
    # Every waiter granted and gone through its release waits at the gate
    # (its grant is not committed yet); then they all end.
    deadline = time.time() + 120 + nwait / 10
    while int(node.value("SELECT count(*) FROM pg_stat_activity WHERE application_name = "
                         "'bench_queued' AND wait_event = 'advisory'")) < nwait:
        if time.time() > deadline or any(p.poll() is not None for p in procs):
            break
        time.sleep(0.2)
    holder.query('SELECT pg_advisory_unlock(%d)' % QUEUE_GATE)
    reap(procs, 120 + nwait / 10)
    holder.close()
    last = float(node.value('SELECT extract(epoch FROM max(granted)) FROM bench_queue '
                            'WHERE run = %s' % quote(run_id)))
    granted = int(node.value('SELECT count(*) FROM bench_queue WHERE run = %s' % quote(run_id)))
    if granted != nwait:
        raise RuntimeError('%d of %d waiters were granted' % (granted, nwait))
    # A node's token (czxid) is its place in the queue.
    in_order = int(node.value(
        'SELECT count(*) FILTER (WHERE by_grant = by_token) FROM '
        '(SELECT row_number() OVER (ORDER BY granted) AS by_grant, '
        '        row_number() OVER (ORDER BY token) AS by_token '
        '   FROM bench_queue WHERE run = %s) q' % quote(run_id)))
    return rate, last - released, in_order


def bench_long_queue(t):
    """Each size at the default deadlock_timeout, then with the detector
    out of the way (60 s): the recipe's own drain, on this machine."""
    out = {}
    for n in CONF['queue_sizes']:
        log('  a queue of %d at the default deadlock_timeout, then at 60 s' % n)
        (out['queue_rate_%d' % n], out['queue_drain_%d' % n],
         out['queue_order_%d' % n]) = long_queue(t, n)
        (out['queue_rate60_%d' % n], out['queue_drain60_%d' % n],
         _) = long_queue(t, n, '60s', 2.0)
    return out


# ---- 5. first use ----

# The pause before each call of the "after a pause" variant: as the first
# call comes after the connection, the later ones come after this.
FIRST_USE_PAUSE_S = 0.1


def bench_first_use(t):
    log('  first use: %d rounds' % CONF['first_use_rounds'])

    def measure(v, r):
        lock = quote('first-use') if v.startswith('zklock') else 'NULL'
        pause = FIRST_USE_PAUSE_S if v.endswith('_pause') else 0
        sql = 'SELECT * FROM bench_first_use(%s, %d, %s)' % (lock, CONF['first_use_later'], pause)
        return [float(x) * 1000 for x in t.nodes[0].sql(sql)[0]]

    variants = ['zklock', 'advisory', 'zklock_pause', 'advisory_pause']
    xs = t.rounds(CONF['first_use_rounds'], variants, measure)
    out = {}
    for v in variants:
        prefix = 'first_' + ('adv_' if v.startswith('advisory') else '') + \
            ('pause_' if v.endswith('_pause') else '')
        for i, k in enumerate(('acquire', 'later')):
            out[prefix + k] = median([x[i] for x in xs[v]])
    return out


# ---- fences ----

FENCE_WRITERS = (1, 16)


def bench_fence(t):
    """What zk_lock_fence adds to an INSERT + COMMIT, one writer and 16
    writers of one resource (no ZooKeeper involved: it is the same in both
    columns, measured again)."""
    node = t.nodes[0]
    node.sql('DROP TABLE IF EXISTS bench_fenced; DROP SEQUENCE IF EXISTS bench_fence_tokens; '
             'CREATE TABLE bench_fenced (id bigserial, v int); '
             'CREATE SEQUENCE bench_fence_tokens; '
             "DELETE FROM zk_lock_fences WHERE resource LIKE 'bench-fence-%'")
    variants = ['%s_%d' % (kind, c) for c in FENCE_WRITERS for kind in ('none', 'equal', 'rising')]
    log('  fences: %s transactions per variant, %d rounds'
        % (CONF['fence_transactions'], CONF['fence_rounds']))

    def measure(v, r):
        kind, c = v.rsplit('_', 1)
        c = int(c)
        return node.pgbench(BENCH / 'pgbench' / ('fence_%s.sql' % kind),
                            max(1, CONF['fence_transactions'] // c), c)

    res = t.rounds(CONF['fence_rounds'], variants, measure)
    node.sql('DROP TABLE bench_fenced; DROP SEQUENCE bench_fence_tokens')
    return {'fence_' + v: median(xs) for v, xs in res.items()}


# ---- 6. release requests ----

def bench_revoke(t):
    """A holder on node_a, asked by a backend of node_b: from the start of
    zk_lock_request_release to the moment the holder's server heard it (the
    release_requested_at it writes back), against zkbare's holder reading
    the request that another session wrote after a sync and a listing."""
    n = CONF['revoke_requests']
    log('  release requests: %d rounds of %d' % (CONF['revoke_rounds'], n))
    bare_parent = BARE_ROOT + '/revoke'
    t.zkbare(t.zk, 'mkdir', bare_parent)
    holder = t.nodes[0].session('bench_revoke_holder')
    asker = t.nodes[1].session('bench_revoke_asker')
    try:
        def measure(v, r):
            if v == 'bare':
                return [float(x) * 1000
                        for x in t.zkbare(t.zk, 'revoke', bare_parent, n).split()]
            ms = []
            for _ in range(n):
                holder.query("SELECT zk_lock_acquire('bench-revoke')")
                ms.append(float(asker.value("SELECT bench_revoke('bench-revoke')")) * 1000)
                holder.query("SELECT zk_lock_release('bench-revoke')")
            return ms

        xs = t.rounds(CONF['revoke_rounds'], ['zklock', 'bare'], measure)
        holder.query("SELECT zk_lock_acquire('bench-revoke')")
        look_us = float(holder.value("SELECT bench_release_requested('bench-revoke', %d)"
                                     % CONF['local_calls'])) * 1e6
        holder.query("SELECT zk_lock_release('bench-revoke')")
    finally:
        holder.close()
        asker.close()
    out = dict(revoke_look_us=look_us)
    for v in ('zklock', 'bare'):
        flat = [x for one in xs[v] for x in one]
        out['revoke_%s' % v] = median(flat)
        out['revoke_%s_p99' % v] = percentile(flat, 99)
    return out


# ---- 7. one session per server ----

def bench_sessions(t):
    """CONF['backends'] backends of node_a hold a lock each (opened through
    dblink, all asking at once): the ZooKeeper sessions that own their nodes,
    node_a's connections to ZooKeeper, and the threads of each backend."""
    n = CONF['backends']
    node = t.nodes[0]
    log('  one session per server: %d backends holding locks' % n)
    # A backend may hold only so many connections of its own (a third of its
    # file descriptors): coordinators of a hundred each.
    per = 100
    coords = [node.session('bench_sessions') for _ in range(0, n, per)]
    conn = 'host=127.0.0.1 port=%d user=postgres dbname=postgres' % node.port
    try:
        for k, s in enumerate(coords):
            s.query("""DO $$ BEGIN
  FOR i IN %d..%d LOOP
    PERFORM dblink_connect('c' || i, %s || ' application_name=bench_s' || i);
    PERFORM dblink_send_query('c' || i, 'SELECT zk_lock_acquire(''bench-s-' || i || ''', 60000)');
  END LOOP;
END $$""" % (k * per + 1, min(n, (k + 1) * per), quote(conn)))
        granted = 0
        for k, s in enumerate(coords):
            granted += int(s.value("""SELECT count(*) FILTER (WHERE r)
  FROM generate_series(%d, %d) AS i,
  LATERAL dblink_get_result('c' || i) AS t(r boolean)""" % (k * per + 1, min(n, (k + 1) * per))))
        owners = t.zk.ephemeral_owners('/bench-s-')
        sid = node.value('SELECT session_id FROM zk_session()').lower()
        conns = 0
        for port in t.zk.ports:
            conns += sum(1 for line in t.zk.flw(port, 'cons').splitlines()
                         if 'sid=%s' % sid in line.lower())
        pids = [int(r[0]) for r in node.sql(
            "SELECT pid FROM pg_stat_activity WHERE application_name LIKE 'bench\\_s%'")]
        threads = max(len(os.listdir('/proc/%d/task' % p)) for p in pids)
    finally:
        # A hundred at a time: a thousand backends releasing at once is a
        # burst of requests on the one session (see the README's limits).
        for s in coords:
            s.close()
            time.sleep(1)
        # Until every one of them has gone.
        deadline = time.time() + 60
        while node.sql("SELECT count(*) FROM pg_stat_activity "
                       "WHERE application_name LIKE 'bench\\_s%'") != [['0']]:
            if time.time() > deadline:
                break
            time.sleep(0.2)
    return dict(sessions_granted=granted, sessions_owners=len(owners),
                sessions_conns=conns, sessions_threads=threads)


# ---- 7b. a burst ----

BURST_GATE = 4271


def bench_burst(t):
    """CONF['burst'] backends of node_a hold a lock each, wait at a gate (an
    advisory lock) and release at the same instant; then acquire new locks
    the same way.  On the durable standalone server with ZooKeeper's default
    limits: the slowest call of each burst, and whether the one session of
    node_a survived."""
    n = CONF['burst']
    node = t.nodes[0]
    log('  a burst: %d backends releasing, then acquiring, at once' % n)
    per = 100
    ranges = [(k + 1, min(n, k + per)) for k in range(0, n, per)]
    coords = [node.session('bench_burst') for _ in ranges]
    conn = 'host=127.0.0.1 port=%d user=postgres dbname=postgres' % node.port
    session0 = node.value('SELECT session_id FROM zk_session()')
    lost0 = int(node.value('SELECT sessions_lost FROM zk_session_stats'))
    gate = node.session('bench_burst_gate')

    def send(expr):
        for s, (lo, hi) in zip(coords, ranges):
            s.query("SELECT count(dblink_send_query('c' || i, %s)) "
                    "FROM generate_series(%d, %d) AS i" % (expr, lo, hi))

    def results():
        xs = []
        for s, (lo, hi) in zip(coords, ranges):
            xs += [float(r[0]) for r in s.query(
                "SELECT r FROM generate_series(%d, %d) AS i, "
                "LATERAL dblink_get_result('c' || i) AS t(r float8)" % (lo, hi))]
            # The empty result that ends each connection's query.
            s.query("SELECT count(*) FROM generate_series(%d, %d) AS i, "
                    "LATERAL dblink_get_result('c' || i) AS t(r float8)" % (lo, hi))
        return xs

    def burst(what, name):
        gate.query('SELECT pg_advisory_lock(%d)' % BURST_GATE)
        step = "SELECT bench_burst_step(''%s'', ''%s-' || i || ''', %d)" % (what, name, BURST_GATE)
        send("'%s'" % step)
        deadline = time.time() + 120
        while int(node.value("SELECT count(*) FROM pg_stat_activity WHERE "
                             "application_name LIKE 'bench\\_b%' "
                             "AND wait_event = 'advisory'")) < n:
            if time.time() > deadline:
                raise RuntimeError('the burst did not gather at its gate')
            time.sleep(0.2)
        gate.query('SELECT pg_advisory_unlock(%d)' % BURST_GATE)
        xs = results()
        if len(xs) != n:
            raise RuntimeError('%s: %d of %d calls answered' % (what, len(xs), n))
        return xs

    try:
        for s, (lo, hi) in zip(coords, ranges):
            s.query("""DO $$ BEGIN
  FOR i IN %d..%d LOOP
    PERFORM dblink_connect('c' || i, %s || ' application_name=bench_b' || i);
    PERFORM * FROM dblink('c' || i, 'SELECT zk_lock_acquire(''bench-burst-' || i || ''', 300000)') AS t(r boolean);
  END LOOP;
END $$""" % (lo, hi, quote(conn)))
        releases = burst('release', 'bench-burst')
        acquires = burst('acquire', 'bench-burst-again')
        session1 = node.value('SELECT session_id FROM zk_session()')
        lost = int(node.value('SELECT sessions_lost FROM zk_session_stats')) - lost0
    finally:
        gate.close()
        for s in coords:
            s.close()
        deadline = time.time() + 120
        while node.sql("SELECT count(*) FROM pg_stat_activity "
                       "WHERE application_name LIKE 'bench\\_b%'") != [['0']]:
            if time.time() > deadline:
                break
            time.sleep(0.2)
    return dict(burst_n=n, burst_release_max=max(releases),
                burst_release_p50=median(releases), burst_acquire_max=max(acquires),
                burst_acquire_p50=median(acquires),
                burst_same_session=int(session0 == session1), burst_lost=lost)


# ---- 7c. flat shared memory ----

def worker_shared_memory(node):
    """(kB of node's session worker's shared mappings that it touched,
    dynamic shared memory segments it maps)."""
    pid = int(node.value('SELECT worker_pid FROM zk_session()'))
    rss, segments, shared = 0, set(), False
    with open('/proc/%d/smaps' % pid) as f:
        for line in f:
            m = re.match(r'[0-9a-f]+-[0-9a-f]+ (\S+) \S+ \S+ \S+\s*(.*)$', line)
            if m:
                shared = m.group(1).endswith('s')
                if m.group(2).startswith('/dev/shm/PostgreSQL.'):
                    segments.add(m.group(2))
            elif shared and line.startswith('Rss:'):
                rss += int(line.split()[1])
    return rss, len(segments)


def settle(node, query, want, seconds):
    """query's value once it is want, or after seconds."""
    deadline = time.time() + seconds
    while True:
        v = node.value(query)
        if v == want or time.time() > deadline:
            return v
        time.sleep(0.2)


def await_value(node, query, want, seconds, what):
    v = settle(node, query, want, seconds)
    if v != want:
        raise RuntimeError('%s: %s is %s, not %s' % (what, query, v, want))


def bench_flat(t):
    """CONF['disconnects'] connections of node_a that each take a session
    lock and leave without releasing it (pgbench -C), then
    CONF['terminations'] backends terminated while their create is in flight
    (ZooKeeper stopped, a hundred at a time): the live records of the
    worker's shared area, the shared memory it touched and its segments,
    before and after."""
    node = t.nodes[0]
    n, nterm, per = CONF['disconnects'], CONF['terminations'], 100
    log('  flat shared memory: %d connections leaving locked, %d terminated'
        % (n, nterm))
    records = "SELECT shared_records FROM zk_session_stats"
    left = ("SELECT count(*) FROM zk_cluster_locks "
            "WHERE lock_name LIKE 'bench-left-%' OR lock_name LIKE 'bench-term-%'")

    def leave_locked(count):
        clients = 4
        run([PGBIN / 'pgbench', '-n', '-C', '-c', clients, '-j', clients,
             '-t', count // clients, '-f', BENCH / 'pgbench' / 'leave_locked.sql',
             '-h', '127.0.0.1', '-p', node.port, '-U', 'postgres', 'postgres'],
            timeout=3600)
        await_value(node, left, '0', 60, 'locks left by the connections')

    leave_locked(300)
    records0 = node.value(records)
    rss0, segments0 = worker_shared_memory(node)
    t0 = time.time()
    leave_locked(n)
    seconds = time.time() - t0
    records1 = settle(node, records, records0, 60)
    rss1, segments1 = worker_shared_memory(node)

    conn = 'host=127.0.0.1 port=%d user=postgres dbname=postgres' % node.port
    for b in range(nterm // per):
        coord = node.session('bench_flat')
        try:
            coord.query("""SELECT count(dblink_connect('c' || i, %s ||
  ' application_name=bench_term' || i)) FROM generate_series(1, %d) AS i"""
                        % (quote(conn), per))
            t.zk.signal(signal.SIGSTOP)
            try:
                coord.query("""SELECT count(dblink_send_query('c' || i,
  'SELECT zk_lock_acquire(''bench-term-%d-' || i || ''')'))
  FROM generate_series(1, %d) AS i""" % (b, per))
                await_value(node, "SELECT count(*) FROM pg_stat_activity WHERE "
                            "application_name LIKE 'bench\\_term%' "
                            "AND wait_event_type = 'Extension'", str(per), 60,
                            'waiting for their creates')
                node.sql("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                         "WHERE application_name LIKE 'bench\\_term%'")
                await_value(node, "SELECT count(*) FROM pg_stat_activity WHERE "
                            "application_name LIKE 'bench\\_term%'", '0', 60,
                            'terminated')
            finally:
                t.zk.signal(signal.SIGCONT)
        finally:
            coord.close()
    node.await_session()
    await_value(node, left, '0', 60, 'locks of the terminated backends')
    records2 = settle(node, records, records0, 60)
    rss2, segments2 = worker_shared_memory(node)
    return dict(flat_n=n, flat_per_s=n / seconds,
                flat_records=(int(records0), int(records1), int(records2)),
                flat_rss=(rss0, rss1, rss2), flat_segments=(segments0, segments1, segments2))


# ---- 8. aggregate throughput ----

def worker_requests(node):
    """Requests node's session worker sent to ZooKeeper so far."""
    return int(node.value('SELECT creates + deletes + children_lists + gets + watches '
                          '+ watch_removals + syncs + sets FROM zk_session_stats'))


def worker_deletes(nodes):
    """Deletes the nodes' session workers sent so far: one per lock cycle (a
    create may be more when a lock's parent was removed meanwhile)."""
    return sum(int(node.value('SELECT deletes FROM zk_session_stats')) for node in nodes)


def bench_throughput(t):
    """N backends over the two nodes, each cycling on a lock of its own, for
    throughput_seconds; against zkbare with N threads on one session.  Both
    share this machine's cores with ZooKeeper, so the CPU each part spends
    per cycle says what bounds the throughput: ZooKeeper, the SQL side
    (backends and pgbench), the session workers, or none (the machine idle).
    The parts, the other processes and the idle time add up to the cores'
    time per cycle."""
    out = {}
    secs = CONF['throughput_seconds']
    for n in CONF['throughput_clients']:
        log('  aggregate throughput: %d clients' % n)
        # pgbench's -T counts its connecting (about 20 ms per connection on
        # a 2-core machine, 5 s for 256, twice that beside an ensemble): the
        # tps it reports leaves that out, so the run is made longer by as
        # much, and by a margin for the CPU's window below to end before the
        # backends do.
        run_s = int(secs + n / 10 + 3)
        spawned = time.time()
        procs = [spawn([PGBIN / 'pgbench', '-n', '-f', BENCH / 'pgbench' / 'throughput.sql',
                        '-T', str(run_s), '-c', str(n // 2), '-j', '4',
                        '-h', '127.0.0.1', '-p', str(node.port), '-U', 'postgres', 'postgres'],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for node in t.nodes]
        # The session workers' CPU and the requests they carried meanwhile.
        workers = [int(node.value('SELECT worker_pid FROM zk_session()')) for node in t.nodes]
        worker_cpu0 = proc_cpu_seconds(workers)
        requests0 = sum(worker_requests(node) for node in t.nodes)
        w0 = time.time()
        # The CPU of every part over throughput_seconds once all backends
        # are connected (they cycle from then on).  Not those of an earlier
        # pgbench that are still exiting.
        backends = []
        deadline = spawned + run_s - 2
        while len(backends) < n and time.time() < deadline:
            time.sleep(0.1)
            backends = [int(pid) for node in t.nodes for (pid,) in node.sql(
                "SELECT pid FROM pg_stat_activity WHERE application_name = 'pgbench' "
                "AND backend_start >= to_timestamp(%f)" % spawned)]
        # Cycles are counted by their deletes: one each.
        window = min(secs, spawned + run_s - 1 - time.time())
        if len(backends) < n or window < 1:
            raise RuntimeError('%d of %d backends connected in %.0f s'
                               % (len(backends), n, time.time() - spawned))
        parts = {'zk': t.zk.pids(), 'sql': backends + [p.pid for p in procs], 'worker': workers}
        cpu0 = {k: proc_cpu_seconds(pids) for k, pids in parts.items()}
        machine = MachineClock()
        deletes0 = worker_deletes(t.nodes)
        time.sleep(window)
        cpu = {k: proc_cpu_seconds(pids) - cpu0[k] for k, pids in parts.items()}
        busy, idle = machine.read()
        cycles = worker_deletes(t.nodes) - deletes0
        cpu['other'] = busy - sum(cpu.values())
        cpu['idle'] = idle
        tps = 0.0
        connecting = 0.0
        for p in procs:
            o, e = p.communicate(timeout=run_s + 120)
            if p.returncode != 0:
                raise RuntimeError('pgbench failed: %s' % e)
            m = re.search(r'tps = ([\d.]+)', o)
            if m is None:
                raise RuntimeError('pgbench printed no tps: %s %s' % (o[-500:], e[-500:]))
            tps += float(m.group(1))
            m = re.search(r'initial connection time = ([\d.]+) ms', o)
            connecting = max(connecting, float(m.group(1)) / 1000 if m else 0.0)
        cpu_s = proc_cpu_seconds(workers) - worker_cpu0
        # The share of a core while the backends cycle (not while they connect).
        wall = time.time() - w0 - connecting
        requests = sum(worker_requests(node) for node in t.nodes) - requests0
        out['tp_worker_us_%d' % n] = cpu_s * 1e6 / max(requests, 1)
        out['tp_worker_core_%d' % n] = cpu_s / len(workers) / wall
        for k, s in cpu.items():
            out['tp_cpu_%s_%d' % (k, n)] = s * 1e6 / max(cycles, 1)
        zk0 = proc_cpu_seconds(t.zk.pids())
        own0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        machine = MachineClock()
        bare = float(t.zkbare(t.zk, 'throughput', BARE_ROOT + '/tp', n, secs,
                              timeout=secs + 120))
        busy, idle = machine.read()
        own = resource.getrusage(resource.RUSAGE_CHILDREN)
        # Over the whole run, its connecting and ending included.
        cpu = {'zk': proc_cpu_seconds(t.zk.pids()) - zk0,
               'client': own.ru_utime + own.ru_stime - own0.ru_utime - own0.ru_stime}
        cpu['other'] = busy - sum(cpu.values())
        cpu['idle'] = idle
        for k, s in cpu.items():
            out['tp_bare_cpu_%s_%d' % (k, n)] = s * 1e6 / (bare * secs)
        out['tp_zklock_%d' % n] = tps
        out['tp_bare_%d' % n] = bare
    return out


# ---- 9. kill -9 of a holder ----

def bench_kill9(t):
    """A holder on node_a, a waiter on node_b; kill -9 of the holder's
    backend (node_a restarts); seconds until the waiter is granted."""
    node_a, node_b = t.nodes
    xs = []
    for r in range(CONF['kill9_rounds']):
        holder = node_a.session('bench_kill9_holder')
        holder.query("SELECT zk_lock_acquire('bench-kill9')")
        pid = int(holder.value('SELECT pg_backend_pid()'))
        waiter = spawn(node_b.psql_cmd('bench_kill9_waiter') + ['-c',
                       "SELECT zk_lock_acquire('bench-kill9'), "
                       "extract(epoch FROM clock_timestamp())"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 30
        while node_b.sql("SELECT count(*) FROM pg_stat_activity WHERE application_name = "
                         "'bench_kill9_waiter' AND wait_event_type = 'Extension'") != [['1']]:
            if time.time() > deadline:
                raise RuntimeError('the kill -9 waiter did not queue')
            time.sleep(0.02)
        t0 = time.time()
        os.kill(pid, signal.SIGKILL)
        o, e = waiter.communicate(timeout=60)
        xs.append(float(o.split('\t')[1]) - t0)
        try:
            holder.close()
        except Exception:
            pass
        node_a.await_session()
        node_b.sql("SELECT 1")
    return {'kill9_s': median(xs)}


# ---- 10. deadlock detection ----

DEADLOCK_TIMEOUT_MS = 100


def deadlock_latency(t, r):
    """Two backends on the two nodes take two locks in opposite orders; the
    one that closes the cycle (and is the victim) reports how long after
    starting its wait it got 40P01.  Returns milliseconds."""
    a, b = ('bench-dl-%d-%d-%s' % (t.zk.servers, r, x) for x in 'ab')
    setup = 'SET deadlock_timeout = %d; ' % DEADLOCK_TIMEOUT_MS
    first = t.nodes[0].spawn(
        setup + 'BEGIN; SELECT zk_lock_xact_acquire(%s); SELECT pg_sleep(0.3); '
        'SELECT zk_lock_xact_acquire(%s); COMMIT;' % (quote(a), quote(b)),
        'bench_dl_first')
    victim = spawn(t.nodes[1].psql_cmd('bench_dl_victim') + ['-c', setup + '''
DO $$
DECLARE
  t0 timestamptz;
BEGIN
  PERFORM zk_lock_xact_acquire(%s);
  PERFORM pg_sleep(0.5);
  t0 := clock_timestamp();
  BEGIN
    PERFORM zk_lock_xact_acquire(%s);
  EXCEPTION WHEN deadlock_detected THEN
    RAISE NOTICE 'detected_ms=%%', extract(epoch FROM clock_timestamp() - t0) * 1000;
  END;
END $$''' % (quote(b), quote(a))], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                   text=True)
    _, err = victim.communicate(timeout=60)
    children.remove(victim)
    reap([first], 60)
    m = re.search(r'detected_ms=([\d.]+)', err)
    if victim.returncode != 0 or not m:
        raise RuntimeError('no deadlock reported: %s' % err.strip())
    return float(m.group(1))


def bench_deadlock(t):
    rounds = CONF['deadlock_rounds']
    log('  deadlock detection: %d rounds' % rounds)
    xs = t.rounds(rounds, ['deadlock'], lambda v, r: deadlock_latency(t, r))['deadlock']
    return {'deadlock_ms': median(xs), 'deadlock_max_ms': max(xs)}


# ---- 11. the commit guard's proof (issue 47) ----

# The section's session timeout T: zklock's default, 10 s.
PROOF_T_MS = 10000
# (a): how long the server is idle before its first acquisition, in T.
PROOF_IDLE_T = 1.2
# (b): a COMMIT this many T after the server's last write (its lock's
# create): 0.1 and 0.3 T, and the steps between, where each rule's last
# COMMIT without a round trip lies (by the rules' bounds about 0.12 T for
# the chain of syncs, 0.2 T for 1.6's; more when requests are answered at
# once).
PROOF_OFFSETS = (0.1, 0.15, 0.2, 0.25, 0.3)
# (d): the write load's threads (on the leader), and the pause between two
# zk_lock_holders; an acquisition is followed by a random pause of up to
# T/10, so that about half the gaps let the worker's chain send a sync
# (T/20 after the last write).
PROOF_LOAD_THREADS = 4
PROOF_READ_MS = 10
# (e): the locks held by the server that holds locks.
PROOF_HELD_LOCKS = 10
# Every run of the section, by label, from which RESULTS.md's section is
# made: a run on one build replaces its own column only.
PROOF_RUNS = BENCH / 'proof-runs.json'
PROOF_HEADING = "## The proof's costs (issue 47)"


class ProofSetup:
    """What the parts share: node_a on a follower, zkbare beside it, the
    leader for the write load, and a backend kept open."""

    def __init__(self, node, follower_port, leader_port, timeout_ms):
        self.node = node
        self.follower_port = follower_port
        self.follower = '127.0.0.1:%d' % follower_port
        self.leader = '127.0.0.1:%d' % leader_port
        self.T = timeout_ms / 1000
        self.session = None

    def query(self, sql):
        """sql's rows in the kept backend, opened anew if a failed
        measurement's recovery ended it."""
        if self.session is None or self.session.proc.poll() is not None:
            self.session = self.node.session('bench_proof')
        return self.session.query(sql)

    def commit(self, lock, pause):
        """bench_proof_commit: (acquire ms, COMMIT ms, the guard's sets)."""
        a, c, n = self.query('CALL bench_proof_commit(%s, %f)' % (quote(lock), pause))[0]
        return float(a), float(c), int(n)

    def bare_hold(self, t, idle, hold):
        """zkbare's hold: (acquire ms, release ms)."""
        a, r = t.zkbare(t.zk, 'hold', BARE_ROOT + '/proof', idle, hold,
                        hosts=self.follower).split()
        return float(a), float(r)


def ratio_range(zs, bs):
    """Each round's zklock time over the bare client's: (min, median, max)."""
    ratios = [z / b for z, b in zip(zs, bs)]
    return (min(ratios), median(ratios), max(ratios))


def proof_idle_first(t, p):
    """(a) The first acquisition + COMMIT of a transaction that writes, on a
    server idle for PROOF_IDLE_T T; the bare client's first acquire +
    release after as long."""
    idle = PROOF_IDLE_T * p.T
    log('  the first acquisition + COMMIT after %.0f s idle, %d rounds'
        % (idle, CONF['proof_idle_rounds']))

    def measure(v, r):
        if v == 'bare':
            return sum(p.bare_hold(t, idle, 0))
        time.sleep(idle)
        return p.commit('proof-idle', 0)

    res = t.rounds(CONF['proof_idle_rounds'], ['zklock', 'bare'], measure)
    z = res['zklock']
    cycles = [a + c for a, c, _ in z]
    return dict(proof_idle_acquire=median([a for a, _, _ in z]),
                proof_idle_commit=median([c for _, c, _ in z]),
                proof_idle_cycle=median(cycles),
                proof_idle_sets=sum(n for _, _, n in z) / len(z),
                proof_idle_bare=median(res['bare']),
                proof_idle_ratios=ratio_range(cycles, res['bare']))


def proof_commit_after_write(t, p):
    """(b) A COMMIT PROOF_OFFSETS T after the lock's create, the server's
    last write; the bare client's release as long after its acquire."""
    log('  a COMMIT %s T after the last write, %d rounds'
        % (' / '.join('%.2f' % f for f in PROOF_OFFSETS), CONF['proof_commit_rounds']))
    variants = [(kind, f) for f in PROOF_OFFSETS for kind in ('zklock', 'bare')]

    def measure(v, r):
        kind, f = v
        if kind == 'bare':
            return p.bare_hold(t, 0, f * p.T)[1]
        return p.commit('proof-commit', f * p.T)

    res = t.rounds(CONF['proof_commit_rounds'], variants, measure)
    out = {}
    for f in PROOF_OFFSETS:
        z, b = res[('zklock', f)], res[('bare', f)]
        key = 'proof_after_%d' % round(f * 100)
        out[key + '_commit'] = median([c for _, c, _ in z])
        out[key + '_sets'] = sum(n for _, _, n in z) / len(z)
        out[key + '_bare'] = median(b)
        out[key + '_ratios'] = ratio_range([c for _, c, _ in z], b)
    return out


def proof_held(t, p):
    """(c) A session lock held while a row is written and committed over and
    over, against the same loop holding no zklock lock."""
    secs = CONF['proof_held_seconds']
    log('  a lock held across transactions: %.0f s, %d rounds'
        % (secs, CONF['proof_held_rounds']))

    def measure(v, r):
        lock = quote('proof-held') if v == 'held' else 'NULL'
        n, elapsed, sets, p99, slowest = p.query(
            'CALL bench_proof_held(%s, %f)' % (lock, secs if v == 'held' else secs / 4))[0]
        return dict(commits=int(n), elapsed=float(elapsed), sets=int(sets),
                    p99=float(p99), max=float(slowest))

    res = t.rounds(CONF['proof_held_rounds'], ['held', 'none'], measure)
    held, none = res['held'], res['none']
    rates = {v: [x['commits'] / x['elapsed'] for x in xs] for v, xs in res.items()}
    commits = sum(x['commits'] for x in held)
    sets = sum(x['sets'] for x in held)
    return dict(proof_held_rate=median(rates['held']), proof_none_rate=median(rates['none']),
                proof_held_ratios=ratio_range(rates['none'], rates['held']),
                proof_held_sets_per_commit=sets / commits,
                proof_held_sets_per_s=sets / sum(x['elapsed'] for x in held),
                proof_held_p99=median([x['p99'] for x in held]),
                proof_held_max=max(x['max'] for x in held),
                proof_none_p99=median([x['p99'] for x in none]))


def proof_paced(t, p):
    """(d) Under write load (PROOF_LOAD_THREADS threads setting a node, on
    the leader): one backend holds a lock and reads its holders every
    PROOF_READ_MS, another acquires and releases a lock, pausing after each
    a random 0 to T/10 ('random': about half the gaps let the worker's
    chain send a sync), or exactly T/20 ('aligned': each acquisition goes
    out a release's round trip after the chain sent a sync, T/20 after the
    last write, the release, was sent);
    the bare client does the same on one session."""
    secs = CONF['proof_paced_seconds']
    pauses = {'random': (0, int(p.T * 100)), 'aligned': (int(p.T * 50), int(p.T * 50))}
    log('  latency under write load: %.0f s, %d rounds' % (secs, CONF['proof_paced_rounds']))

    def measure(v, r):
        impl, pacing = v
        lo, hi = pauses[pacing]
        load = t.zkbare.spawn(p.leader, 'load', BARE_ROOT + '/proof-load',
                              PROOF_LOAD_THREADS, secs + 3)
        time.sleep(1)
        samples = {'holders': [], 'acquire': []}
        if impl == 'bare':
            for line in t.zkbare(t.zk, 'paced', BARE_ROOT + '/proof-held',
                                 BARE_ROOT + '/proof-acq', secs, PROOF_READ_MS,
                                 lo, hi, hosts=p.follower).splitlines():
                kind, ms = line.split()
                samples[kind].append(float(ms))
        else:
            calls = {'holders': ('proof-paced-held', PROOF_READ_MS, 'NULL'),
                     'acquire': ('proof-paced-acq', lo, hi)}
            procs = {k: spawn(p.node.psql_cmd('bench_proof_' + k) + [
                '-c', 'SELECT bench_proof_paced(%s, %s, %f, %d, %s)'
                % (quote(k), quote(lock), secs, lo_ms, hi_ms)],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for k, (lock, lo_ms, hi_ms) in calls.items()}
            for k, proc in procs.items():
                o, e = proc.communicate(timeout=secs + 120)
                children.remove(proc)
                if proc.returncode != 0:
                    raise RuntimeError('bench_proof_%s failed: %s' % (k, e.strip()))
                samples[k] = pg_array(o.strip())
        o, e = load.communicate(timeout=60)
        children.remove(load)
        if load.returncode != 0:
            raise RuntimeError('zkbare load failed: %s' % e.strip())
        samples['load'] = float(o)
        return samples

    variants = [(impl, pacing) for pacing in pauses for impl in ('zklock', 'bare')]
    res = t.rounds(CONF['proof_paced_rounds'], variants, measure)
    out = dict(proof_load=median([x['load'] for xs in res.values() for x in xs]))

    def summary(key, pooled):
        out[key + '_p50'] = percentile(pooled, 50)
        out[key + '_p99'] = percentile(pooled, 99)
        out[key + '_n'] = len(pooled)

    for impl in ('zklock', 'bare'):
        # zk_lock_holders' calls of both pacings together.
        summary('proof_paced_%s_holders' % impl,
                [ms for pacing in pauses for x in res[(impl, pacing)] for ms in x['holders']])
        for pacing in pauses:
            summary('proof_paced_%s_%s_acquire' % (impl, pacing),
                    [ms for x in res[(impl, pacing)] for ms in x['acquire']])
    return out


def proof_rates(t, p, sid):
    """(e) Packets the follower received on the connection of node_a's
    session, idle and holding PROOF_HELD_LOCKS locks, and on a bare
    session's that sends nothing of its own (its library's pings), counted
    by the server per connection ('cons', after 'crst'); and the slowest
    request it answered node_a meanwhile."""
    secs = CONF['proof_rate_seconds']
    log('  requests per second, idle and holding locks: %.0f s each' % secs)

    def window(session_id):
        t.zk.flw(p.follower_port, 'crst')
        time.sleep(secs)
        c = t.zk.connection(p.follower_port, session_id)
        if c is None:
            raise RuntimeError('session %s has no connection to %s' % (session_id, p.follower))
        return c['recved'] / secs, c['maxlat']

    out = {}
    time.sleep(2)
    out['proof_rate_idle'], out['proof_maxlat_idle'] = window(sid)
    holder = p.node.session('bench_proof_holder')
    holder.query("SELECT bench_many('acquire', 'proof-rate-', %d)" % PROOF_HELD_LOCKS)
    time.sleep(2)
    out['proof_rate_holding'], out['proof_maxlat_holding'] = window(sid)
    holder.query("SELECT bench_many('release', 'proof-rate-', %d)" % PROOF_HELD_LOCKS)
    holder.close()
    bare = t.zkbare.spawn(p.follower, 'idle', secs + 4)
    bare_sid = bare.stdout.readline().strip().lower()
    time.sleep(1)
    out['proof_rate_bare'], _ = window(bare_sid)
    reap([bare], 30)
    return out


def bench_proof(work, zkbare, node):
    """The commit guard's proof (issue 47): on a durable 3-server ensemble,
    node_a connected to a follower at T = PROOF_T_MS, what the proof costs:
    (a) the first acquisition + COMMIT on an idle server, (b) a COMMIT
    shortly after the last write, (c) a lock held across transactions,
    (d) latency under write load, (e) ZooKeeper's requests per second.
    Returns (results, failures)."""
    zk = ZooKeeper(work, 3, tag='proof')
    log('== the proof\'s costs (issue 47): %s ZooKeeper' % zk.label)
    t0 = time.time()
    zk.start()
    try:
        modes = {port: zk.mode(port) for port in zk.ports}
        leader = [port for port, m in modes.items() if m == 'leader']
        followers = [port for port, m in modes.items() if m == 'follower']
        if len(leader) != 1 or len(followers) != 2:
            raise RuntimeError('the ensemble has no leader and two followers: %s' % modes)
        node.use_zk(zk, hosts='127.0.0.1:%d' % followers[0],
                    settings='zklock.session_timeout = %d\n' % PROOF_T_MS)
        timeout, server, sid = node.sql('SELECT timeout_ms, server, session_id FROM zk_session()')[0]
        if int(timeout) != PROOF_T_MS:
            raise RuntimeError('the session timeout is %s ms, not %d' % (timeout, PROOF_T_MS))
        sid = sid.lower()
        t = Target(zk, zkbare, [node])
        p = ProofSetup(node, followers[0], leader[0], int(timeout))
        zkbare(zk, 'mkdir', BARE_ROOT + '/proof', hosts=p.follower)
        # A server just started runs its first requests cold.
        zkbare(zk, 'cycle', BARE_ROOT + '/proof', 300, hosts=p.follower)
        node.value("CALL bench_cycles('xact_write', 'proof-warm', 300)")
        stats = 'SELECT reconnects, sessions_lost FROM zk_session_stats'
        reconnects0, lost0 = (int(x) for x in node.sql(stats)[0])
        r = dict(proof_server=server, proof_timeout_ms=int(timeout),
                 proof_zk_version=zk.version)
        r.update(proof_idle_first(t, p))
        r.update(proof_commit_after_write(t, p))
        r.update(proof_held(t, p))
        r.update(proof_paced(t, p))
        r.update(proof_rates(t, p, sid))
        p.session.close()
        reconnects1, lost1 = (int(x) for x in node.sql(stats)[0])
        r['proof_reconnects'] = reconnects1 - reconnects0
        r['proof_sessions_lost'] = lost1 - lost0
        r['proof_same_session'] = node.value('SELECT session_id FROM zk_session()').lower() == sid
        r['proof_minutes'] = (time.time() - t0) / 60
        return r, t.failures
    finally:
        stop_children()
        zk.stop()


# ---- the table ----

def fmt(v, spec):
    return '-' if v is None else format(v, spec)


def row_maker(res):
    """(columns, rows, row): row(label, f) appends (label, {column: f(its
    results) as text, '-' where f finds no figure}) to rows; a header row
    is (label, None)."""
    cols = list(res)
    rows = []

    def row(label, f):
        vals = {}
        for c in cols:
            try:
                vals[c] = f(res[c])
            except (KeyError, TypeError, ZeroDivisionError):
                vals[c] = '-'
        rows.append((label, vals))
    return cols, rows, row


def table_rows(res):
    """(label, {column: text}) rows; a header row has no values."""
    cols, rows, row = row_maker(res)

    def ratio(r, key):
        lo, mid, hi = r['cycle_ratios_' + key]
        return '%.2fx (%.2f-%.2f)' % (mid, lo, hi)

    rows.append(('uncontended acquire+release cycle (cycles/s)', None))
    row('  bare C client (create, list, delete)', lambda r: fmt(r['cycle_bare'], '.0f'))
    for key, label in (('session_plpgsql', 'zklock session lock, PL/pgSQL loop'),
                       ('session_pgbench', 'zklock session lock, pgbench'),
                       ('xact_plpgsql', 'zklock xact lock + COMMIT, PL/pgSQL'),
                       ('xact_pgbench', 'zklock xact lock + COMMIT, pgbench'),
                       ('xact_write_plpgsql', 'zklock xact lock + INSERT + COMMIT, PL/pgSQL'),
                       ('xact_write_pgbench', 'zklock xact lock + INSERT + COMMIT, pgbench')):
        row('  ' + label, lambda r, k=key: fmt(r['cycle_' + k], '.0f'))
        row('    time ratio zklock / bare, median (min-max)', lambda r, k=key: ratio(r, k))
    row('  pg_advisory_lock, PL/pgSQL loop', lambda r: fmt(r['cycle_advisory_plpgsql'], '.0f'))
    row('  pg_advisory_lock, pgbench', lambda r: fmt(r['cycle_advisory_pgbench'], '.0f'))

    rows.append(('contended handoff, N backends on 2 nodes (release -> next holder)', None))
    for c in CONF['handoff_clients']:
        def pair(r, kind, c=c):
            return '%s / %s' % (fmt(r['handoff_%s_%d_p50' % (kind, c)], '.2f'),
                                fmt(r['handoff_%s_%d_p99' % (kind, c)], '.2f'))
        row('  N=%-3d zklock p50 / p99 (ms)' % c, lambda r, c=c: pair(r, 'zklock'))
        row('        bare C p50 / p99 (ms)', lambda r, c=c: pair(r, 'bare'))
        row('        p50 ratio zklock / bare', lambda r, c=c: fmt(
            r['handoff_zklock_%d_p50' % c] / r['handoff_bare_%d_p50' % c], '.2f') + 'x')
        row('        grants/s zklock / bare', lambda r, c=c: '%s / %s' % (
            fmt(r['handoff_zklock_%d_rate' % c], '.0f'), fmt(r['handoff_bare_%d_rate' % c], '.0f')))

    sizes = CONF['many_sizes']
    rows.append(('many locks held by one backend (ms per operation)', None))
    for k, label in (('acquire', 'acquire new name (creates parent)'),
                     ('reacquire', 'acquire again (parent exists)'),
                     ('release', 'release')):
        for n in sizes:
            once = ' (1 round)' if n in CONF['many_once'] else ''
            row('  %s, %s locks%s' % (label, format(n, ','), once),
                lambda r, k=k, n=n: fmt(r['many_%s_%d' % (k, n)] * 1000, '.3f'))
    big = sizes[-1]
    small = sizes[0]
    row('  acquire per op, largest / smallest size', lambda r: fmt(
        r['many_acquire_%d' % big] / r['many_acquire_%d' % small], '.2f') + 'x')
    row('  release per op, largest / smallest size', lambda r: fmt(
        r['many_release_%d' % big] / r['many_release_%d' % small], '.2f') + 'x')
    row('  %s acquires: last tenth / first tenth' % format(big, ','),
        lambda r: fmt(r['many_growth_%d' % big], '.2f') + 'x')
    row('  zk_lock_token(), holding %s / %s locks (us)' % (format(small, ','), format(big, ',')),
        lambda r: '%s / %s' % (fmt(r['many_token_%d' % small] * 1e6, '.1f'),
                               fmt(r['many_token_%d' % big] * 1e6, '.1f')))
    row('  empty COMMIT, holding %s / %s locks (us)' % (format(small, ','), format(big, ',')),
        lambda r: '%s / %s' % (fmt(r['many_commit_%d' % small] * 1e6, '.1f'),
                               fmt(r['many_commit_%d' % big] * 1e6, '.1f')))
    for n in sizes[1:]:
        row('  memory per held lock at %s (bytes)' % format(n, ','),
            lambda r, n=n: fmt(r['many_mem_%d' % n], '.0f'))
        row('    of which memory contexts', lambda r, n=n: fmt(r['many_ctx_%d' % n], '.0f'))

    rows.append(('many waiters: %d backends (%d per node) queued on one lock'
                 % (CONF['waiters'], CONF['waiters'] // 2), None))
    row('  granted in queue order', lambda r: '%d/%d' % (r['waiters_in_order'], CONF['waiters']))
    row('  watches per waiter (one shared with the owner\'s if on its server)',
        lambda r: fmt(r['waiters_per_waiter'], '.2f'))
    row('    waiters whose server watches their predecessor',
        lambda r: '%d/%d' % (r['waiters_on_pred'], CONF['waiters']))
    row('    watches on anything else', lambda r: '%d' % r['waiters_extra'])
    row('  CPU of all waiters in %.0f s of waiting (ms)' % CONF['waiter_cpu_seconds'],
        lambda r: fmt(r['waiters_cpu_ms'], '.1f'))
    row('  queue drain after release (grants/s)', lambda r: fmt(r['waiters_drain'], '.0f'))

    rows.append(('a long queue on one server, deadlock_timeout 1 s (its default)', None))
    for n in CONF['queue_sizes']:
        row('  %s waiters: packets to ZooKeeper per waiter per second while they wait'
            % format(n, ','), lambda r, n=n: fmt(r['queue_rate_%d' % n], '.2f'))
        row('    drain: release to last grant (s)', lambda r, n=n: fmt(r['queue_drain_%d' % n], '.2f'))
        row('    granted in queue order', lambda r, n=n: '%d/%d' % (r['queue_order_%d' % n], n))
        row('    at deadlock_timeout 60 s (no look): packets per waiter per s / drain (s)',
            lambda r, n=n: '%s / %s' % (fmt(r['queue_rate60_%d' % n], '.2f'),
                                        fmt(r['queue_drain60_%d' % n], '.2f')))

    rows.append(('deadlock detection: two backends on two nodes, opposite order', None))
    row('  40P01 after the cycle closed, deadlock_timeout %d ms (median)' % DEADLOCK_TIMEOUT_MS,
        lambda r: fmt(r['deadlock_ms'], '.0f'))
    row('    slowest round', lambda r: fmt(r['deadlock_max_ms'], '.0f'))
    row('    beyond deadlock_timeout (median)',
        lambda r: fmt(r['deadlock_ms'] - DEADLOCK_TIMEOUT_MS, '.0f'))

    rows.append(('zk_cluster_locks, locks held half on each node (ms per read)', None))
    for n in CONF['view_sizes']:
        row('  %s locks' % format(n, ','), lambda r, n=n: fmt(r['view_%d' % n], '.0f'))
        row('    per lock (us)', lambda r, n=n: fmt(r['view_%d' % n] * 1000 / n, '.0f'))

    rows.append(('first use in a new backend (ms)', None))
    row('  first acquire (the server\'s session is open already)', lambda r: fmt(r['first_acquire'], '.2f'))
    row('  later acquire, same backend', lambda r: fmt(r['first_later'], '.2f'))
    row('  first / later', lambda r: fmt(r['first_acquire'] / r['first_later'], '.2f') + 'x')
    row('  pg_advisory_lock in a new backend, first / later (ms)',
        lambda r: '%s / %s' % (fmt(r['first_adv_acquire'], '.2f'), fmt(r['first_adv_later'], '.2f')))
    row('  zklock\'s first acquire beyond a later one, less pg_advisory_lock\'s (ms)',
        lambda r: fmt((r['first_acquire'] - r['first_later'])
                      - (r['first_adv_acquire'] - r['first_adv_later']), '.2f'))
    row('  every acquire after a %d ms pause: first / later (ms)' % (FIRST_USE_PAUSE_S * 1000),
        lambda r: '%s / %s' % (fmt(r['first_pause_acquire'], '.2f'), fmt(r['first_pause_later'], '.2f')))
    row('    first, less pg_advisory_lock\'s first-call extra, / later',
        lambda r: fmt((r['first_pause_acquire']
                       - (r['first_adv_pause_acquire'] - r['first_adv_pause_later']))
                      / r['first_pause_later'], '.2f') + 'x')

    rows.append(('release requests: a holder on node_a asked from node_b (ms)', None))
    row('  zklock: request -> the holder\'s server heard it, p50 / p99',
        lambda r: '%s / %s' % (fmt(r['revoke_zklock'], '.2f'), fmt(r['revoke_zklock_p99'], '.2f')))
    row('  bare C: sync, list, set __REVOKE__ -> the holder read it, p50 / p99',
        lambda r: '%s / %s' % (fmt(r['revoke_bare'], '.2f'), fmt(r['revoke_bare_p99'], '.2f')))
    row('  p50 ratio zklock / bare', lambda r: fmt(r['revoke_zklock'] / r['revoke_bare'], '.2f') + 'x')
    row('  zk_lock_release_requested() in the holder (us per call)',
        lambda r: fmt(r['revoke_look_us'], '.1f'))

    rows.append(('one ZooKeeper session per server: %s backends of node_a holding a lock each'
                 % format(CONF['backends'], ','), None))
    row('  granted', lambda r: '%d/%d' % (r['sessions_granted'], CONF['backends']))
    row('  ZooKeeper sessions owning their nodes', lambda r: '%d' % r['sessions_owners'])
    row('  connections of node_a to ZooKeeper', lambda r: '%d' % r['sessions_conns'])
    row('  threads per backend (most)', lambda r: '%d' % r['sessions_threads'])

    rows.append(('a burst: %d backends of node_a release at once, then acquire at once'
                 % CONF['burst'], None))
    row('  release: median / slowest call (ms)', lambda r: '%s / %s' % (
        fmt(r['burst_release_p50'], '.0f'), fmt(r['burst_release_max'], '.0f')))
    row('  acquire: median / slowest call (ms)', lambda r: '%s / %s' % (
        fmt(r['burst_acquire_p50'], '.0f'), fmt(r['burst_acquire_max'], '.0f')))
    row("  node_a's ZooKeeper session kept / sessions lost", lambda r: '%s / %d' % (
        'yes' if r['burst_same_session'] else 'NO', r['burst_lost']))

    rows.append(('flat shared memory: %s connections of node_a leave holding a lock, then %s '
                 'backends are terminated during a round trip' % (
                     format(CONF['disconnects'], ','), format(CONF['terminations'], ',')), None))
    row("  live records of the worker's shared area: before / after the disconnects / "
        'after the terminations', lambda r: '%d / %d / %d' % r['flat_records'])
    row('  shared memory the worker touched (kB): same three',
        lambda r: '%d / %d / %d' % r['flat_rss'])
    row('  dynamic shared memory segments it maps: same three',
        lambda r: '%d / %d / %d' % r['flat_segments'])
    row('  connections per second (each connects, locks, leaves)',
        lambda r: fmt(r['flat_per_s'], '.0f'))

    rows.append(('aggregate throughput, N backends over 2 nodes, a lock each (cycles/s)', None))
    for n in CONF['throughput_clients']:
        row('  N=%-3d zklock' % n, lambda r, n=n: fmt(r['tp_zklock_%d' % n], '.0f'))
        row('        bare C, N threads on one session', lambda r, n=n: fmt(r['tp_bare_%d' % n], '.0f'))
        row('        time ratio zklock / bare', lambda r, n=n: fmt(
            r['tp_bare_%d' % n] / r['tp_zklock_%d' % n], '.2f') + 'x')
        row('        session worker: CPU per request (us) / share of a core',
            lambda r, n=n: '%s / %s' % (fmt(r['tp_worker_us_%d' % n], '.1f'),
                                        fmt(r['tp_worker_core_%d' % n], '.2f')))
        row('        CPU per cycle (us): ZooKeeper / backends + pgbench / workers / other / idle',
            lambda r, n=n: ' / '.join(fmt(r['tp_cpu_%s_%d' % (k, n)], '.0f')
                                      for k in ('zk', 'sql', 'worker', 'other', 'idle')))
        row('        bare C, CPU per cycle (us): ZooKeeper / its process / other / idle',
            lambda r, n=n: ' / '.join(fmt(r['tp_bare_cpu_%s_%d' % (k, n)], '.0f')
                                      for k in ('zk', 'client', 'other', 'idle')))

    rows.append(('fencing at the resource: INSERT + COMMIT in node_a\'s database (no ZooKeeper)', None))
    for c in FENCE_WRITERS:
        who = '1 writer' if c == 1 else '%d writers of one resource' % c
        row('  %s: tx/s without / equal token / rising token' % who,
            lambda r, c=c: '%s / %s / %s' % tuple(fmt(r['fence_%s_%d' % (k, c)], '.0f')
                                                  for k in ('none', 'equal', 'rising')))
        row('    time ratio fenced / unfenced, equal / rising', lambda r, c=c: '%s / %s' % (
            fmt(r['fence_none_%d' % c] / r['fence_equal_%d' % c], '.2f') + 'x',
            fmt(r['fence_none_%d' % c] / r['fence_rising_%d' % c], '.2f') + 'x'))

    rows.append(('kill -9 of a holder on node_a (the server restarts)', None))
    row('  until the waiter on node_b is granted (s, median)', lambda r: fmt(r['kill9_s'], '.2f'))
    return cols, rows


def proof_rows(res):
    """The proof section's rows: one column per run."""
    cols, rows, row = row_maker(res)

    def ratio(r, key):
        lo, mid, hi = r[key]
        return '%.2fx (%.2f-%.2f)' % (mid, lo, hi)

    def pair(a, b, spec='.2f'):
        return '%s / %s' % (fmt(a, spec), fmt(b, spec))

    rows.append(('(a) the first acquisition + COMMIT on a server idle for %.1f T (ms, median)'
                 % PROOF_IDLE_T, None))
    row('  zklock: zk_lock_xact_acquire / COMMIT (guard, release)',
        lambda r: pair(r['proof_idle_acquire'], r['proof_idle_commit']))
    row('    the two together', lambda r: fmt(r['proof_idle_cycle'], '.2f'))
    row("    the guard's sets per COMMIT", lambda r: fmt(r['proof_idle_sets'], '.2f'))
    row('  bare C: acquire + release after as long idle', lambda r: fmt(r['proof_idle_bare'], '.2f'))
    row('  time ratio zklock / bare, median (min-max)', lambda r: ratio(r, 'proof_idle_ratios'))

    rows.append(("(b) a COMMIT x T after the server's last write (the lock's create), ms, median",
                 None))
    for f in PROOF_OFFSETS:
        key = 'proof_after_%d' % round(f * 100)
        row('  %.2f T: COMMIT (guard, release)' % f, lambda r, k=key: fmt(r[k + '_commit'], '.2f'))
        row("        the guard's sets per COMMIT", lambda r, k=key: fmt(r[k + '_sets'], '.2f'))
        row('        bare C: release as long after the acquire', lambda r, k=key: fmt(r[k + '_bare'], '.2f'))
        row('        time ratio zklock / bare, median (min-max)',
            lambda r, k=key: ratio(r, k + '_ratios'))

    rows.append(('(c) a session lock held while INSERT + COMMIT loops in one backend', None))
    row('  COMMITs/s: lock held / no zklock lock',
        lambda r: pair(r['proof_held_rate'], r['proof_none_rate'], '.0f'))
    row('  time ratio held / none, median (min-max)', lambda r: ratio(r, 'proof_held_ratios'))
    row("  the guard's sets per 1,000 COMMITs / per second",
        lambda r: pair(r['proof_held_sets_per_commit'] * 1000, r['proof_held_sets_per_s']))
    row('  COMMIT p99 / slowest, lock held (ms)', lambda r: pair(r['proof_held_p99'], r['proof_held_max']))
    row('  COMMIT p99, no zklock lock (ms)', lambda r: fmt(r['proof_none_p99'], '.3f'))

    rows.append(('(d) under write load on the leader, node_a on a follower (ms)', None))
    row('  write load (sets/s, %d threads of another session)' % PROOF_LOAD_THREADS,
        lambda r: fmt(r['proof_load'], '.0f'))
    for kind, label in (('random_acquire', 'acquisition, random pauses of 0 to T/10'),
                        ('aligned_acquire', 'acquisition, each T/20 after the release'),
                        ('holders', 'zk_lock_holders(name), every %d ms, both' % PROOF_READ_MS)):
        k = 'proof_paced_%s_' + kind
        row('  %s p50 / p99' % label,
            lambda r, k=k: pair(r[k % 'zklock' + '_p50'], r[k % 'zklock' + '_p99']))
        row('    bare C p50 / p99', lambda r, k=k: pair(r[k % 'bare' + '_p50'], r[k % 'bare' + '_p99']))
        row('    ratio zklock / bare, p50 / p99', lambda r, k=k: '%sx / %sx' % (
            fmt(r[k % 'zklock' + '_p50'] / r[k % 'bare' + '_p50'], '.2f'),
            fmt(r[k % 'zklock' + '_p99'] / r[k % 'bare' + '_p99'], '.2f')))
        row('    calls timed: zklock / bare',
            lambda r, k=k: '%d / %d' % (r[k % 'zklock' + '_n'], r[k % 'bare' + '_n']))

    rows.append(("(e) packets per second the follower receives from node_a's session", None))
    row('  idle', lambda r: fmt(r['proof_rate_idle'], '.2f'))
    row('  holding %d locks' % PROOF_HELD_LOCKS, lambda r: fmt(r['proof_rate_holding'], '.2f'))
    row("  a bare session that sends nothing (its library's pings)",
        lambda r: fmt(r['proof_rate_bare'], '.2f'))
    row("  slowest request the follower answered it: idle / holding (ms)",
        lambda r: '%d / %d' % (r['proof_maxlat_idle'], r['proof_maxlat_holding']))

    rows.append(("node_a's session over the whole section", None))
    row('  reconnects / sessions lost / same session at the end', lambda r: '%d / %d / %s' % (
        r['proof_reconnects'], r['proof_sessions_lost'], 'yes' if r['proof_same_session'] else 'NO'))
    return cols, rows


def proof_section(runs):
    """RESULTS.md's section of the proof's costs, from every run."""
    res = {run['label']: run['results'] for run in runs}
    text = [PROOF_HEADING, '',
            'Produced by `BENCH_ONLY=proof bash bench/run.sh` (or the full run), once per',
            'build; each column is one run, named by `BENCH_PROOF_LABEL`, and',
            '`bench/proof-runs.json` keeps every run\'s figures.', '',
            '```', render_table(res, proof_rows), '```', '']
    text.append('Runs:\n')
    for run in runs:
        text.append('* %s: %s' % (run['label'], '; '.join(
            '%s %s' % (k, v) for k, v in run['facts'])))
        text += ['  * failed and repeated: %s' % f.replace('\n', ' ') for f in run['failures']]
    text.append('''
A durable 3-server ensemble (`zkctl --durable`: tickTime 500 ms, syncLimit
10, fsync on), node_a's `zklock.hosts` one follower only, `zklock.session_timeout`
%(t_ms)d (T = %(t_s).0f s, as negotiated); zkbare's sessions on the same follower, the
write load's on the leader.  The guard's round trip is a set, counted in
`zk_session_stats`' `sets` of the committing backend; the session worker's
own requests (1.6's idle `exists /` every T/6, the chain of `sync`s every
T/20 after the last sync or write) are not counted there, but in (e).

* **(a)**: the server sends nothing of a backend's for %(idle).1f T, then a backend
  (kept open) runs `zk_lock_xact_acquire`, an INSERT and COMMIT, timed in the
  backend (`bench_proof_commit`).  The bare client's yardstick is its own
  first acquire (create, list) + release (delete) on a session idle as long:
  the recipe's part of the same work, so the ratio is what zklock adds,
  guard included.
* **(b)**: the same transaction, its COMMIT x T after its acquisition
  started (the create, the server's last write; the releases before it
  are older).  The COMMIT is the guard, PostgreSQL's commit and the lock's
  release (a delete); the bare client's yardstick is its release as long
  after its acquire, so the ratio is the guard's share.
* **(c)**: `bench_proof_held`: one backend holds a session lock and loops
  INSERT + COMMIT (an unlogged table, so PostgreSQL's own commit is
  cheap); the same loop holding no zklock lock is the yardstick, as no bare
  ZooKeeper client commits anything.  The guard asks for its set only when
  the proof left is under T/3, so what counts is sets per second, which
  does not depend on the rate of COMMITs.
* **(d)**: %(threads)d threads of another session set one node over and over on the
  leader, so proposals are nearly always outstanding and a `sync` waits for
  one to commit.  Meanwhile one backend holds a lock and calls
  `zk_lock_holders` on it every %(read_ms)d ms (a listing and a read of each node),
  another acquires and releases a lock, pausing after each either a random
  0 to T/10 (about half the gaps are long enough for the chain to send a
  sync) or exactly T/20, so that each acquisition goes out a release's
  round trip after the chain sent its sync (T/20 after the release was
  sent), when the sync is most likely still in flight and the follower
  holds the acquisition's answers behind it.  The bare client
  does the same on one session without syncs.  Percentiles pool every
  round's calls (`zk_lock_holders`' of both pacings); with about a hundred
  acquisitions, p99 is the slowest one or two.
* **(e)**: the follower's own count of the packets received on the
  session's connection (`cons`' `recved`, after `crst`), requests and the
  client library's pings alike, over %(rate_s).0f s; and the connection's
  slowest request there (`maxlat`), which would show a sync stalled
  (ZooKeeper 3.8.0's lost wake-up, ZOOKEEPER-4537).  Absolute figures: the
  bare session is the floor, a client that only keeps its session.
* Reconnects and sessions lost are `zk_session_stats`' over the whole
  section, most of it light or idle.
''' % dict(t_ms=PROOF_T_MS, t_s=PROOF_T_MS / 1000, idle=PROOF_IDLE_T,
           threads=PROOF_LOAD_THREADS, read_ms=PROOF_READ_MS,
           rate_s=CONF['proof_rate_seconds']))
    return '\n'.join(text)


def load_proof_runs():
    return json.loads(PROOF_RUNS.read_text()) if PROOF_RUNS.exists() else []


def save_proof_run(run):
    """Keep run's figures in PROOF_RUNS, in place of a run of its label."""
    runs = [r for r in load_proof_runs() if r['label'] != run['label']] + [run]
    PROOF_RUNS.write_text(json.dumps(runs, indent=1) + '\n')
    return runs


def write_proof_section(path, runs):
    """Put the proof's section in RESULTS.md, in place of the one there."""
    text = path.read_text() if path.exists() else '# zklock benchmark results\n\n'
    start = text.find(PROOF_HEADING)
    if start >= 0:
        end = text.find('\n## ', start + len(PROOF_HEADING))
        text = text[:start] + (text[end + 1:] if end >= 0 else '')
    path.write_text(text.rstrip('\n') + '\n\n' + proof_section(runs))


def render_table(res, make_rows=table_rows):
    cols, rows = make_rows(res)
    width = max(len(label) for label, vals in rows if vals is not None) + 2
    cw = 2 + max([len(c) for c in cols] +
                 [len(vals[c]) for _, vals in rows if vals is not None for c in cols])
    lines = [' ' * width + ''.join(c.rjust(cw) for c in cols)]
    for label, vals in rows:
        if vals is None:
            lines.append(label)
        else:
            lines.append(label.ljust(width) + ''.join(vals[c].rjust(cw) for c in cols))
    return '\n'.join(lines)


# ---- machine facts ----

def zklock_build():
    """What zklock build the nodes run, as far as this tree knows."""
    try:
        commit = run(['git', '-C', SRC, 'rev-parse', '--short', 'HEAD']).strip()
    except (RuntimeError, FileNotFoundError):
        commit = '?'
    so = PGBIN.parent / 'lib' / 'zklock.so'
    if os.environ.get('BENCH_BUILT') == '1':
        return 'built and installed from this tree (commit %s)' % commit
    return 'as installed (zklock.so of %s; this tree is at commit %s)' % (
        datetime.fromtimestamp(so.stat().st_mtime, timezone.utc)
        .strftime('%Y-%m-%d %H:%M UTC'), commit)


def package(name):
    """The installed version of a Debian package."""
    try:
        return run(['dpkg-query', '-W', '-f=${Version}', name]).strip()
    except (RuntimeError, FileNotFoundError):
        return '?'


def machine_facts(node, zk_version):
    cpu = 'unknown'
    with open('/proc/cpuinfo') as f:
        for line in f:
            if line.startswith('model name'):
                cpu = line.split(':', 1)[1].strip()
                break
    osname = 'unknown'
    if os.path.exists('/etc/os-release'):
        m = re.search(r'^PRETTY_NAME="?([^"\n]*)', Path('/etc/os-release').read_text(), re.M)
        osname = m.group(1) if m else osname
    header = Path('/usr/include/zookeeper/zookeeper_version.h')
    m = re.search(r'ZOO_VERSION "([^"]+)"', header.read_text()) if header.exists() else None
    mem_kb = int(re.search(r'MemTotal:\s+(\d+)', Path('/proc/meminfo').read_text()).group(1))
    return [
        ('CPU', '%s, %d cores' % (cpu, os.cpu_count())),
        ('memory', '%.1f GiB' % (mem_kb / 1024 / 1024)),
        ('kernel', platform.release()),
        ('OS', osname),
        ('PostgreSQL', node.value('SELECT version()')),
        ('zklock', '%s, %s' % (node.value(
            "SELECT extversion FROM pg_extension WHERE extname = 'zklock'"), zklock_build())),
        ('ZooKeeper server', '%s (Debian zookeeper %s), fsync on; "no fsync" and "ms away" '
         'columns forceSync=no' % (zk_version, package('zookeeper'))),
        ('ZooKeeper C client', '%s (zklock: libzookeeper-st2 %s; zkbare: libzookeeper-mt2 %s)'
         % (m.group(1) if m else '?', package('libzookeeper-st2'), package('libzookeeper-mt2'))),
    ]


def write_results(path, table, facts, started, elapsed, load, failures):
    notes = """\
Every figure is the median of several rounds; each round runs every variant
of its section once, in turn.  ZooKeeper runs on this machine with fsync on
(`zkctl --durable`): a standalone server, and a 3-server ensemble on loopback.
The next two columns ("no fsync") are the same with `forceSync=no`, where a
request costs its round trip rather than the disk's fsync: the uncontended
cycles, and on the standalone server the long queue.  On this machine the
round trip on loopback is short, and the server's own work on a request (its
threads hand it on five times, on the same two cores as everything else)
weighs as much.  The last two columns ("%d ms away") run the cycles again
with `forceSync=no` through test/zk/tcpproxy.py, which hands every reply
from ZooKeeper to the client %d ms late: ZooKeeper on hosts of its own,
where round trips are the cost.  Every server keeps
ZooKeeper's default minute before it removes an empty container, as a lock's
parent is (`zkctl --default-containers`; the tests' servers take a second).
Two PostgreSQL 15 nodes, also local.  The machine is shared: treat small
differences as noise.

* **Uncontended cycle**: one session acquires and releases one lock, over and
  over.  The bare C client (bench/zkbare.c) does the recipe with the same C
  client, one synchronous call at a time: create, list children, delete
  (three round trips; zklock sends the create and the listing together, two).
  Its parent node exists beforehand, as zklock's does after first use.
  PL/pgSQL figures are timed inside the backend; pgbench's are its tps
  (`-t N -c 1`), so they include the round trips between pgbench and
  PostgreSQL.  The time ratio is time per cycle of zklock over the bare
  client's: below 1.00x zklock is faster.
* **Contended handoff**: N backends (half on each node) or N bare client
  threads (one ZooKeeper session each) take turns on one lock for a fixed
  time.  Latency is from the moment a holder starts its release to the moment
  the next holder's acquire returns, paired by fencing token; grants/s counts
  the grants in the window.  With N=1 it is one backend's release plus its
  next acquire.
* **Many locks**: a new backend acquires N distinct locks, then releases them
  one by one.  The names are new, so each acquire also creates the lock's
  parent (a container, in the same round trip).  "Again" acquires the same
  names once more, in the same backend, with their parents in place (kept
  from being removed as empty containers by a child of their own).
  The largest size runs in one round only, and is not acquired again.  While
  the N locks are held, the backend also times calls that need no ZooKeeper
  round trip: `zk_lock_token()` and an empty COMMIT (zklock's commit
  callback runs for every transaction); these show what each call costs per
  lock held.  Memory is the growth of the backend's Private_Dirty
  (smaps_rollup), and of its memory contexts, while it holds the N locks,
  divided by N.
* **Many waiters**: a session holds a lock while waiters, half on each node,
  queue behind it.  Watches are read from every server with `wchc` and
  matched to waiters by the owner of their queue node.  CPU is the run time
  of all waiting backends (schedstat).  Then the holder lets go: the waiters
  must be granted in the order of their queue nodes' sequence numbers.
* **First use**: a new backend's first zklock acquire (the library is
  preloaded and the server's session is the session worker's already: the
  backend takes its slot in shared memory) against its later ones.
* **Deadlock detection**: a backend on one node takes lock a, then waits for
  b; a backend on the other takes b, then (200 ms later) waits for a and so
  closes the cycle, as the victim.  It reports the time from the start of
  that wait to its 40P01: deadlock_timeout (%d ms, set for both), then
  publishing its wait, reading the graph and checking the cycle again.
* **A long queue**: as many backends of node_a as said wait for one lock
  held by another, with `deadlock_timeout` at its default (1 s), so that
  every one of them publishes its wait and looks for a deadlock while it
  waits; the packets all ZooKeeper servers receive (their `srvr` counts) are
  counted for a while once all are queued, per waiter and second; then the
  holder lets go and the drain runs to the last waiter's grant (each one
  releases at once, then waits, still connected, until all are granted, so
  that backends and psql processes ending do not take the drain's CPU).
* **Release requests**: a backend of node_a holds a lock; a backend of
  node_b asks (`zk_lock_request_release`: a sync and the queue's listing,
  pipelined, then the write of `__REVOKE__`), and the time runs from the
  start of that call to the `release_requested_at` that node_a's session
  worker records when it has read the request (its watch on the holder's
  node fired, it read the data again).  The bare client does the same with
  two sessions: the asker syncs, lists the queue and writes the lowest
  node; the holder, watching its own node's data as a revocable Curator
  holder does, reads it again when its watch fires.  The holder takes the
  lock anew for each request.
* **Aggregate throughput**: pgbench cycles a lock of each client's own
  (bench/pgbench/throughput.sql) with N/2 clients on each node; zkbare runs
  N threads on one session.  Everything shares this machine's cores, so the
  CPU each part spends per cycle (every thread's run time from
  /proc/PID/task/*/schedstat, over a window once all backends are
  connected; cycles counted by the workers' deletes) says what bounds it:
  ZooKeeper, the SQL side (backends and pgbench), the session workers, or
  nothing (idle).  Idle is the cores' idle time (/proc/stat), "other" the
  rest of their time (the postmasters, the servers' other processes, the
  kernel's threads and interrupts), so the five add up to the cores' time
  per cycle.  The bare client's figures cover its whole run, connecting
  included (its own CPU from getrusage once it has exited).""" % (LINK_MS, LINK_MS, DEADLOCK_TIMEOUT_MS)
    with open(path, 'w') as f:
        f.write('# zklock benchmark results\n\n')
        f.write('Produced by `bash bench/run.sh`%s on %s, in %.1f minutes.\n\n'
                % (' (BENCH_QUICK=1)' if QUICK else '', started, elapsed / 60))
        f.write('```\n%s\n```\n\n' % table)
        f.write('## Machine\n\n')
        for k, v in facts:
            f.write('* %s: %s\n' % (k, v))
        f.write('* load average (1 min) at start / end: %s\n' % load)
        f.write('* rounds: cycles %(cycle_rounds)d; handoff %(handoff_rounds)d, '
                '%(handoff_seconds).0f s each; many locks %(many_rounds)d; '
                'waiters %(waiter_rounds)d; first use %(first_use_rounds)d; '
                'deadlocks %(deadlock_rounds)d; release requests %(revoke_rounds)d '
                'of %(revoke_requests)d\n\n' % CONF)
        if failures:
            f.write('## Measurements that failed and were repeated\n\n')
            f.write(''.join('* %s\n' % x.replace('\n', ' ') for x in failures) + '\n')
        f.write('## What is measured\n\n%s\n' % notes)


# ---- main ----

def main():
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument('--work', required=True, type=Path)
    ap.add_argument('--zkbare', required=True)
    ap.add_argument('--results', default=BENCH / 'RESULTS.md', type=Path)
    args = ap.parse_args()

    # SIGTERM as well as ^C: stop everything on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    zkbare = Zkbare(args.zkbare)
    nodes = [Node(args.work, name) for name in NODES]
    # BENCH_ONLY=proof: node_a and the proof's own ensemble only.
    if ONLY:
        nodes = nodes[:1]
        zks = []
    else:
        zks = [ZooKeeper(args.work, 1), ZooKeeper(args.work, 3),
               ZooKeeper(args.work, 1, durable=False), ZooKeeper(args.work, 3, durable=False),
               ZooKeeper(args.work, 1, durable=False, link_ms=LINK_MS),
               ZooKeeper(args.work, 3, durable=False, link_ms=LINK_MS)]
    started = datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')
    load0 = os.getloadavg()[0]
    t0 = time.time()
    results = {}
    failures = []
    try:
        log('== starting PostgreSQL nodes')
        for n in nodes:
            n.start()
        for zk in zks:
            log('== %s ZooKeeper' % zk.label)
            zk.start()
            for n in nodes:
                n.use_zk(zk)
            zkbare(zk, 'mkdir', BARE_ROOT)
            t = Target(zk, zkbare, nodes)
            r = {}
            r.update(bench_cycles(t))
            if not zk.durable:
                # Where round trips dominate: the cycle, and the long
                # queue's drain, which on a durable server is its fsyncs.
                if zk.servers == 1 and not zk.link_ms:
                    r.update(bench_long_queue(t))
                failures += t.failures
                results[zk.label] = r
                zk.stop()
                continue
            r.update(bench_first_use(t))
            r.update(bench_handoff(t))
            r.update(bench_waiters(t))
            r.update(bench_long_queue(t))
            r.update(bench_deadlock(t))
            r.update(bench_revoke(t))
            r.update(bench_cluster_view(t))
            r.update(bench_sessions(t))
            if zk.servers == 1:
                r.update(bench_burst(t))
                r.update(bench_flat(t))
            r.update(bench_throughput(t))
            r.update(bench_kill9(t))
            r.update(bench_fence(t))
            # Last: it leaves thousands of lock parents behind.
            r.update(bench_many(t))
            failures += t.failures
            results[zk.label] = r
            zk.stop()
        proof_started = datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')
        proof_load0 = os.getloadavg()[0]
        proof, proof_failures = bench_proof(args.work, zkbare, nodes[0])
        version = nodes[0].value("SELECT extversion FROM pg_extension WHERE extname = 'zklock'")
        pg_version = nodes[0].value('SHOW server_version')
        facts = machine_facts(nodes[0], zks[0].version if zks else proof['proof_zk_version'])
    finally:
        stop_children()
        for zk in zks:
            zk.stop()
        for n in nodes:
            n.stop()

    label = os.environ.get('BENCH_PROOF_LABEL') or '%s, %s' % (version, zklock_build())
    proof_run = dict(label=label, results=proof, failures=proof_failures, facts=[
        ('zklock', '%s, %s' % (version, zklock_build())),
        ('PostgreSQL', '%s from %s' % (pg_version, PGBIN)),
        ('ZooKeeper', '%s (Debian zookeeper %s)' % (proof['proof_zk_version'], package('zookeeper'))),
        ('started', proof_started),
        ('minutes', '%.1f' % proof['proof_minutes']),
        ('load average (1 min) at start / end', '%.2f / %.2f' % (proof_load0, os.getloadavg()[0])),
        ('rounds', '(a) %(proof_idle_rounds)d, (b) %(proof_commit_rounds)d, (c) '
         '%(proof_held_rounds)d of %(proof_held_seconds).0f s, (d) %(proof_paced_rounds)d '
         'of %(proof_paced_seconds).0f s, (e) %(proof_rate_seconds).0f s each' % CONF)])
    print(render_table({label: proof}, proof_rows))
    elapsed = time.time() - t0
    if not ONLY:
        table = render_table(results)
        print(table)
        write_results(args.results, table, facts, started, elapsed,
                      '%.2f / %.2f' % (load0, os.getloadavg()[0]), failures)
    write_proof_section(args.results, save_proof_run(proof_run))
    log('== wrote %s (%.1f minutes)' % (args.results, elapsed / 60))


if __name__ == '__main__':
    main()
