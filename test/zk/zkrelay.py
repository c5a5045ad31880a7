#!/usr/bin/python3
"""A loopback relay that reads ZooKeeper's protocols and cuts a quorum link
the moment a given client reply has passed, for tests that must hit an
exact event order (issue 41).

Usage: zkrelay.py --log=FILE --control=SOCKET LINK [...]

LINK is KIND:LISTEN_PORT:TARGET_PORT, forwarding 127.0.0.1:LISTEN_PORT to
127.0.0.1:TARGET_PORT:

  client  a ZooKeeper client's link to a server: frames of a 4-byte length;
          the first each way is the connect request / response, then
          requests (xid int32, type int32, ...) and replies (xid int32,
          zxid int64, err int32, ...); pings are xid -2 type 11;
  quorum  a follower's link to its leader's quorum port: the follower's
          QuorumPackets (type int32, zxid int64, data buffer, authinfo
          vector) are read; the leader's side (which carries a raw snapshot
          during sync) is only forwarded;
  plain   bytes only (an election port).

quorum and plain links refuse connections while their target is down (as
tcpproxy.py --refuse does).  Every frame is logged on a line of FILE:

  MONO LINK CONN DIR WHAT...

MONO is CLOCK_MONOTONIC in seconds (time.monotonic(); Perl's
clock_gettime(CLOCK_MONOTONIC)), taken when the frame was read, for a reply
when it was forwarded; DIR is c>s / s>c (client) or f>l (quorum).  WHAT is
"connect sid=.. timeout=..", "req xid=.. type=.. [path=..]", "rep xid=..
zxid=.. err=.. type=..", or, for a quorum packet, its name, zxid, and for
PING and REQUEST the sessions they carry (touched=sid,... / sid=..).  The
relay's own acts are logged as "MONO relay - - cut|heal|armed|mark ...".

Prints "ready" once listening.  Control: connect to the unix socket SOCKET
and send lines; each gets one line back:

  arm create SUBSTR  cut every quorum link the moment the reply to the next
                     create whose path contains SUBSTR has been forwarded
                     to the client, if the create succeeded -> "ok armed"
  arm xid N          the same, after the reply with xid N -> "ok armed"
  wait SECONDS       -> "cut MONO" once an armed cut happened (or at once if
                     it did), "timeout" otherwise
  cut                cut now -> "ok cut MONO"
  heal               reset every cut quorum connection (so that both ends
                     connect afresh) and forward again -> "ok heal MONO"
  mark TEXT          write TEXT into the log -> "ok MONO"

A cut keeps the connections open and drops every byte either way, and
holds new quorum connections silent too (a partition, not a close).
SIGTERM stops the relay.
"""
import asyncio
import os
import signal
import struct
import sys
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tcpproxy  # noqa: E402

CREATE_OPS = (1, 15, 19, 21)
QUORUM_TYPES = {
    1: "REQUEST", 2: "PROPOSAL", 3: "ACK", 4: "COMMIT", 5: "PING",
    6: "REVALIDATE", 7: "SYNC", 8: "INFORM", 9: "COMMITANDACTIVATE",
    10: "NEWLEADER", 11: "FOLLOWERINFO", 12: "UPTODATE", 13: "DIFF",
    14: "TRUNC", 15: "SNAP", 16: "OBSERVERINFO", 17: "LEADERINFO",
    18: "ACKEPOCH", 19: "INFORMANDACTIVATE"}

log_file = None
next_conn_id = 0
quorum_conns = set()
cut_at = None           # monotonic time of the cut, None while forwarding
trigger = None          # ("create", substr) or ("xid", n)
fired = None            # future: set to the cut's time by an armed trigger


def log(text):
    log_file.write("%.6f %s\n" % (time.monotonic(), text))
    log_file.flush()


def cut(reason):
    global cut_at, trigger
    if cut_at is None:
        cut_at = time.monotonic()
        log("relay - - cut " + reason)
    trigger = None
    if fired is not None and not fired.done():
        fired.set_result(cut_at)
    return cut_at


def heal():
    global cut_at
    log("relay - - heal")
    for conn in list(quorum_conns):
        conn.close()
    cut_at = None


class Frames:
    """Splits a byte stream into 4-byte-length frames."""

    def __init__(self):
        self.buf = b""

    def feed(self, data):
        self.buf += data
        frames = []
        while len(self.buf) >= 4:
            n = struct.unpack(">i", self.buf[:4])[0]
            if n < 0 or len(self.buf) < 4 + n:
                break
            frames.append(self.buf[4:4 + n])
            self.buf = self.buf[4 + n:]
        return frames


def read_string(body, at):
    """A jute string or buffer at body[at:]: (bytes or None, next offset)."""
    n = struct.unpack(">i", body[at:at + 4])[0]
    if n < 0:
        return None, at + 4
    return body[at + 4:at + 4 + n], at + 4 + n


class ClientConn:
    def __init__(self, conn_id):
        self.id = conn_id
        self.requests = Frames()
        self.replies = Frames()
        self.connected = False
        self.connecting = False
        self.types = {}
        self.paths = {}

    def on_request(self, body):
        if not self.connecting:
            self.connecting = True
            timeout, sid = struct.unpack(">iq", body[12:24])
            return "connect sid=0x%x timeout=%d" % (sid, timeout)
        xid, op = struct.unpack(">ii", body[:8])
        self.types[xid] = op
        text = "req xid=%d type=%d" % (xid, op)
        if op in CREATE_OPS:
            path = read_string(body, 8)[0].decode(errors="replace")
            self.paths[xid] = path
            text += " path=" + path
        return text

    def on_reply(self, body):
        """(log text, whether it is the reply an armed trigger waits for)"""
        if not self.connected:
            self.connected = True
            timeout, sid = struct.unpack(">iq", body[4:16])
            return "connected sid=0x%x timeout=%d" % (sid, timeout), False
        xid, zxid, err = struct.unpack(">iqi", body[:16])
        op = self.types.pop(xid, None)
        path = self.paths.pop(xid, None)
        hit = trigger is not None and (
            xid == trigger[1] if trigger[0] == "xid"
            else err == 0 and path is not None and trigger[1] in path)
        return ("rep xid=%d zxid=0x%x err=%d type=%s" % (xid, zxid, err, op),
                hit)


async def client_link(reader, writer, target_port):
    global next_conn_id
    target = await tcpproxy.connect_target(writer, target_port, None)
    if target is None:
        return
    server_reader, server_writer = target
    next_conn_id += 1
    conn = ClientConn(next_conn_id)
    prefix = "client %d " % conn.id

    async def requests():
        while True:
            data = await reader.read(65536)
            if not data:
                break
            stamp = time.monotonic()
            server_writer.write(data)
            for body in conn.requests.feed(data):
                log_file.write("%.6f %sc>s %s\n" % (stamp, prefix,
                                                    conn.on_request(body)))
            log_file.flush()

    async def replies():
        while True:
            data = await server_reader.read(65536)
            if not data:
                break
            writer.write(data)
            stamp = time.monotonic()
            hits = []
            for body in conn.replies.feed(data):
                text, hit = conn.on_reply(body)
                log_file.write("%.6f %ss>c %s\n" % (stamp, prefix, text))
                if hit:
                    hits.append(text.split()[1])
            log_file.flush()
            if hits:
                cut("after " + prefix + "s>c " + hits[0])

    await run_pumps(requests(), replies(), writer, server_writer)


async def run_pumps(a, b, *writers):
    try:
        await asyncio.gather(a, b)
    except (ConnectionError, OSError):
        pass
    for w in writers:
        tcpproxy.reset(w)


class QuorumConn:
    def __init__(self, writer):
        self.writers = [writer]
        self.buf = b""

    def close(self):
        quorum_conns.discard(self)
        for w in self.writers:
            tcpproxy.reset(w)

    def packets(self, data):
        """The follower's QuorumPackets that data completes, as log text."""
        self.buf += data
        out = []
        while True:
            try:
                qtype, zxid = struct.unpack(">iq", self.buf[:12])
                payload, at = read_string(self.buf, 12)
                count = struct.unpack(">i", self.buf[at:at + 4])[0]
                at += 4
                for _ in range(max(count, 0) * 2):
                    _, at = read_string(self.buf, at)
            except struct.error:
                return out
            if at > len(self.buf):
                return out
            self.buf = self.buf[at:]
            text = "%s zxid=0x%x" % (QUORUM_TYPES.get(qtype, qtype), zxid)
            if qtype == 5 and payload is not None:
                sids = [struct.unpack(">q", payload[i:i + 8])[0]
                        for i in range(0, len(payload) - 11, 12)]
                text += " touched=" + ",".join("0x%x" % s for s in sids)
            elif qtype in (1, 6) and payload is not None and len(payload) >= 16:
                sid, cxid, op = struct.unpack(">qii", payload[:16])
                text += " sid=0x%x cxid=%d type=%d" % (sid, cxid, op)
            out.append(text)


async def quorum_link(reader, writer, target_port, listener, parse):
    global next_conn_id
    next_conn_id += 1
    prefix = "%s %d " % ("quorum" if parse else "plain", next_conn_id)
    if cut_at is not None and parse:
        # A partition: the connection is taken but nothing gets through.
        conn = QuorumConn(writer)
        quorum_conns.add(conn)
        log(prefix + "opened while cut")
        while await reader.read(65536):
            pass
        conn.close()
        return
    target = await tcpproxy.connect_target(writer, target_port, listener)
    if target is None:
        log(prefix + "refused (target down)")
        return
    server_reader, server_writer = target
    conn = QuorumConn(writer)
    conn.writers.append(server_writer)
    if parse:
        quorum_conns.add(conn)

    async def follower_side():
        while True:
            data = await reader.read(65536)
            if not data:
                break
            if parse and cut_at is not None:
                continue
            stamp = time.monotonic()
            server_writer.write(data)
            if parse:
                for text in conn.packets(data):
                    log_file.write("%.6f %sf>l %s\n" % (stamp, prefix, text))
                log_file.flush()

    async def leader_side():
        while True:
            data = await server_reader.read(65536)
            if not data:
                break
            if parse and cut_at is not None:
                continue
            writer.write(data)

    await run_pumps(follower_side(), leader_side(), writer, server_writer)
    quorum_conns.discard(conn)


async def control(reader, writer):
    while True:
        line = await reader.readline()
        if not line:
            break
        words = line.decode().split()
        if not words:
            continue
        try:
            reply = await command(words[0], words[1:])
        except Exception as e:  # answer, and stay at the test's command
            reply = "error %s: %r" % (words[0], e)
        writer.write((reply + "\n").encode())
        await writer.drain()
    writer.close()


async def command(cmd, args):
    """Carry out one control command; returns its answer."""
    global trigger, fired
    if cmd == "arm" and len(args) == 2 and args[0] in ("create", "xid"):
        trigger = (args[0], int(args[1]) if args[0] == "xid" else args[1])
        fired = asyncio.get_running_loop().create_future()
        log("relay - - armed %s %s" % tuple(args))
        reply = "ok armed"
    elif cmd == "wait" and len(args) == 1:
        if fired is None:
            reply = "error nothing armed"
        else:
            try:
                at = await asyncio.wait_for(asyncio.shield(fired),
                                            float(args[0]))
                reply = "cut %.6f" % at
            except asyncio.TimeoutError:
                reply = "timeout"
    elif cmd == "cut":
        reply = "ok cut %.6f" % cut("by command")
    elif cmd == "heal":
        heal()
        reply = "ok heal %.6f" % time.monotonic()
    elif cmd == "mark":
        log("relay - - mark " + " ".join(args))
        reply = "ok %.6f" % time.monotonic()
    else:
        reply = "error unknown command"
    return reply


async def main(log_path, control_path, links):
    global log_file
    log_file = open(log_path, "a", buffering=1)
    tcpproxy.refuse_when_down = True
    loop = asyncio.get_running_loop()
    stop = loop.create_future()
    loop.add_signal_handler(signal.SIGTERM, stop.set_result, None)
    listeners = []
    for kind, listen_port, target_port in links:
        if kind == "client":
            handler = (lambda r, w, l, t=target_port:
                       client_link(r, w, t))
        else:
            handler = (lambda r, w, l, t=target_port, p=(kind == "quorum"):
                       quorum_link(r, w, t, l, p))
        listener = tcpproxy.Listener(listen_port, handler)
        await listener.start()
        listeners.append(listener)
    if os.path.exists(control_path):
        os.unlink(control_path)
    control_server = await asyncio.start_unix_server(control, control_path)
    print("ready", flush=True)
    await stop
    control_server.close()
    for listener in listeners:
        listener.close()
    for conn in list(quorum_conns):
        conn.close()


if __name__ == "__main__":
    opts = {}
    links = []
    for arg in sys.argv[1:]:
        if arg.startswith("--") and "=" in arg:
            key, value = arg[2:].split("=", 1)
            opts[key] = value
        else:
            kind, listen_port, target_port = arg.split(":")
            if kind not in ("client", "quorum", "plain"):
                sys.exit("zkrelay.py: unknown link kind " + kind)
            links.append((kind, int(listen_port), int(target_port)))
    if "log" not in opts or "control" not in opts or not links:
        sys.exit(__doc__)
    asyncio.run(main(opts["log"], opts["control"], links))
