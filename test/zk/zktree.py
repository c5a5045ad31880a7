#!/usr/bin/python3
"""List every node under a ZooKeeper path with its ephemeral owner.

Usage: zktree.py HOSTS ROOT
Prints one line per node below ROOT: "<path>\t<ephemeralOwner as 0x hex>"
(0x0 for persistent and container nodes).  Prints nothing if ROOT does not
exist.  Used by the tests to check that no node outlives its owner.
"""
import sys

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError


def walk(zk, path):
    try:
        children = zk.get_children(path)
    except NoNodeError:
        return
    for child in sorted(children):
        full = path.rstrip("/") + "/" + child
        try:
            _, stat = zk.get(full)
        except NoNodeError:
            continue
        print("%s\t0x%x" % (full, stat.ephemeralOwner))
        walk(zk, full)


def main():
    hosts, root = sys.argv[1], sys.argv[2]
    zk = KazooClient(hosts=hosts, timeout=10)
    zk.start(timeout=15)
    try:
        walk(zk, root)
    finally:
        zk.stop()
        zk.close()


if __name__ == "__main__":
    main()
