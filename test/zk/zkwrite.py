#!/usr/bin/python3
"""Create or delete a node with arbitrary bytes, as a foreign client would.

Usage: zkwrite.py HOSTS create PATH HEXDATA   creates PATH<10-digit sequence>
                                              (persistent, parents created),
                                              prints its path; HEXDATA @FILE
                                              reads the hex digits from FILE
       zkwrite.py HOSTS delete PATH           deletes PATH (if it exists)
       zkwrite.py HOSTS deleteall PATH        deletes PATH and everything below

For tests of how zklock reads nodes it did not write.
"""
import sys

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError


def main():
    hosts, action, path = sys.argv[1:4]
    zk = KazooClient(hosts=hosts, timeout=10)
    zk.start(timeout=15)
    try:
        if action == "create":
            hexdata = sys.argv[4]
            if hexdata.startswith("@"):
                with open(hexdata[1:]) as f:
                    hexdata = f.read().strip()
            print(zk.create(path, bytes.fromhex(hexdata), sequence=True,
                            makepath=True))
        elif action in ("delete", "deleteall"):
            try:
                zk.delete(path, recursive=action == "deleteall")
            except NoNodeError:
                pass
        else:
            sys.exit("unknown action %s" % action)
    finally:
        zk.stop()
        zk.close()


if __name__ == "__main__":
    main()
