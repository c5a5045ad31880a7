#!/usr/bin/python3
"""ZooKeeper's transaction logs, read without ZooKeeper: the committed
creates and deletes of an ensemble, with the leader's times in ms.

    zktxnlog.py DATADIR... [--under PATH]   prints one line per txn

The nemesis's barrier checker (test/nemesis_barriers.py) replays them.
TxnLogToolkit prints times to the second only; this reads the files
(FileTxnLog: a header, then per entry a crc, the length-prefixed txn and
an 'B'), the TxnHeader (clientId, cxid, zxid, time, type) and the start of
the records it needs (jute: big-endian ints and longs, length-prefixed
strings and buffers, counted vectors).

A txn counts as committed when at least two of three servers logged it:
a committed txn was logged by a quorum, and one that a quorum logged is
committed by every later leader.  A txn only one server logged (a leader
killed before its quorum acked) may remain in that server's files when it
came back through a snapshot, so it must not count.
"""
import glob
import os
import struct
import sys

CREATE, DELETE, MULTI, CREATE2, CREATE_CONTAINER, DELETE_CONTAINER, CREATE_TTL = \
    1, 2, 14, 15, 19, 20, 21
CLOSE_SESSION, ERROR = -11, -1
CREATES = (CREATE, CREATE2, CREATE_CONTAINER, CREATE_TTL)


class Reader:
    def __init__(self, buf):
        self.b, self.i = buf, 0

    def take(self, fmt):
        v = struct.unpack_from(fmt, self.b, self.i)
        self.i += struct.calcsize(fmt)
        return v[0]

    def int(self):
        return self.take(">i")

    def long(self):
        return self.take(">q")

    def buffer(self):
        n = self.int()
        if n < 0:
            return None
        v = self.b[self.i:self.i + n]
        self.i += n
        return v

    def string(self):
        v = self.buffer()
        return None if v is None else v.decode("utf-8", "replace")


def ops(kind, r):
    """(op, path, ephemeral) of one record: create, delete, or nothing."""
    if kind in CREATES:
        path = r.string()
        r.buffer()                               # data
        for _ in range(r.int()):                 # acl
            r.int()
            r.string()
            r.string()
        ephemeral = kind in (CREATE, CREATE2) and r.take(">?")
        return [("create", path, ephemeral)]
    if kind in (DELETE, DELETE_CONTAINER):
        return [("delete", r.string(), False)]
    if kind == MULTI:
        out = []
        for _ in range(r.int()):
            sub_kind = r.int()
            data = r.buffer()
            if data is not None:
                out += ops(sub_kind, Reader(data))
        return out
    return []


def read_log(path):
    """(zxid, time_ms, session, type, ops) of every entry of one file."""
    with open(path, "rb") as f:
        buf = f.read()
    r = Reader(buf)
    if len(buf) < 16 or buf[:4] != b"ZKLG":
        return
    r.i = 16
    while r.i + 12 <= len(buf):
        r.long()                                 # crc
        n = r.int()
        if n <= 0 or r.i + n + 1 > len(buf):     # the preallocated zeros
            return
        t = Reader(buf[r.i:r.i + n])
        r.i += n + 1                             # the txn, 'B'
        session, _cxid, zxid, time_ms, kind = t.long(), t.int(), t.long(), t.long(), t.int()
        try:
            entry_ops = ops(kind, t)
        except struct.error:
            entry_ops = []
        yield zxid, time_ms, session, kind, entry_ops


def committed(datadirs):
    """The txns logged by at least two of the servers' data dirs (all of
    them with fewer than three dirs), in zxid order."""
    seen = {}
    for d in datadirs:
        mine = {}
        for path in sorted(glob.glob(os.path.join(d, "version-2", "log.*"))):
            for e in read_log(path):
                mine[e[0]] = e
        for zxid, e in mine.items():
            seen.setdefault(zxid, [e, 0])[1] += 1
    need = 2 if len(datadirs) >= 3 else 1
    return [e for zxid, (e, n) in sorted(seen.items()) if n >= need]


def main():
    args = sys.argv[1:]
    under = None
    if "--under" in args:
        k = args.index("--under")
        under = args[k + 1]
        del args[k:k + 2]
    for zxid, time_ms, session, kind, entry_ops in committed(args):
        for op, path, eph in entry_ops or [(None, None, None)]:
            if under and (path is None or not path.startswith(under)):
                if not (kind == CLOSE_SESSION and path is None):
                    continue
            print("%#x\t%d\t%#x\t%d\t%s\t%s\t%s" % (zxid, time_ms, session, kind, op or "",
                                                    path or "", "e" if eph else ""))


if __name__ == "__main__":
    main()
