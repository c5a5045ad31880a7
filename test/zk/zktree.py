#!/usr/bin/python3
"""List every node under a ZooKeeper path with its ephemeral owner.

Usage: zktree.py HOSTS ROOT [--acl]
Prints one line per node below ROOT: "<path>\t<ephemeralOwner as 0x hex>"
(0x0 for persistent and container nodes), with --acl also "\t<acl>", the
node's ACL entries as scheme:id:perms separated by spaces.  Prints nothing
if ROOT does not exist.  Used by the tests to check that no node outlives
its owner, and how nodes are protected.
"""
import sys

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError


def walk(zk, path, with_acl):
    try:
        children = zk.get_children(path)
    except NoNodeError:
        return
    for child in sorted(children):
        full = path.rstrip("/") + "/" + child
        try:
            _, stat = zk.get(full)
            line = "%s\t0x%x" % (full, stat.ephemeralOwner)
            if with_acl:
                acls, _ = zk.get_acls(full)
                line += "\t" + " ".join(
                    "%s:%s:%d" % (a.id.scheme, a.id.id, a.perms) for a in acls)
        except NoNodeError:
            continue
        print(line)
        walk(zk, full, with_acl)


def main():
    hosts, root = sys.argv[1], sys.argv[2]
    zk = KazooClient(hosts=hosts, timeout=10)
    zk.start(timeout=15)
    try:
        walk(zk, root, "--acl" in sys.argv[3:])
    finally:
        zk.stop()
        zk.close()


if __name__ == "__main__":
    main()
