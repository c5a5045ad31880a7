#!/usr/bin/python3
"""Write to ZooKeeper as a foreign client would.

Usage: zkwrite.py HOSTS create PATH HEXDATA   creates PATH<10-digit sequence>
                                              (persistent, parents created),
                                              prints its path; HEXDATA @FILE
                                              reads the hex digits from FILE
       zkwrite.py HOSTS put PATH HEXDATA      creates PATH itself (persistent)
       zkwrite.py HOSTS delete PATH           deletes PATH (if it exists)
       zkwrite.py HOSTS deleteall PATH [USER:PW]
                                              deletes PATH and everything below
                                              (as that digest user)
       zkwrite.py HOSTS get PATH              prints PATH's data
       zkwrite.py HOSTS set PATH HEXDATA      replaces PATH's data (@FILE too)
       zkwrite.py HOSTS mkdir PATH [USER:PW [PERMS]]
                                              creates PATH, persistent, with an
                                              open ACL; with USER:PW as that
                                              digest user, who may do anything,
                                              everybody else only PERMS (a
                                              string of r, w, c, d, a; default r)

For tests of how zklock reads nodes it did not write.
"""
import sys

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.security import ACL, OPEN_ACL_UNSAFE, Id, Permissions, make_digest_acl_credential


def hexdata(arg):
    if arg.startswith("@"):
        with open(arg[1:]) as f:
            arg = f.read().strip()
    return bytes.fromhex(arg)


def main():
    hosts, action, path = sys.argv[1:4]
    auth = None
    if action in ("mkdir", "deleteall") and len(sys.argv) > 4:
        auth = sys.argv[4]
    zk = KazooClient(hosts=hosts, timeout=10,
                     auth_data=[("digest", auth)] if auth else None)
    zk.start(timeout=15)
    try:
        if action == "create":
            print(zk.create(path, hexdata(sys.argv[4]), sequence=True,
                            makepath=True))
        elif action == "put":
            zk.create(path, hexdata(sys.argv[4]))
        elif action in ("delete", "deleteall"):
            try:
                zk.delete(path, recursive=action == "deleteall")
            except NoNodeError:
                pass
        elif action == "get":
            sys.stdout.write(zk.get(path)[0].decode("utf-8", "replace"))
        elif action == "set":
            zk.set(path, hexdata(sys.argv[4]))
        elif action == "mkdir":
            acl = OPEN_ACL_UNSAFE
            if auth:
                user, pw = auth.split(":", 1)
                perms = sys.argv[5] if len(sys.argv) > 5 else "r"
                bits = {"r": Permissions.READ, "w": Permissions.WRITE,
                        "c": Permissions.CREATE, "d": Permissions.DELETE,
                        "a": Permissions.ADMIN}
                acl = [ACL(Permissions.ALL,
                           Id("digest", make_digest_acl_credential(user, pw))),
                       ACL(sum(bits[c] for c in perms), Id("world", "anyone"))]
            try:
                zk.create(path, b"", acl=acl, makepath=True)
            except NodeExistsError:
                pass
        else:
            sys.exit("unknown action %s" % action)
    finally:
        zk.stop()
        zk.close()


if __name__ == "__main__":
    main()
