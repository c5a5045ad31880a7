#!/usr/bin/python3
"""A seeded randomized fault run over three PostgreSQL nodes with zklock, a
3-server ZooKeeper ensemble and a fenced resource, with a checker of the
history (issue 43).  Run through test/nemesis.sh, as root; see
docs/testing.md ("The nemesis run").

Exit status: 0 no invariant broke and the run exercised every fault type
and every client kind; 1 a violation or an anomaly; 2 the run could not
exercise what it must (a harness failure).  With --broken (zklock swapped
for per-node advisory locks, no fence): 0 when the checker found the
violations it must, 1 when it did not.
"""
import argparse
import json
import os
import queue
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import nemesis_barriers

HERE = os.path.dirname(os.path.abspath(__file__))
PGBIN = "/usr/lib/postgresql/15/bin"
T_MS = 4000                       # zklock.session_timeout
T = T_MS / 1000.0
TICK_MS = T_MS // 2               # the worst the default minSessionTimeout allows
SYNC_LIMIT = 5                    # a follower's read timeout: SYNC_LIMIT x tickTime
MARGIN = T / 3                    # the guard's promised margin (README)
NOTIFY_HOLD_MAX = 1.0             # a pause before the commit record: < MARGIN
STUCK_S = 60                      # a statement longer than this is an anomaly
ACQ_TIMEOUT_MS = 10000
SEM_PERMITS = 2
CLIENTS_PER_NODE = 3
BARRIER_PARTIES = 3               # one barrier member per node
BARRIER_TIMEOUT_MS = 20000
BARRIER_PLACE = "/zklock/%barriers/"
BARRIER_FINAL = "nb_final"        # the round after the heal
KINDS = {                         # client kind: weight
    "xact": 3, "srel": 2, "smulti": 1, "fence": 2, "shared": 2, "sem": 2,
    "revoke": 2}
# The faults of each lane's round; the guard's own three twice.
FAULTS_NET = ["follower_cut", "follower_cut", "follower_stall", "follower_stall",
              "link_lag", "pg_cut", "zk_kill_leader", "zk_kill_follower"]
FAULTS_PG = ["stop_holder", "stop_worker", "stop_server", "notify_hold",
             "notify_hold", "worker_kill9", "worker_term", "pg_restart",
             "reload_timeout"]
ERR_RE = re.compile(r"\b(ERROR|FATAL|PANIC):\s+([0-9A-Z]{5}):")

stopping = threading.Event()      # clients: finish and stop
halting = threading.Event()       # nemesis: heal now
log_lock = threading.Lock()
anomalies = []
harness_errors = []
t_start = time.time()


def say(msg):
    with log_lock:
        print("[%7.2f] %s" % (time.time() - t_start, msg), flush=True)


def anomaly(msg):
    with log_lock:
        anomalies.append(msg)
    say("ANOMALY: " + msg)


def free_port(taken=set()):
    while True:
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        if port not in taken:
            taken.add(port)
            return port


def as_postgres(*args, **kw):
    return subprocess.run(["runuser", "-u", "postgres", "--"] + list(args),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, **kw)


def signal_pids(pids, sig):
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


# --------------------------------------------------------------- psql
class Dropped(Exception):
    pass


class Stuck(Exception):
    def __init__(self, sql, conn=None):
        super().__init__(sql)
        self.conn = conn

    def where(self):
        """What the stuck statement's psql and its backend were doing."""
        c = self.conn
        if c is None:
            return "?"
        alive = c.p.poll() is None
        said = ["psql %d %s" % (c.p.pid, "running" if alive else "exited %s" % c.p.returncode)]
        if alive:
            try:
                with open("/proc/%d/wchan" % c.p.pid) as f:
                    said.append("in " + f.read().strip())
            except OSError:
                pass
        try:
            said.append("backend %s: %s" % (c.pid, sql_once(
                c.port, "SELECT coalesce(string_agg(format('%%s, wait %%s/%%s, %%s s, %%s', "
                "state, wait_event_type, wait_event, round(extract(epoch FROM now() - "
                "query_start)), left(query, 60)), '; '), 'gone') FROM pg_stat_activity "
                "WHERE pid = %s" % getattr(c, "pid", 0), timeout=10)))
        except Exception as e:
            said.append("backend %s: %s" % (getattr(c, "pid", "?"), e))
        return "; ".join(said)


class SqlError(Exception):
    def __init__(self, state, text):
        super().__init__(text)
        self.state = state


class Psql:
    """One psql process reading statements from a pipe; run() sends some
    and returns their output lines, after markers on stdout and stderr."""

    def __init__(self, port, app, dbname="postgres"):
        env = dict(os.environ, PGAPPNAME=app, PGCONNECT_TIMEOUT="5")
        self.port = port
        self.p = subprocess.Popen(
            ["psql", "-X", "-q", "-A", "-t", "-h", "127.0.0.1", "-p", str(port),
             "-U", "postgres", "-d", dbname, "-v", "VERBOSITY=verbose"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, bufsize=1, env=env)
        self.q = queue.Queue()
        self.n = 0
        self.eof = 0
        for stream, tag in ((self.p.stdout, "o"), (self.p.stderr, "e")):
            threading.Thread(target=self._read, args=(stream, tag),
                             daemon=True).start()
        pid = self.one("SELECT pg_backend_pid()", 10)
        if not pid:
            raise Dropped("no backend pid")
        self.pid = int(pid)

    def _read(self, stream, tag):
        for line in stream:
            self.q.put((tag, line.rstrip("\n")))
        self.q.put((tag, None))

    def run(self, sql, timeout=STUCK_S):
        """Output lines; SqlError on the first ERROR; Dropped if psql ended
        (the connection was lost); Stuck after timeout."""
        self.n += 1
        mark = "@@M%d@@" % self.n
        try:
            self.p.stdin.write("%s;\n\\echo %s\n\\warn %s\n"
                               % (sql.rstrip().rstrip(";"), mark, mark))
            self.p.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            raise Dropped("psql gone")
        out, err, done = [], [], set()
        deadline = time.time() + timeout
        while len(done) < 2:
            left = deadline - time.time()
            try:
                tag, line = self.q.get(timeout=min(max(left, 0.001), 1.0))
            except queue.Empty:
                # A psql that exited (its connection lost) after its output
                # was read in full, before or as this statement was written,
                # answers nothing more: the connection dropped.
                if self.p.poll() is not None and self.q.empty():
                    raise Dropped("psql exited with %s" % self.p.returncode)
                if left <= 0:
                    raise Stuck(sql, self)
                continue
            if line is None:
                self.eof += 1
                if self.eof >= 2:
                    raise Dropped(" ".join(err)[-300:])
                done.add(tag)
                continue
            if line == mark:
                done.add(tag)
            elif tag == "o":
                out.append(line)
            else:
                err.append(line)
        for line in err:
            m = ERR_RE.search(line)
            if m:
                raise SqlError(m.group(2), line)
        return out

    def one(self, sql, timeout=STUCK_S):
        out = self.run(sql, timeout)
        return out[0] if out else None

    def timed(self, fn):
        """SELECT fn -> (its value as text, clock_timestamp() right after
        it returned)."""
        value, at = self.one("SELECT ok, extract(epoch FROM clock_timestamp()) FROM "
                             "(SELECT %s AS ok OFFSET 0) s" % fn).split("|")
        return value, float(at)

    def kill(self):
        """End psql at once (and with it the connection)."""
        try:
            self.p.kill()
            self.p.wait(5)
        except (OSError, subprocess.TimeoutExpired):
            pass

    def close(self):
        try:
            self.p.stdin.close()
        except OSError:
            pass
        try:
            self.p.wait(3)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()


def sql_once(port, sql, dbname="postgres", timeout=30):
    r = subprocess.run(["psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1",
                        "-h", "127.0.0.1", "-p", str(port), "-U", "postgres",
                        "-d", dbname, "-c", sql],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=timeout, env=dict(os.environ, PGCONNECT_TIMEOUT="5"))
    if r.returncode:
        raise RuntimeError("psql -p %d: %s: %s" % (port, sql[:60], r.stderr.strip()))
    return r.stdout.strip()


# --------------------------------------------------------------- ZooKeeper
class Ensemble:
    """Three servers; server i reaches server j (quorum and election ports)
    through the relay (i, j), test/zk/zkrelay.py, so any follower's quorum
    link to any leader can be cut."""

    def __init__(self, base):
        self.dir = base
        self.client = {i: free_port() for i in (1, 2, 3)}
        self.quorum = {i: free_port() for i in (1, 2, 3)}
        self.election = {i: free_port() for i in (1, 2, 3)}
        self.link = {(i, j): (free_port(), free_port())
                     for i in (1, 2, 3) for j in (1, 2, 3) if i != j}
        self.procs = {}
        self.relays = {}
        jars = ["/usr/share/java/slf4j-log4j12.jar", "/usr/share/java/log4j-1.2.jar"]
        self.logging = all(os.path.exists(j) for j in jars)
        self.cp = ":".join(["/etc/zookeeper/conf", "/usr/share/java/zookeeper.jar"]
                           + (jars if self.logging else []))
        for i in (1, 2, 3):
            data = "%s/zk%d" % (base, i)
            os.makedirs(data)
            with open("%s/myid" % data, "w") as f:
                f.write("%d\n" % i)
            lines = ["tickTime=%d" % TICK_MS, "initLimit=10", "syncLimit=%d" % SYNC_LIMIT,
                     "dataDir=" + data, "clientPort=%d" % self.client[i],
                     "clientPortAddress=127.0.0.1", "admin.enableServer=false",
                     "4lw.commands.whitelist=*", "maxClientCnxns=0", "forceSync=no"]
            for j in (1, 2, 3):
                q, e = (self.quorum[j], self.election[j]) if i == j else self.link[(i, j)]
                lines.append("server.%d=127.0.0.1:%d:%d" % (j, q, e))
            with open("%s/zoo%d.cfg" % (base, i), "w") as f:
                f.write("\n".join(lines) + "\n")

    def start_relays(self):
        for (i, j), (q, e) in self.link.items():
            tag = "%d_%d" % (i, j)
            p = subprocess.Popen(
                [sys.executable, HERE + "/zk/zkrelay.py", "--log=%s/relay%s.log" % (self.dir, tag),
                 "--control=%s/relay%s.sock" % (self.dir, tag),
                 "quorum:%d:%d" % (q, self.quorum[j]), "plain:%d:%d" % (e, self.election[j])],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=open("%s/relay%s.err" % (self.dir, tag), "w"), text=True)
            if "ready" not in p.stdout.readline():
                raise RuntimeError("relay %s did not start" % tag)
            self.relays[(i, j)] = p

    def start(self, i):
        log = open("%s/server%d.log" % (self.dir, i), "a")
        self.procs[i] = subprocess.Popen(
            ["java", "-Xmx256m", "-XX:+UseSerialGC",
             "-Dznode.container.checkIntervalMs=1000",
             "-Dzookeeper.log.dir=" + self.dir]
            + (["-Dzookeeper.root.logger=INFO,CONSOLE"] if self.logging else [])
            + ["-cp", self.cp, "org.apache.zookeeper.server.quorum.QuorumPeerMain",
               "%s/zoo%d.cfg" % (self.dir, i)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True)

    def kill9(self, i):
        p = self.procs.pop(i, None)
        if p:
            p.kill()
            p.wait()

    def flw(self, i, cmd):
        try:
            with socket.create_connection(("127.0.0.1", self.client[i]), timeout=2) as s:
                s.sendall(cmd.encode())
                data = b""
                while True:
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                return data.decode(errors="replace")
        except OSError:
            return ""

    def mode(self, i):
        m = re.search(r"^Mode: (\w+)", self.flw(i, "srvr"), re.M)
        return m.group(1) if m else None

    def leader(self, wait=0):
        deadline = time.time() + wait
        while True:
            for i in sorted(self.procs):
                if self.mode(i) == "leader":
                    return i
            if time.time() >= deadline or halting.is_set():
                return None
            time.sleep(0.2)

    def wait_serving(self, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if all(self.mode(i) in ("leader", "follower") for i in (1, 2, 3)):
                return True
            time.sleep(0.2)
        return False

    def relay_cmd(self, i, j, cmd):
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(5)
            s.connect("%s/relay%d_%d.sock" % (self.dir, i, j))
            s.sendall((cmd + "\n").encode())
            return s.makefile().readline().strip()

    def hosts(self):
        return ",".join("127.0.0.1:%d" % self.client[i] for i in (1, 2, 3))

    def stop(self):
        for p in self.procs.values():
            signal_pids([p.pid], signal.SIGCONT)
        for p in list(self.procs.values()) + list(self.relays.values()):
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.procs.clear()
        self.relays.clear()


class Proxy:
    """test/zk/tcpproxy.py --refuse in front of one ZooKeeper server: a
    PostgreSQL node's client link, cut with SIGTTIN."""

    def __init__(self, base, name, target):
        self.port = free_port()
        self.p = subprocess.Popen(
            [sys.executable, HERE + "/zk/tcpproxy.py", "--refuse", "%d:%d" % (self.port, target)],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=open("%s/proxy_%s.err" % (base, name), "w"), text=True)
        if "ready" not in self.p.stdout.readline():
            raise RuntimeError("proxy %s did not start" % name)
        self.lock = threading.Lock()

    def toggle_partition(self):
        with self.lock:
            self.p.send_signal(signal.SIGTTIN)
            if not self.p.stdout.readline().startswith("done TTIN"):
                raise RuntimeError("proxy did not acknowledge")

    def stop(self):
        self.p.terminate()
        self.p.wait()


# --------------------------------------------------------------- PostgreSQL
class PgNode:
    def __init__(self, base, name, settings):
        self.name = name
        self.dir = "%s/%s" % (base, name)
        self.port = free_port()
        self.log = "%s/%s.log" % (base, name)
        r = as_postgres(PGBIN + "/initdb", "-D", self.dir, "-A", "trust", "-U",
                        "postgres", "--no-sync", "-E", "UTF8", "--locale=C")
        if r.returncode:
            raise RuntimeError("initdb %s: %s" % (name, r.stdout))
        conf = {"port": self.port, "listen_addresses": "127.0.0.1",
                "unix_socket_directories": "", "cluster_name": name,
                "max_connections": 40, "shared_buffers": "32MB",
                "track_commit_timestamp": "on", "fsync": "off",
                "log_line_prefix": "%m [%p] %a "}
        conf.update(settings)
        with open(self.dir + "/postgresql.conf", "a") as f:
            for k, v in conf.items():
                f.write("%s = '%s'\n" % (k, v))

    def pg_ctl(self, *args):
        return as_postgres(PGBIN + "/pg_ctl", "-D", self.dir, "-l", self.log, "-w",
                           "-t", "60", *args)

    def start(self):
        r = self.pg_ctl("start")
        if r.returncode:
            raise RuntimeError("start %s: %s" % (self.name, r.stdout))

    def postmaster(self):
        try:
            with open(self.dir + "/postmaster.pid") as f:
                return int(f.readline())
        except (OSError, ValueError):
            return None

    def children(self):
        pm = self.postmaster()
        if not pm:
            return []
        r = subprocess.run(["ps", "-o", "pid=,args=", "--ppid", str(pm)],
                           stdout=subprocess.PIPE, text=True)
        return [(int(line.split(None, 1)[0]), line.split(None, 1)[1])
                for line in r.stdout.splitlines() if line.strip()]

    def worker(self):
        for pid, args in self.children():
            if "zklock session worker" in args:
                return pid
        return None

    def sql(self, sql, dbname="postgres"):
        return sql_once(self.port, sql, dbname)

    def stop(self):
        pm = self.postmaster()
        if pm:
            signal_pids([pm] + [p for p, _ in self.children()], signal.SIGCONT)
        self.pg_ctl("stop", "-m", "immediate")
        if pm:
            try:
                os.kill(pm, 0)
                os.kill(pm, signal.SIGKILL)
            except ProcessLookupError:
                pass


# --------------------------------------------------------------- clients
class Client(threading.Thread):
    def __init__(self, run, node_index, k, seed):
        super().__init__(daemon=True)
        self.run_ = run
        self.node = run.nodes[node_index]
        self.name = "%s_c%d" % (self.node.name, k)
        self.rng = random.Random("%s/%s" % (seed, self.name))
        self.revocable = k % 2 == 0
        self.conn = None
        self.res = None
        self.ops = []
        self.n = 0
        self.holding = None       # backend pid while it holds a lock

    # connections -----------------------------------------------------
    def connect(self):
        while not stopping.is_set():
            try:
                if self.conn is None:
                    self.conn = Psql(self.node.port, self.name)
                    if not self.run_.broken:
                        self.conn.run("SET zklock.revocable = %s"
                                      % ("on" if self.revocable else "off"))
                if self.res is None:
                    self.res = Psql(self.run_.resource.port, self.name + "_res")
                return True
            except Exception:        # not up yet (a restart, a crash)
                self.drop()
                time.sleep(0.5)
        return False

    def drop(self):
        for c in (self.conn, self.res):
            if c:
                c.kill()
        self.conn = self.res = None
        self.holding = None

    def q(self, sql, conn=None):
        return (conn or self.conn).run(sql)

    def quiet(self, sql, conn=None):
        conn = conn or self.conn
        if conn is None:
            return
        try:
            conn.run(sql, 15)
        except (SqlError, Dropped):
            pass
        except Stuck:
            conn.p.kill()     # its late output must not answer a later statement

    # one operation -----------------------------------------------------
    def record(self, kind, t0, result, state=None, **kw):
        rec = dict(op=kw.pop("op"), client=self.name, node=self.node.name,
                   kind=kind, t0=t0, t1=time.time(), result=result, state=state)
        rec.update(kw)
        self.ops.append(rec)
        if state == "40P01":
            anomaly("%s %s got 40P01 (no cycle is possible)" % (self.name, rec["op"]))

    def new_op(self):
        self.n += 1
        return "%s:%d" % (self.name, self.n)

    def acquire(self, fn):
        """SELECT fn -> grant time (clock_timestamp() right after it
        returned) or None when it timed out."""
        ok, at = self.conn.timed(fn)
        if ok != "t":
            return None
        self.holding = self.conn.pid
        return at

    def pause(self):
        return "SELECT pg_sleep(%.3f)" % (self.rng.random() * 0.1)

    def insert(self, op, lock, mode, grant, hold=None):
        return ("INSERT INTO hist VALUES ('%s', '%s', '%s', '%s', %.6f, NULL, %s)"
                % (op, self.name, lock, mode, grant, "'%s'" % hold if hold else "NULL"))

    def commit(self, kind, op, t0, conn=None, **kw):
        """COMMIT and record; a COMMIT whose connection dropped is
        indeterminate."""
        try:
            self.q("COMMIT", conn)
            self.record(kind, t0, "ok", op=op, **kw)
            return True
        except SqlError as e:
            self.record(kind, t0, "fail", e.state, op=op, **kw)
            self.quiet("ROLLBACK", conn)
        except Dropped:
            self.record(kind, t0, "indet", "dropped", op=op, **kw)
            self.drop()
        return False

    def op_xact(self, kind):
        op, t0 = self.new_op(), time.time()
        fn = ("zk_lock_xact_acquire('X', %d)" if kind == "xact"
              else "zk_lock_xact_acquire_shared('X', %d)") % ACQ_TIMEOUT_MS
        self.q("BEGIN")
        grant = self.acquire(fn)
        if grant is None:
            self.quiet("ROLLBACK")
            return self.record(kind, t0, "fail", "timeout", op=op)
        self.q(self.insert(op, "X", "excl" if kind == "xact" else "shared", grant))
        self.q(self.pause() + "; NOTIFY nemesis")
        self.commit(kind, op, t0)
        self.holding = None

    def op_srel(self):
        op, t0 = self.new_op(), time.time()
        self.q("BEGIN")
        grant = self.acquire("zk_lock_acquire('X', %d)" % ACQ_TIMEOUT_MS)
        if grant is None:
            self.quiet("ROLLBACK")
            return self.record("srel", t0, "fail", "timeout", op=op)
        self.q(self.insert(op, "X", "excl", grant))
        self.q(self.pause() + "; NOTIFY nemesis")
        # The section ends at the release: the time taken just before it.
        self.q("UPDATE hist SET release_at = extract(epoch FROM clock_timestamp()) "
               "WHERE op = '%s'" % op)
        self.q("SELECT zk_lock_release('X')")
        self.holding = None
        self.commit("srel", op, t0)

    def op_smulti(self):
        t0 = time.time()
        hold = "%s:h%d" % (self.name, self.n + 1)
        grant = self.acquire("zk_lock_acquire('X', %d)" % ACQ_TIMEOUT_MS)
        if grant is None:
            return self.record("smulti", t0, "fail", "timeout", op=self.new_op())
        try:
            for _ in range(self.rng.randint(2, 3)):
                op, t1 = self.new_op(), time.time()
                try:
                    self.q("BEGIN")
                    self.q(self.insert(op, "X", "excl", grant, hold))
                    self.q(self.pause() + "; NOTIFY nemesis")
                except SqlError as e:
                    self.record("smulti", t1, "fail", e.state, op=op, hold=hold)
                    self.quiet("ROLLBACK")
                    break
                if not self.commit("smulti", op, t1, hold=hold):
                    break
        finally:
            if self.conn:
                self.quiet("SELECT zk_lock_release_all()")
            self.holding = None

    def op_sem(self):
        op, t0 = self.new_op(), time.time()
        grant = self.acquire("zk_semaphore_acquire('S', %d, %d)"
                             % (SEM_PERMITS, ACQ_TIMEOUT_MS))
        if grant is None:
            return self.record("sem", t0, "fail", "timeout", op=op)
        try:
            self.q("BEGIN")
            self.q(self.insert(op, "S", "sem", grant))
            self.q(self.pause())
        except SqlError as e:
            self.record("sem", t0, "fail", e.state, op=op)
            self.quiet("ROLLBACK")
        else:
            self.commit("sem", op, t0)
        if self.conn:
            self.quiet("SELECT zk_semaphore_release('S')")
        self.holding = None

    def op_fence(self):
        op, t0 = self.new_op(), time.time()
        out = self.q("SELECT ok, zk_lock_token('R') FROM "
                     "(SELECT zk_lock_acquire('R', %d) AS ok OFFSET 0) s" % ACQ_TIMEOUT_MS)
        ok, token = out[0].split("|")
        if ok != "t":
            return self.record("fence", t0, "fail", "timeout", op=op)
        self.holding = self.conn.pid
        try:
            self.q("BEGIN", self.res)
            if not self.run_.broken:
                self.q("SELECT zk_lock_fence('R', %s)" % token, self.res)
            v = int(self.q("SELECT v FROM counter WHERE id = 1", self.res)[0])
            # A pause between the read and the write: a lost update shows.
            time.sleep(0.02 + self.rng.random() * 0.15)
            self.q("UPDATE counter SET v = %d WHERE id = 1; INSERT INTO writes VALUES "
                   "('%s', '%s', %s, %d, %d)" % (v + 1, op, self.name, token, v, v + 1),
                   self.res)
        except SqlError as e:
            self.record("fence", t0, "fail", e.state, op=op, token=int(token))
            self.quiet("ROLLBACK", self.res)
        else:
            self.commit("fence", op, t0, self.res, token=int(token))
        if self.conn:
            self.quiet("SELECT zk_lock_release_all()")
        self.holding = None

    def op_revoke(self):
        # Asked from another node than the holder's: a request that only
        # goes through ZooKeeper (none is made while X is held on this node
        # alone, or not at all).
        t0 = time.time()
        n = self.q("SELECT zk_lock_request_release('X') FROM zk_lock_holders('X') h "
                   "WHERE h.holding AND h.cluster_name <> current_setting('cluster_name') "
                   "LIMIT 1")
        if n:
            self.record("revoke", t0, "ok", op=self.new_op(), asked=int(n[0]))

    def run(self):
        kinds, weights = zip(*KINDS.items())
        while not stopping.is_set():
            kind = self.rng.choices(kinds, weights)[0]
            if not self.connect():
                break
            t0 = time.time()
            try:
                if kind in ("xact", "shared"):
                    self.op_xact(kind)
                else:
                    getattr(self, "op_" + kind)()
            except SqlError as e:
                # The error came before the COMMIT: nothing was committed.
                self.record(kind, t0, "fail", e.state, op=self.new_op() + "e")
                time.sleep(0.1)
                self.quiet("ROLLBACK")
                self.quiet("ROLLBACK", self.res)
                if self.conn and kind in ("srel", "smulti", "sem", "fence"):
                    self.quiet("SELECT zk_lock_release_all()")
                self.holding = None
            except Dropped:
                self.record(kind, t0, "fail", "dropped", op=self.new_op() + "e")
                self.drop()
                time.sleep(0.3)
            except Stuck as e:
                anomaly("%s stuck for %d s in: %s (%s)" % (self.name, STUCK_S, str(e)[:80],
                                                            e.where()))
                self.record(kind, t0, "fail", "stuck", op=self.new_op() + "e")
                self.drop()
            except Exception as e:
                harness_errors.append("%s: %r" % (self.name, e))
                say("harness error in %s: %r" % (self.name, e))
                self.record(kind, t0, "fail", "harness", op=self.new_op() + "e")
                self.drop()
                time.sleep(0.5)
        for c in (self.conn, self.res):
            if c:
                c.close()


# --------------------------------------------------------------- barriers
class BarrierRounds:
    """Which barrier the members use: round r's name once every member has
    finished round r - 1.  Only the name is agreed on here; the barrier is
    zklock's, and test/nemesis_barriers.py checks it."""

    def __init__(self, n):
        self.n = n
        self.cv = threading.Condition()
        self.finished = {0: n}
        self.passed = {}
        self.gave_up = {}

    def start(self, r):
        with self.cv:
            while self.finished.get(r - 1, 0) < self.n:
                if stopping.is_set():
                    return False
                self.cv.wait(0.5)
            return True

    def mark(self, what, r):
        with self.cv:
            what[r] = what.get(r, 0) + 1
            self.cv.notify_all()

    def may_enter_again(self, r):
        """Until a member is through or gave up: after that the others
        leave, or wait for nobody."""
        with self.cv:
            return not self.passed.get(r) and not self.gave_up.get(r)


class BarrierMember(threading.Thread):
    """One member per node: each round enters a new barrier for
    BARRIER_PARTIES and leaves it; after an error or a time-out in enter it
    enters again while the round may still pass."""

    def __init__(self, run, node_index, rounds, seed):
        super().__init__(daemon=True)
        self.run_ = run
        self.node = run.nodes[node_index]
        self.name = "%s_b" % self.node.name
        self.rng = random.Random("%s/%s" % (seed, self.name))
        self.rounds = rounds
        self.conn = None
        self.calls = []

    def connect(self, deadline=None):
        while (time.time() < deadline) if deadline else not stopping.is_set():
            try:
                if self.conn is None:
                    self.conn = Psql(self.node.port, self.name)
                return True
            except Exception:
                self.drop()
                time.sleep(0.5)
        return False

    def drop(self):
        if self.conn:
            self.conn.kill()
        self.conn = None

    def record(self, kind, name, t0, t1, result):
        self.calls.append(dict(member=self.name, name=name, kind=kind, t0=t0, t1=t1,
                               result=result))

    def call(self, kind, name, fn):
        """"t", "f", a SQLSTATE, "dropped" or "stuck"."""
        t0 = time.time()
        try:
            result, t1 = self.conn.timed(fn)
        except SqlError as e:
            result, t1 = e.state, time.time()
            if e.state == "55000":
                anomaly("%s: %s of %s: %s" % (self.name, kind, name, e))
        except Dropped:
            result, t1 = "dropped", time.time()
            self.drop()
        except Stuck as e:
            anomaly("%s stuck for %d s in %s of %s (%s)" % (self.name, STUCK_S, kind, name,
                                                           e.where()))
            result, t1 = "stuck", time.time()
            self.drop()
        self.record(kind, name, t0, t1, result)
        return result

    def one_round(self, r, name, deadline=None):
        while True:
            if not self.connect(deadline):
                return self.give_up(r, name)
            if self.call("enter", name, "zk_barrier_enter('%s', %d, %d)"
                         % (name, BARRIER_PARTIES, BARRIER_TIMEOUT_MS)) == "t":
                break
            if deadline or stopping.is_set() or not self.rounds.may_enter_again(r):
                return self.give_up(r, name)
            time.sleep(0.1 + self.rng.random() * 0.2)
        self.rounds.mark(self.rounds.passed, r)
        time.sleep(self.rng.random() * 0.1)
        self.call("leave", name, "zk_barrier_leave('%s', %d)" % (name, BARRIER_TIMEOUT_MS))

    def give_up(self, r, name):
        self.rounds.mark(self.rounds.gave_up, r)
        now = time.time()
        self.record("giveup", name, now, now, "gave up")

    def run(self):
        r = 0
        while not stopping.is_set():
            r += 1
            if not self.rounds.start(r):
                break
            try:
                self.one_round(r, "nb%d" % r)
            except Exception as e:
                harness_errors.append("%s: %r" % (self.name, e))
                say("harness error in %s: %r" % (self.name, e))
                self.drop()
            finally:
                self.rounds.mark(self.rounds.finished, r)
            time.sleep(self.rng.random() * 0.2)


# --------------------------------------------------------------- nemesis
class Nemesis:
    """Two lanes of faults, each a seeded sequence (every type in each
    round, in a shuffled order): at most two faults at once."""

    def __init__(self, run, seed, seconds):
        self.run_ = run
        self.rng = random.Random("%s/nemesis" % seed)
        self.log = []
        self.lanes = []
        for types in (FAULTS_NET, FAULTS_PG):
            lane, t = [], self.rng.uniform(3, 8)
            while t < seconds - 10:
                for kind in self.rng.sample(types, len(types)):
                    f = dict(kind=kind, at=round(t, 1), node=self.rng.randrange(3),
                             which=self.rng.randrange(2),
                             dur=round(self.rng.uniform(T + 1, T + 4), 1))
                    if kind == "notify_hold":
                        f["dur"] = round(self.rng.uniform(0.3, NOTIFY_HOLD_MAX), 2)
                        f["times"] = self.rng.randint(3, 6)
                    if kind in ("zk_kill_leader", "zk_kill_follower"):
                        f["dur"] = round(self.rng.uniform(1, 5), 1)
                    if kind == "follower_stall":
                        # Released a second after dur: all within the
                        # follower's read timeout, so ZooKeeper takes no
                        # notice unless a proposal waits that long.
                        f["dur"] = round(self.rng.uniform(T, TICK_MS * SYNC_LIMIT / 1000.0 - 1), 1)
                        f["dir"] = self.rng.choice(["l>f", "f>l"])
                        f["mark"] = round(self.rng.uniform(0.3, 0.9), 2)
                    if kind == "link_lag":
                        f["dir"] = self.rng.choice(["l>f", "f>l", "both"])
                    lane.append(f)
                    t += f["dur"] + self.rng.uniform(2, 6)
            self.lanes.append([f for f in lane if f["at"] < seconds - 10])

    def schedule_text(self):
        lines = []
        for n, lane in enumerate(self.lanes):
            for f in lane:
                lines.append("lane %d at %6.1f s: %-16s node=%d which=%d dur=%s%s%s" % (
                    n, f["at"], f["kind"], f["node"] + 1, f["which"], f["dur"],
                    " x%d" % f["times"] if "times" in f else "",
                    " %s" % f["dir"] if "dir" in f else ""))
        return "\n".join(lines)

    def start(self):
        self.threads = [threading.Thread(target=self.lane, args=(lane,), daemon=True)
                        for lane in self.lanes]
        for t in self.threads:
            t.start()

    def join(self):
        for t in self.threads:
            t.join(120)

    def wait(self, seconds):
        halting.wait(seconds)

    def lane(self, lane):
        for f in lane:
            while time.time() - self.run_.t0 < f["at"]:
                if halting.wait(0.2):
                    return
            if halting.is_set():
                return
            entry = dict(f, start=time.time())
            say("fault %s node=%d which=%d dur=%s begins" % (
                f["kind"], f["node"] + 1, f["which"], f["dur"]))
            for attempt in range(3):
                try:
                    entry["detail"] = getattr(self, "f_" + f["kind"])(f)
                    entry.pop("error", None)
                    break
                except Exception as e:       # a fault that could not be made
                    entry["error"] = repr(e)
                    say("fault %s failed: %r" % (f["kind"], e))
                    if halting.wait(3):
                        break
            entry["end"] = time.time()
            self.log.append(entry)
            say("fault %s ends (%s)" % (f["kind"], entry.get("detail") or entry.get("error")))

    # each fault returns a short detail; it heals itself before returning
    def f_follower_cut(self, f):
        zk = self.run_.zk
        follower, leader = self.leader_link(f)
        zk.relay_cmd(follower, leader, "cut")
        try:
            self.wait(f["dur"])
        finally:
            zk.relay_cmd(follower, leader, "heal")
        return "server %d cut from leader %d" % (follower, leader)

    def leader_link(self, f):
        """(follower, leader): the follower that f picks, of the leader now."""
        leader = self.run_.zk.leader(15)
        if leader is None:
            raise RuntimeError("no leader")
        return [i for i in (1, 2, 3) if i != leader][f["which"]], leader

    def f_follower_stall(self, f):
        # One direction of the follower's quorum link held, every byte kept
        # in order, then released in two parts: what the relay read before
        # mark x dur, and a second later the rest (issue 47).
        zk = self.run_.zk
        follower, leader = self.leader_link(f)
        d = f["dir"]
        held = zk.relay_cmd(follower, leader, "hold " + d)
        if not held.startswith("ok"):
            raise RuntimeError(held)
        start = float(held.split()[-1])
        parts = []
        try:
            self.wait(f["dur"])
            parts.append(zk.relay_cmd(follower, leader, "release %s before %.6f"
                                      % (d, start + f["mark"] * f["dur"])))
            self.wait(1)
        finally:
            parts.append(zk.relay_cmd(follower, leader, "release %s all" % d))
        sizes = [re.search(r"(\d+) bytes (\d+) frames", p) for p in parts]
        return "server %d's %s stream with leader %d held %.1f s, released in %s" % (
            follower, d, leader, f["dur"], " then ".join(
                "%s frames" % m.group(2) if m else repr(p) for m, p in zip(sizes, parts)))

    def f_link_lag(self, f):
        # The follower's quorum link lagged one way or both, every byte
        # delayed T/2 to 2T, the delay moving at most 0.9 s a second, so
        # the stream never goes silent (issue 47).
        zk = self.run_.zk
        follower, leader = self.leader_link(f)
        dirs = ["l>f", "f>l"] if f["dir"] == "both" else [f["dir"]]
        try:
            for d in dirs:
                answer = zk.relay_cmd(follower, leader, "lag %s %.1f %.1f 0.9 %s/%s" % (
                    d, T / 2, 2 * T, self.run_.seed, f["at"]))
                if not answer.startswith("ok"):
                    raise RuntimeError(answer)
            self.wait(f["dur"])
        finally:
            for d in dirs:
                zk.relay_cmd(follower, leader, "lag %s off" % d)
        return "server %d's %s with leader %d lagged %.1f-%.1f s" % (
            follower, " and ".join(dirs), leader, T / 2, 2 * T)

    def f_pg_cut(self, f):
        proxy = self.run_.proxies[f["node"]]
        proxy.toggle_partition()
        try:
            self.wait(f["dur"])
        finally:
            proxy.toggle_partition()
        return "node%d cut from its server" % (f["node"] + 1)

    def zk_kill(self, f, leader):
        zk = self.run_.zk
        lead = zk.leader(15)
        if lead is None:
            raise RuntimeError("no leader")
        i = lead if leader else [i for i in (1, 2, 3) if i != lead][f["which"]]
        zk.kill9(i)
        self.wait(f["dur"])
        zk.start(i)
        return "server %d killed, restarted" % i

    def f_zk_kill_leader(self, f):
        return self.zk_kill(f, True)

    def f_zk_kill_follower(self, f):
        return self.zk_kill(f, False)

    def stop_for(self, pids, dur):
        self.run_.stopped.update(pids)
        signal_pids(pids, signal.SIGSTOP)
        try:
            self.wait(dur)
        finally:
            signal_pids(pids, signal.SIGCONT)
            self.run_.stopped.difference_update(pids)

    def f_stop_holder(self, f):
        node = self.run_.nodes[f["node"]]
        deadline = time.time() + 10
        while time.time() < deadline:
            holders = [c.holding for c in self.run_.clients
                       if c.node is node and c.holding]
            if holders:
                pid = holders[0]
                self.stop_for([pid], f["dur"])
                return "backend %d of %s (holding)" % (pid, node.name)
            time.sleep(0.05)
        raise RuntimeError("no holder on %s" % node.name)

    def f_stop_worker(self, f):
        node = self.run_.nodes[f["node"]]
        pid = node.worker()
        if not pid:
            raise RuntimeError("no worker on " + node.name)
        self.stop_for([pid], f["dur"])
        return "worker %d of %s" % (pid, node.name)

    def f_stop_server(self, f):
        node = self.run_.nodes[f["node"]]
        pm = node.postmaster()
        pids = [pm] + [p for p, _ in node.children()]
        self.stop_for(pids, f["dur"])
        return "%d processes of %s" % (len(pids), node.name)

    def f_notify_hold(self, f):
        # A session waiting in SyncRep after its NOTIFY holds NOTIFY's lock:
        # every COMMIT with a NOTIFY on that node waits in PreCommit_Notify,
        # after the commit guard and before its commit record.  Each hold
        # lasts until a COMMIT waits, then dur more (polled every 50 ms: a
        # COMMIT waits at most dur + 0.05 s < the margin).
        node = self.run_.nodes[f["node"]]
        done = held = holding = 0
        count = ("SELECT count(*) FILTER (WHERE wait_event = 'object'), "
                 "count(*) FILTER (WHERE pid = %d AND wait_event = 'SyncRep') "
                 "FROM pg_stat_activity")
        for _ in range(f["times"]):
            if halting.is_set():
                break
            h = mon = None
            try:
                mon = Psql(node.port, "nemesis_monitor")
                h = Psql(node.port, "nemesis_notify_hold")
                h.run("SET synchronous_commit = on")
                # A write: a COMMIT that wrote no WAL before its record
                # never waits in SyncRep.
                h.p.stdin.write("BEGIN; INSERT INTO nemesis_hold VALUES (1); "
                                "NOTIFY nemesis_hold; COMMIT;\n")
                h.p.stdin.flush()
                until = time.time() + 5
                while time.time() < until and not halting.is_set():
                    if int(mon.one(count % h.pid, 5).split("|")[0]):
                        break
                    time.sleep(0.05)
                self.wait(f["dur"])
                waiting, syncrep = mon.one(count % h.pid, 5).split("|")
                held += int(waiting)
                holding += int(syncrep)
                mon.run("SELECT pg_cancel_backend(%d)" % h.pid, 5)
                done += 1
            except (Dropped, Stuck, SqlError, RuntimeError, OSError, ValueError,
                    AttributeError):
                pass
            finally:
                # Never leave a holder behind: every NOTIFY of the node would
                # wait for it.
                try:
                    sql_once(node.port, "SELECT pg_cancel_backend(pid) FROM pg_stat_activity "
                             "WHERE application_name = 'nemesis_notify_hold'")
                except (RuntimeError, subprocess.TimeoutExpired):
                    pass
                for c in (h, mon):
                    if c:
                        c.close()
            self.wait(0.5 + done % 3 * 0.4)
        return "%d holds of %.2f s on %s (%d seen in SyncRep), %d COMMITs caught waiting" % (
            done, f["dur"], node.name, holding, held)

    def signal_worker(self, f, sig):
        node = self.run_.nodes[f["node"]]
        pid = node.worker()
        if not pid:
            raise RuntimeError("no worker on " + node.name)
        os.kill(pid, sig)
        return "worker %d of %s" % (pid, node.name)

    def f_worker_kill9(self, f):
        return self.signal_worker(f, signal.SIGKILL) + " (crash restart)"

    def f_worker_term(self, f):
        return self.signal_worker(f, signal.SIGTERM)

    def f_pg_restart(self, f):
        node = self.run_.nodes[f["node"]]
        r = node.pg_ctl("restart", "-m", "immediate")
        if r.returncode:
            raise RuntimeError(r.stdout[-200:])
        return node.name + " restarted (immediate)"

    def f_reload_timeout(self, f):
        node = self.run_.nodes[f["node"]]
        node.sql("ALTER SYSTEM SET zklock.session_timeout = %d" % (T_MS + 2000))
        node.sql("SELECT pg_reload_conf()")
        try:
            self.wait(f["dur"])
        finally:
            node.sql("ALTER SYSTEM RESET zklock.session_timeout")
            node.sql("SELECT pg_reload_conf()")
        return "%s: session_timeout %d, then back" % (node.name, T_MS + 2000)


# --------------------------------------------------------------- the run
BROKEN_SHIMS = r"""
CREATE SEQUENCE tok;
CREATE FUNCTION zk_lock_xact_acquire(n text, t int) RETURNS bool LANGUAGE sql
  AS $$ SELECT pg_advisory_xact_lock(hashtext(n)); SELECT true $$;
CREATE FUNCTION zk_lock_xact_acquire_shared(n text, t int) RETURNS bool LANGUAGE sql
  AS $$ SELECT pg_advisory_xact_lock_shared(hashtext(n)); SELECT true $$;
CREATE FUNCTION zk_lock_acquire(n text, t int) RETURNS bool LANGUAGE sql
  AS $$ SELECT pg_advisory_lock(hashtext(n)); SELECT true $$;
CREATE FUNCTION zk_lock_release(n text) RETURNS bool LANGUAGE sql
  AS $$ SELECT pg_advisory_unlock(hashtext(n)) $$;
CREATE FUNCTION zk_lock_release_all() RETURNS int LANGUAGE sql
  AS $$ SELECT pg_advisory_unlock_all(); SELECT 0 $$;
CREATE FUNCTION zk_lock_token(n text) RETURNS bigint LANGUAGE sql
  AS $$ SELECT nextval('tok') $$;
CREATE FUNCTION zk_lock_request_release(n text) RETURNS int LANGUAGE sql
  AS $$ SELECT 0 $$;
CREATE FUNCTION zk_lock_holders(n text, OUT holding bool, OUT cluster_name text)
  LANGUAGE sql AS $$ SELECT true, 'elsewhere' $$;
CREATE FUNCTION zk_semaphore_acquire(n text, p int, t int) RETURNS bool
LANGUAGE plpgsql AS $$
BEGIN
  LOOP
    FOR s IN 0 .. p - 1 LOOP
      IF pg_try_advisory_lock(hashtext(n), s) THEN
        PERFORM set_config('nemesis.slot', s::text, false);
        RETURN true;
      END IF;
    END LOOP;
    PERFORM pg_sleep(0.01);
  END LOOP;
END $$;
CREATE FUNCTION zk_semaphore_release(n text) RETURNS bool LANGUAGE sql
  AS $$ SELECT pg_advisory_unlock(hashtext(n), current_setting('nemesis.slot')::int) $$;
"""


class Run:
    def __init__(self, args):
        self.args = args
        self.broken = args.broken
        self.seed = args.seed
        self.rng = random.Random("%s/run" % self.seed)
        self.base = tempfile.mkdtemp(prefix="zklock-nemesis.")
        os.chmod(self.base, 0o755)
        shutil.chown(self.base, "postgres", "postgres")
        self.zk = None
        self.proxies = []
        self.nodes = []
        self.resource = None
        self.clients = []
        self.members = []
        self.alive_at = None
        self.stopped = set()
        self.nemesis = None

    def setup(self):
        if not self.broken:
            self.zk = Ensemble(self.base)
            self.zk.start_relays()
            for i in (1, 2, 3):
                self.zk.start(i)
            if not self.zk.wait_serving():
                raise RuntimeError("the ensemble did not form; see " + self.base)
            say("ensemble up: leader %s, tickTime %d" % (self.zk.leader(), TICK_MS))
            self.proxies = [Proxy(self.base, "node%d" % i, self.zk.client[i]) for i in (1, 2, 3)]
        for i in (1, 2, 3):
            settings = {} if self.broken else {
                "shared_preload_libraries": "zklock",
                "zklock.hosts": "127.0.0.1:%d" % self.proxies[i - 1].port,
                "zklock.session_timeout": T_MS,
                "synchronous_standby_names": "nemesis_nobody",
                "synchronous_commit": "local"}
            self.nodes.append(PgNode(self.base, "node%d" % i, settings))
        self.resource = PgNode(self.base, "resource", {})
        for n in self.nodes + [self.resource]:
            n.start()
        for n in self.nodes:
            n.sql(BROKEN_SHIMS if self.broken else "CREATE EXTENSION zklock")
            n.sql("CREATE TABLE hist (op text PRIMARY KEY, client text, lock text, "
                  "mode text, grant_at float8, release_at float8, hold text); "
                  "CREATE TABLE nemesis_hold (i int)")
        if not self.broken:
            self.resource.sql("CREATE EXTENSION zklock")
        self.resource.sql("CREATE TABLE counter (id int PRIMARY KEY, v bigint); "
                          "INSERT INTO counter VALUES (1, 0); "
                          "CREATE TABLE writes (op text PRIMARY KEY, client text, "
                          "token bigint, read_v bigint, new_v bigint)")
        if not self.broken and not self.sessions_back(30):
            raise RuntimeError("a node has no ZooKeeper session")
        say("3 nodes and the resource up in %s" % self.base)

    def sessions_back(self, timeout):
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                if all(n.sql("SELECT count(*) FROM zk_session() WHERE state = 'connected'")
                       == "1" for n in self.nodes):
                    return True
            except (RuntimeError, subprocess.TimeoutExpired):
                pass
            time.sleep(0.5)
        return False

    def go(self):
        seconds = self.args.seconds
        if not self.broken:
            self.nemesis = Nemesis(self, self.seed, seconds)
            say("schedule:\n" + self.nemesis.schedule_text())
        self.clients = [Client(self, n, k, self.seed)
                        for n in range(3) for k in range(CLIENTS_PER_NODE)]
        if not self.broken:
            rounds = BarrierRounds(BARRIER_PARTIES)
            self.members = [BarrierMember(self, n, rounds, self.seed) for n in range(3)]
        self.t0 = time.time()
        for c in self.clients + self.members:
            c.start()
        if self.nemesis:
            self.nemesis.start()
        while time.time() - self.t0 < seconds:
            time.sleep(0.5)
        say("time is up: healing")
        halting.set()
        if self.nemesis:
            self.nemesis.join()
        signal_pids(list(self.stopped), signal.SIGCONT)
        if self.zk:
            for i in (1, 2, 3):
                if i not in self.zk.procs:
                    self.zk.start(i)
        self.t_heal = time.time()
        # The clients go on until every node has its session again: the
        # barrier members' waits from then on are bounded (nemesis_barriers).
        if not self.broken:
            if self.sessions_back(2 * T + 20):
                self.alive_at = time.time()
                say("every node has its session again, %.1f s after the heal"
                    % (self.alive_at - self.t_heal))
            else:
                anomaly("a node's ZooKeeper session did not come back after the heal")
            time.sleep(2 * T)
        stopping.set()
        for c in self.clients + self.members:
            c.join(STUCK_S + 30)
            if c.is_alive():
                anomaly("client %s did not stop" % c.name)
        say("clients stopped")

    def barrier_final_round(self):
        """Every member through one more barrier, after the heal."""
        deadline = time.time() + 30
        threads = [threading.Thread(target=m.one_round, args=(0, BARRIER_FINAL, deadline))
                   for m in self.members]
        for t in threads:
            t.start()
        for t in threads:
            t.join(STUCK_S + 30)
        for m in self.members:
            if m.conn:
                m.conn.close()
                m.conn = None

    def after_heal(self):
        """Anomalies after the heal: nodes left in ZooKeeper two session
        timeouts after it; the barriers' final round."""
        if self.broken:
            return
        self.barrier_final_round()
        deadline = self.t_heal + 2 * T + 5
        while True:
            r = subprocess.run([sys.executable, HERE + "/zk/zktree.py", self.zk.hosts(), "/zklock"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            left = [line for line in r.stdout.splitlines()
                    if "\t" in line and line.split("\t")[1] != "0x0"]
            if r.returncode == 0 and not left:
                break
            if time.time() > deadline:
                anomaly("nodes left in ZooKeeper %.0f s after the heal: %s"
                        % (time.time() - self.t_heal, left[:5] or r.stdout[-200:]))
                break
            time.sleep(1)

    def teardown(self):
        signal_pids(list(self.stopped), signal.SIGCONT)
        for c in self.clients + self.members:
            c.drop()
        for n in self.nodes + ([self.resource] if self.resource else []):
            try:
                n.stop()
            except Exception as e:
                say("stopping %s: %r" % (n.name, e))
        for p in self.proxies:
            p.stop()
        if self.zk:
            self.zk.stop()


# --------------------------------------------------------------- checker
def overlaps(sections, limit=1):
    """Pairs (a, b) of sections [start, end] that overlap, a starting first;
    with limit > 1 the instants where more than limit are open."""
    out = []
    ss = sorted(sections, key=lambda s: s["start"])
    for i, a in enumerate(ss):
        for b in ss[i + 1:]:
            if b["start"] >= a["end"]:
                break
            out.append((a, b))
    return out


def check(run):
    """Violations, facts (indeterminate commits and so on) and the rows."""
    violations, notes = [], []
    rows = {}
    for n in run.nodes:
        out = n.sql("SELECT op, client, lock, mode, grant_at, coalesce(release_at, -1), "
                    "coalesce(hold, ''), extract(epoch FROM pg_xact_commit_timestamp(xmin)) "
                    "FROM hist")
        for line in out.splitlines():
            op, client, lock, mode, grant, rel, hold, commit = line.split("|")
            rows[op] = dict(op=op, client=client, node=n.name, lock=lock, mode=mode,
                            grant=float(grant), release=float(rel), hold=hold,
                            commit=float(commit) if commit else None)
    writes = {}
    for line in run.resource.sql(
            "SELECT op, client, token, read_v, new_v, "
            "extract(epoch FROM pg_xact_commit_timestamp(xmin)) FROM writes").splitlines():
        op, client, token, read_v, new_v, commit = line.split("|")
        writes[op] = dict(op=op, client=client, token=int(token), read_v=int(read_v),
                          new_v=int(new_v), commit=float(commit))
    counter = int(run.resource.sql("SELECT v FROM counter WHERE id = 1"))
    ops = [o for c in run.clients for o in c.ops]

    # acknowledged commits are there, failed ones are not
    indet = {"found": 0, "absent": 0}
    for o in ops:
        if o["kind"] == "revoke":
            continue
        present = o["op"] in (writes if o["kind"] == "fence" else rows)
        if o["result"] == "ok" and not present:
            violations.append("acknowledged commit %s (%s) is not in the database"
                              % (o["op"], o["kind"]))
        elif o["result"] == "fail" and present:
            violations.append("failed %s (%s, %s) is in the database"
                              % (o["op"], o["kind"], o["state"]))
        elif o["result"] == "indet":
            indet["found" if present else "absent"] += 1
    notes.append("indeterminate COMMITs (connection dropped): %d found committed, %d not"
                 % (indet["found"], indet["absent"]))

    # critical sections of X: exclusive ones never overlap each other nor a
    # shared one
    sections, holds = [], {}
    for r in rows.values():
        if r["lock"] != "X":
            continue
        if r["hold"]:
            h = holds.setdefault(r["hold"], dict(start=r["grant"], end=r["commit"],
                                                 node=r["node"], op=r["hold"],
                                                 mode="excl", kind="smulti"))
            h["end"] = max(h["end"], r["commit"])
            continue
        end = r["release"] if r["release"] >= 0 else r["commit"]
        sections.append(dict(start=r["grant"], end=end, node=r["node"], op=r["op"],
                             mode=r["mode"], kind="srel" if r["release"] >= 0 else r["mode"]))
    sections += holds.values()
    stops = [f for f in (run.nemesis.log if run.nemesis else [])
             if f["kind"] in ("stop_server", "stop_holder")]
    expected = []
    for a, b in overlaps(sections):
        if a["mode"] == "shared" and b["mode"] == "shared":
            continue
        late = a if a["end"] > b["start"] else b
        # The README's limit: a stop longer than the margin between the
        # guard and the commit record of the section that ended late.
        limit = [f for f in stops if "node%d" % (f["node"] + 1) == late["node"]
                 and f["start"] > late["start"] and f["end"] - 0.05 <= late["end"] <= f["end"] + 1]
        text = ("lock X: %s %s on %s [%.3f, %.3f] overlaps %s %s on %s [%.3f, %.3f] by %.3f s"
                % (a["kind"], a["op"], a["node"], a["start"] - run.t0, a["end"] - run.t0,
                   b["kind"], b["op"], b["node"], b["start"] - run.t0, b["end"] - run.t0,
                   min(a["end"], b["end"]) - b["start"]))
        (expected if limit else violations).append(text)
    if expected:
        notes.append("%d overlaps within a stop longer than the margin (the README's "
                     "documented limit): %s" % (len(expected), "; ".join(expected[:5])))

    # semaphore: at most SEM_PERMITS at once
    events = []
    for r in rows.values():
        if r["lock"] == "S":
            events += [(r["grant"], 1, r["op"]), (r["commit"], -1, r["op"])]
    open_now, worst = set(), 0
    for at, d, op in sorted(events, key=lambda e: (e[0], e[1])):
        if d > 0:
            open_now.add(op)
            if len(open_now) > SEM_PERMITS:
                worst += 1
                if worst <= 5:
                    violations.append("semaphore S: %d holders at %.3f: %s"
                                      % (len(open_now), at - run.t0, sorted(open_now)))
        else:
            open_now.discard(op)
    if worst > 5:
        violations.append("semaphore S: %d more instants over %d holders" % (worst - 5, SEM_PERMITS))

    # the resource: counter = committed writes, each read its predecessor,
    # tokens never decrease in commit order
    if counter != len(writes):
        violations.append("resource: counter is %d after %d committed writes (lost updates)"
                          % (counter, len(writes)))
    by_value = sorted(writes.values(), key=lambda w: w["new_v"])
    bad = [w for k, w in enumerate(by_value) if w["read_v"] != k or w["new_v"] != k + 1]
    if bad:
        violations.append("resource: %d writes did not read their predecessor's value "
                          "(first: %s read %d, wrote %d)"
                          % (len(bad), bad[0]["op"], bad[0]["read_v"], bad[0]["new_v"]))
    by_commit = sorted(writes.values(), key=lambda w: (w["commit"], w["new_v"]))
    drops = [(p, w) for p, w in zip(by_commit, by_commit[1:]) if w["token"] < p["token"]]
    if drops and not run.broken:
        p, w = drops[0]
        violations.append("resource: %d fence tokens decreased in commit order (first: %s "
                          "token %d after %s token %d)" % (len(drops), w["op"], w["token"],
                                                           p["op"], p["token"]))
    return violations, notes, ops


def check_barriers(run, violations, notes):
    """The barrier members' calls against the servers' transaction logs
    (test/nemesis_barriers.py); the checker's self-test first."""
    if run.broken:
        return []
    nemesis_barriers.self_test()
    sys.path.insert(0, HERE + "/zk")
    import zktxnlog
    txns = zktxnlog.committed(["%s/zk%d" % (run.base, i) for i in (1, 2, 3)])
    calls = [c for m in run.members for c in m.calls]
    v, facts = nemesis_barriers.check(txns, calls, BARRIER_PLACE, BARRIER_PARTIES, T,
                                      run.alive_at or float("inf"), BARRIER_FINAL)
    violations += v
    notes += ["barriers: " + f for f in facts]
    return calls


def summary(run, violations, notes, ops):
    say("== summary (seed %s, %d s%s)" % (run.seed, run.args.seconds,
                                          ", --broken" if run.broken else ""))
    faults = run.nemesis.log if run.nemesis else []
    intervals = [(f["start"], f["end"]) for f in faults if "error" not in f]
    during = {}
    print("%-7s %9s %9s %6s  failed by SQLSTATE" % ("kind", "attempted", "committed", "indet"))
    committed = {}
    for kind in KINDS:
        mine = [o for o in ops if o["kind"] == kind]
        ok = [o for o in mine if o["result"] == "ok"]
        committed[kind] = len(ok)
        during[kind] = sum(1 for o in ok if any(s <= o["t1"] and o["t0"] <= e
                                                for s, e in intervals))
        fails = {}
        for o in mine:
            if o["result"] == "fail":
                fails[o["state"]] = fails.get(o["state"], 0) + 1
        print("%-7s %9d %9d %6d  %s (%d committed during faults)" % (
            kind, len(mine), len(ok), sum(1 for o in mine if o["result"] == "indet"),
            " ".join("%s:%d" % kv for kv in sorted(fails.items())) or "-", during[kind]))
    by_type = {}
    for f in faults:
        k = by_type.setdefault(f["kind"], [0, 0])
        k[0 if "error" not in f else 1] += 1
    print("faults: " + (", ".join("%s %d%s" % (k, v[0], " (+%d not made)" % v[1] if v[1] else "")
                                  for k, v in sorted(by_type.items())) or "none"))
    for n in notes:
        print("note: " + n)
    kinds = {}
    for v in violations:
        k = v.split(":")[0] if v.startswith(("lock", "semaphore", "resource")) else v.split()[0]
        kinds[k] = kinds.get(k, 0) + 1
    print("violations: %d%s" % (len(violations), "".join(
        " (%s: %d)" % kv for kv in sorted(kinds.items())) if violations else ""))
    shown = {}
    for v in violations:
        k = v.split(":")[0]
        shown[k] = shown.get(k, 0) + 1
        if shown[k] <= 10:
            print("  VIOLATION: " + v)
    print("anomalies: %d" % len(anomalies))
    for a in anomalies[:30]:
        print("  ANOMALY: " + a)
    for h in harness_errors[:10]:
        print("  HARNESS ERROR: " + h)
    missing = ["harness errors: %d" % len(harness_errors)] if harness_errors else []
    if not run.broken:
        made = {k for k, v in by_type.items() if v[0]}
        missing += ["fault %s never made" % k for k in sorted(set(FAULTS_NET + FAULTS_PG))
                    if k not in made]
    missing += ["%s: %d committed (< 30)" % (k, v) for k, v in committed.items() if v < 30]
    if not run.broken:
        missing += ["%s: none committed during a fault" % k for k, v in during.items() if not v]
    for m in missing:
        print("  NOT EXERCISED: " + m)
    return missing


def barrier_summary(run, calls):
    """The barrier members' line; what they did not exercise."""
    if run.broken:
        return []
    intervals = [(f["start"], f["end"]) for f in run.nemesis.log if "error" not in f]
    by = {}
    for c in calls:
        by.setdefault(c["kind"], {}).setdefault(c["result"], 0)
        by[c["kind"]][c["result"]] += 1
    # A round passed: every member's leave returned true.
    leaves = {}
    for c in calls:
        if c["kind"] == "leave" and c["result"] == "t":
            leaves.setdefault(c["name"], []).append(c)
    passed = [ls for name, ls in leaves.items() if len(ls) == BARRIER_PARTIES]
    during = sum(1 for ls in passed if any(s <= max(c["t1"] for c in ls) and
                                           min(c["t0"] for c in ls) <= e for s, e in intervals))
    again = sum(1 for m in run.members for a, b in zip(m.calls, m.calls[1:])
                if a["kind"] == "enter" and a["result"] not in ("t", "f")
                and b["kind"] == "enter" and b["name"] == a["name"])
    print("barrier: %d rounds passed whole (%d during faults); %s; %d entered again after "
          "an error" % (len(passed), during, "; ".join(
              "%s %s" % (k, " ".join("%s:%d" % kv for kv in sorted(v.items())))
              for k, v in sorted(by.items())), again))
    missing = []
    if len(passed) < 30:
        missing.append("barrier: %d rounds passed whole (< 30)" % len(passed))
    if not during:
        missing.append("barrier: no round passed whole during a fault")
    return missing


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=None)
    ap.add_argument("--seed", default=None)
    ap.add_argument("--broken", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep the run's directory")
    args = ap.parse_args()
    if args.seconds is None:
        args.seconds = 60 if args.broken else 180
    if args.seed is None:
        args.seed = str(random.SystemRandom().randrange(1, 1 << 31))
    say("zklock nemesis: seed %s, %d s%s" % (args.seed, args.seconds,
                                             ", --broken" if args.broken else ""))

    def on_signal(signum, frame):
        raise KeyboardInterrupt
    # SIGINT too: a shell starts a background job with it ignored.
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, on_signal)
    run = Run(args)
    code = 2
    try:
        try:
            run.setup()
        except Exception as e:
            say("setup failed: %s" % e)
            return 2
        run.go()
        run.after_heal()
        violations, notes, ops = check(run)
        calls = check_barriers(run, violations, notes)
        with open(run.base + "/history.json", "w") as f:
            json.dump(dict(seed=args.seed, ops=ops, barrier_calls=calls,
                           faults=run.nemesis.log if run.nemesis else []), f, default=str)
        missing = summary(run, violations, notes, ops) + barrier_summary(run, calls)
        if run.broken:
            code = 0 if violations else 1
            say("--broken: the checker %s" % ("found violations, as it must" if violations
                                              else "found NO violation: it is blind"))
        elif violations or anomalies:
            code = 1
        elif missing:
            code = 2
        else:
            code = 0
        if code and not run.broken:
            say("FAILED (exit %d); replay with: test/nemesis.sh --seconds %d --seed %s\n"
                "schedule:\n%s" % (code, args.seconds, args.seed, run.nemesis.schedule_text()))
        return code
    except KeyboardInterrupt:
        say("interrupted: tearing down")
        halting.set()
        stopping.set()
        return 2
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        run.teardown()
        if args.keep or (code and not args.broken):
            say("logs and data kept in " + run.base)
        else:
            shutil.rmtree(run.base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
