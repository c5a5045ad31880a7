#!/usr/bin/python3
"""kazoo_lock: take a lock with Kazoo, for zklock's interop tests.

Usage: kazoo_lock.py HOSTS PATH KIND ACTION [SECONDS]

KIND    mutex  Lock(PATH, extra_lock_patterns=["-lock-"]): also queues
               behind Curator InterProcessMutex and zklock exclusive nodes
               ("_c_<guid>-lock-NNNNNNNNNN")
        read   ReadLock(PATH, extra_lock_patterns=["-lock-", "__WRIT__"])
        write  WriteLock(PATH,
                         extra_lock_patterns=["-lock-", "__WRIT__", "__READ__"])
               read/write also see zklock's exclusive nodes (either naming)
               and shared nodes ("__READ__", as Curator's
               InterProcessReadWriteLock names them); zklock counts Kazoo's
               "__rlock__" nodes as readers and everything else as writers.
               Curator's read/write lock does not see Kazoo's own nodes.
ACTION  try          acquire without waiting; print "acquired" or "busy",
                     release, exit 0
        hold SECONDS print "started", acquire (waiting without limit), print
                     "acquired <epoch ms>", hold until SECONDS have passed,
                     stdin reaches EOF or a line "release" is read, release,
                     print "released <epoch ms>", exit 0
        revoke       ask the current holder of PATH to let go, by hand:
                     Kazoo's recipes have no revocation, so this follows
                     Curator's convention (Revoker.attemptRevoke): the
                     bytes "__REVOKE__" are written into the data of PATH's
                     first child in queue order (by its 10-digit sequence
                     suffix); print "revoked <node path>", or "none" if
                     PATH has no such child, exit 0.  KIND is not used.
                     A Kazoo holder itself does not hear such a request:
                     its Lock sets no watch on its own node's data.

Lines on stdout are flushed at once.  Errors go to stderr with a non-zero
exit: 2 for bad usage, 1 for anything else, 3 if the ZooKeeper session was
lost while holding or waiting.
"""
import logging
import os
import sys
import threading
import time

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.protocol.states import KazooState

SESSION_TIMEOUT_S = 4.0
CONNECT_TIMEOUT_S = 15.0


def say(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def now_ms():
    return int(time.time() * 1000)


def usage(why):
    sys.stderr.write("kazoo_lock: %s\n" % why)
    sys.stderr.write(
        "usage: kazoo_lock.py HOSTS PATH mutex|read|write "
        "try|hold SECONDS|revoke\n")
    sys.exit(2)


def make_lock(zk, path, kind):
    if kind == "mutex":
        return zk.Lock(path, extra_lock_patterns=["-lock-"])
    if kind == "read":
        return zk.ReadLock(path, extra_lock_patterns=["-lock-", "__WRIT__"])
    if kind == "write":
        return zk.WriteLock(
            path, extra_lock_patterns=["-lock-", "__WRIT__", "__READ__"])
    usage("unknown KIND %s" % kind)
    return None


# What Curator's Revoker writes into a holder's node (LockInternals.
# REVOKE_MESSAGE), and what zklock's zk_lock_request_release writes too.
REVOKE_MESSAGE = b"__REVOKE__"


def revoke(zk, path):
    """Write REVOKE_MESSAGE into the holder's node; return its path or None."""
    try:
        children = zk.get_children(path)
    except NoNodeError:
        return None
    nodes = sorted((c for c in children if c[-10:].isdigit()),
                   key=lambda c: int(c[-10:]))
    if not nodes:
        return None
    holder = path.rstrip("/") + "/" + nodes[0]
    try:
        zk.set(holder, REVOKE_MESSAGE)
    except NoNodeError:  # gone meanwhile: ignored, as Revoker does
        pass
    return holder


def wait_for_release(seconds):
    """Return after SECONDS, at EOF on stdin, or at a line "release"."""
    let_go = threading.Event()

    def read_stdin():
        try:
            for line in sys.stdin:
                if line.strip() == "release":
                    break
        except Exception:  # treat like EOF
            pass
        let_go.set()

    threading.Thread(target=read_stdin, daemon=True).start()
    let_go.wait(seconds)


def main(argv):
    if len(argv) < 4:
        usage("too few arguments")
    hosts, path, kind, action = argv[:4]
    if not path.startswith("/"):
        usage("PATH must be absolute")
    if kind not in ("mutex", "read", "write"):
        usage("unknown KIND %s" % kind)
    seconds = None
    if action == "hold":
        if len(argv) != 5:
            usage("hold needs SECONDS")
        try:
            seconds = float(argv[4])
        except ValueError:
            usage("bad SECONDS: %s" % argv[4])
    elif action in ("try", "revoke"):
        if len(argv) != 4:
            usage("%s takes no argument" % action)
    else:
        usage("unknown ACTION %s" % action)

    logging.basicConfig(level=logging.CRITICAL)
    zk = KazooClient(hosts=hosts, timeout=SESSION_TIMEOUT_S)

    def on_state(state):
        # A lost session means a lost lock (or queue place): say so, stop.
        if state == KazooState.LOST:
            say("lost %d" % now_ms())
            sys.stderr.write("kazoo_lock: ZooKeeper session lost\n")
            sys.stderr.flush()
            os._exit(3)

    zk.start(timeout=CONNECT_TIMEOUT_S)
    zk.add_listener(on_state)
    try:
        lock = make_lock(zk, path, kind)
        if action == "revoke":
            holder = revoke(zk, path)
            say("revoked %s" % holder if holder else "none")
        elif action == "try":
            if lock.acquire(blocking=False):
                say("acquired")
                lock.release()
            else:
                say("busy")
        else:
            say("started")
            if not lock.acquire(blocking=True):
                raise RuntimeError("acquire returned false")
            say("acquired %d" % now_ms())
            wait_for_release(seconds)
            lock.release()
            say("released %d" % now_ms())
    finally:
        zk.remove_listener(on_state)
        zk.stop()
        zk.close()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except SystemExit:
        raise
    except Exception as e:  # any error: a message and a non-zero exit
        sys.stderr.write("kazoo_lock: %s: %s\n" % (type(e).__name__, e))
        sys.exit(1)
