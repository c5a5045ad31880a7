#!/usr/bin/python3
"""kazoo_barrier: a member of a barrier with Kazoo, for zklock's interop
test of barriers (test/tap/078_barrier_interop.pl).

Usage: kazoo_barrier.py HOSTS PATH [LIFETIME_SECONDS]

Connects, prints "ready", then runs the commands read from stdin, one at a
time, each answered by one line (times are epoch milliseconds):

  enter PARTIES   a new DoubleBarrier(PATH, PARTIES); its enter() (Kazoo's
                  has no time-out): "entered true|false <time>", false when
                  Kazoo gave up (it then is no member)
  leave           that barrier's leave() (no time-out): "left true <time>"
  close           Barrier(PATH).create(): "closed <time>"
  open            Barrier(PATH).remove(): "opened true|false <time>"
  wait [MS]       Barrier(PATH).wait(), or wait(MS / 1000):
                  "passed true|false <time>"
  quit            close the client (its member node, if any, goes with its
                  session) and exit 0

Errors go to stderr with a non-zero exit: 2 for bad usage, 1 for anything
else, 3 if the ZooKeeper session was lost, 4 when LIFETIME_SECONDS (default
300) have passed: Kazoo's waits have none of their own, and the process
never outlives a test that forgot it.
"""
import logging
import os
import sys
import threading

from kazoo.client import KazooClient
from kazoo.protocol.states import KazooState

# The lock program's session settings and output, beside this file.
from kazoo_lock import CONNECT_TIMEOUT_S, SESSION_TIMEOUT_S, now_ms, say


def usage(why):
    sys.stderr.write("kazoo_barrier: %s\n" % why)
    sys.stderr.write("usage: kazoo_barrier.py HOSTS PATH [LIFETIME_SECONDS]\n")
    sys.exit(2)


def lifetime_over():
    sys.stderr.write("kazoo_barrier: lifetime over\n")
    sys.stderr.flush()
    os._exit(4)


def main(argv):
    if len(argv) not in (2, 3):
        usage("wrong number of arguments")
    hosts, path = argv[:2]
    lifetime = float(argv[2]) if len(argv) == 3 else 300.0
    if not path.startswith("/"):
        usage("PATH must be absolute")
    watchdog = threading.Timer(lifetime, lifetime_over)
    watchdog.daemon = True
    watchdog.start()

    logging.basicConfig(level=logging.CRITICAL)
    zk = KazooClient(hosts=hosts, timeout=SESSION_TIMEOUT_S)

    def on_state(state):
        if state == KazooState.LOST:
            sys.stderr.write("kazoo_barrier: ZooKeeper session lost\n")
            sys.stderr.flush()
            os._exit(3)

    zk.start(timeout=CONNECT_TIMEOUT_S)
    zk.add_listener(on_state)
    say("ready")
    barrier = None
    gate = zk.Barrier(path)
    for line in sys.stdin:
        w = line.split()
        if not w:
            continue
        if w[0] == "enter":
            barrier = zk.DoubleBarrier(path, int(w[1]))
            barrier.enter()
            say("entered %s %d" % ("true" if barrier.participating else "false",
                                   now_ms()))
        elif w[0] == "leave":
            if barrier is None:
                usage("leave before enter")
            barrier.leave()
            say("left true %d" % now_ms())
        elif w[0] == "close":
            gate.create()
            say("closed %d" % now_ms())
        elif w[0] == "open":
            say("opened %s %d" % ("true" if gate.remove() else "false",
                                  now_ms()))
        elif w[0] == "wait":
            timeout = float(w[1]) / 1000 if len(w) > 1 else None
            say("passed %s %d" % ("true" if gate.wait(timeout) else "false",
                                  now_ms()))
        elif w[0] == "quit":
            break
        else:
            usage("unknown command %s" % w[0])
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
        sys.stderr.write("kazoo_barrier: %s: %s\n" % (type(e).__name__, e))
        sys.exit(1)
