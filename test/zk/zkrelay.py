#!/usr/bin/python3
"""A loopback relay that reads ZooKeeper's protocols and cuts a quorum link
the moment a given client reply has passed, or delivers one direction of a
link late, in order, for tests that must hit an exact event order (issues
41 and 47).

Usage: zkrelay.py --log=FILE --control=SOCKET LINK [...]

LINK is KIND:LISTEN_PORT:TARGET_PORT, forwarding 127.0.0.1:LISTEN_PORT to
127.0.0.1:TARGET_PORT:

  client  a ZooKeeper client's link to a server: frames of a 4-byte length;
          the first each way is the connect request / response, then
          requests (xid int32, type int32, ...) and replies (xid int32,
          zxid int64, err int32, ...); pings are xid -2 type 11;
  quorum  a follower's link to its leader's quorum port: QuorumPackets
          (type int32, zxid int64, data buffer, authinfo vector) both
          ways; the leader's raw snapshot after a SNAP is skipped up to
          its NEWLEADER (found by the zxid of its LEADERINFO);
  plain   bytes only (an election port).

quorum and plain links refuse connections while their target is down (as
tcpproxy.py --refuse does).  Every frame is logged on a line of FILE when
it is forwarded:

  MONO LINK CONN DIR WHAT... [read=MONO]

MONO is CLOCK_MONOTONIC in seconds (time.monotonic(); Perl's
clock_gettime(CLOCK_MONOTONIC)); read= is when the relay read a frame that
it held or lagged (without it, it was forwarded as it was read).  DIR is
c>s / s>c (client) or f>l / l>f (quorum: follower to leader, leader to
follower).  WHAT is "connect sid=.. timeout=..", "connected sid=..
timeout=..", "req xid=.. type=.. [path=..]", "rep xid=.. zxid=.. err=..
type=..", or, for a quorum packet, its name, zxid, the sessions a
follower's PING reply touches (touched=sid,...), the session, cxid and
type of a REQUEST or PROPOSAL (sid=.. cxid=.. type=..; a proposal's type
-1 is an error txn), and the session a follower's REVALIDATE asks about
(sid=.. timeout=..: the leader touches it).  The relay's own acts are logged as
"MONO relay - - WHAT".

Prints "ready" once listening.  Control: connect to the unix socket SOCKET
and send lines; each gets one line back.  DIR names one direction of every
link of its kind (l>f, f>l: the quorum links; s>c, c>s: the client links),
of the connections open and of those opened while the command holds.

  arm [cut | hold DIR] create SUBSTR
                     cut every quorum link (or hold DIR) the moment the
                     reply to the next create whose path contains SUBSTR
                     has been forwarded to the client, if the create
                     succeeded -> "ok armed"
  arm [cut | hold DIR] xid N
                     the same, after the reply with xid N
  arm [cut | hold DIR] touch SID
                     the same, after the next follower PING reply that
                     touches session SID (hex) has been forwarded to the
                     leader: from then on the leader hears no later touch
  wait SECONDS       -> "cut MONO" or "hold MONO" once the armed act
                     happened (or at once if it did), "timeout" otherwise
  cut                cut now -> "ok cut MONO"
  heal               reset every cut quorum connection (so that both ends
                     connect afresh) and forward again -> "ok heal MONO"
  hold DIR           a one-way stall: keep every byte read in DIR, in
                     order, the other direction still flowing ->
                     "ok hold DIR MONO"
  release DIR [all | before MONO | packets N | bytes N]
                     forward what DIR holds: all of it, and forward again
                     from then on (the default); or only what the relay
                     read before MONO, the first N frames, the first N
                     bytes, and keep holding the rest and what comes ->
                     "ok release DIR B bytes F frames, K bytes held MONO"
  lag DIR MIN MAX [RATE [SEED]]
                     delay every byte of DIR by between MIN and MAX
                     seconds, in order: the delay wanders from target to
                     random target in that range at RATE seconds per
                     second (default 0.5), starting from the delay DIR
                     has now (none when it forwarded), so that the link
                     is never silent for longer than (1 + RATE) times a
                     gap of the sender's -> "ok lag DIR MONO"
  lag DIR off        forward what is delayed at once, and DIR without delay
                     from then on -> "ok lag DIR off B bytes MONO"
  held DIR           -> "ok DIR B bytes F frames" (held or delayed), with
                     " since MONO" (when the oldest was read) if any
  mark TEXT          write TEXT into the log -> "ok MONO"
  refuse client on|off
                     close new client connections at once (as a server
                     that cannot be reached), or accept them again ->
                     "ok refuse client on|off MONO"

A cut keeps the connections open and drops every byte either way, and
holds new quorum connections silent too (a partition, not a close).  A
hold and a lag never drop a byte.  SIGTERM stops the relay.
"""
import asyncio
import collections
import os
import random
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
DIRS = {"c>s": "client", "s>c": "client", "f>l": "quorum", "l>f": "quorum"}
# A quorum packet longer than this is taken as a parse gone wrong.
MAX_PACKET = 64 << 20

log_file = None
next_conn_id = 0
quorum_conns = set()
cut_at = None           # monotonic time of the cut, None while forwarding
trigger = None          # (action, kind, arg): action "cut" or a DIR to hold
fired = None            # future: set to (act, time) by an armed trigger
holding = set()         # directions held
lags = {}               # direction -> Lag
pipes = {d: set() for d in DIRS}
refusing_clients = False


def log(text):
    log_file.write("%.6f %s\n" % (time.monotonic(), text))
    log_file.flush()


def cut(reason):
    global cut_at
    if cut_at is None:
        cut_at = time.monotonic()
        log("relay - - cut " + reason)
    return cut_at


def hold(direction, reason):
    if direction not in holding:
        holding.add(direction)
        log("relay - - hold %s %s" % (direction, reason))
    return time.monotonic()


def heal():
    global cut_at
    log("relay - - heal")
    for conn in list(quorum_conns):
        conn.close()
    cut_at = None


def fire(reason):
    """The armed trigger's act, now."""
    global trigger
    action = trigger[0]
    trigger = None
    if action == "cut":
        at, act = cut(reason), "cut"
    else:
        at, act = hold(action, reason), "hold"
    if fired is not None and not fired.done():
        fired.set_result((act, at))


def triggered_by(info):
    """Whether a frame (what the parser said of it) is the armed one."""
    if trigger is None or info is None or trigger[1] != info[0]:
        return False
    if info[0] == "touch":
        return trigger[2] in info[1]
    _, xid, err, path = info
    if trigger[3] == "xid":
        return xid == trigger[2]
    return err == 0 and path is not None and trigger[2] in path


class Lag:
    """A delay that wanders between lo and hi at rate seconds per second."""

    def __init__(self, lo, hi, rate, start, seed):
        self.lo, self.hi, self.rate = lo, hi, rate
        self.rng = random.Random(seed)
        self.t = time.monotonic()
        self.d = start
        self.target = self.rng.uniform(lo, hi)

    def at(self, t):
        while t > self.t:
            gap = self.target - self.d
            need = abs(gap) / self.rate
            if need == 0 and self.lo == self.hi:
                self.t = t
            elif self.t + need <= t:
                self.t += need
                self.d = self.target
                self.target = self.rng.uniform(self.lo, self.hi)
            else:
                self.d += (t - self.t) * self.rate * (1 if gap > 0 else -1)
                self.t = t
        return self.d


class Pipe:
    """One direction of one connection: parses what is read, and forwards
    it at once, or keeps it in order while the direction is held or lagged.
    Items are [read time, due time (None: held), bytes, frames], a frame
    (end offset in the bytes, log text, what triggers look at)."""

    def __init__(self, direction, prefix, writer, parse):
        self.dir = direction
        self.prefix = prefix
        self.writer = writer
        self.parse = parse
        self.queue = collections.deque()
        self.last_due = 0.0
        self.wake = asyncio.Event()
        self.drainer = asyncio.ensure_future(self.drain())
        pipes[direction].add(self)

    def close(self):
        pipes[self.dir].discard(self)
        self.drainer.cancel()

    def feed(self, data):
        stamp = time.monotonic()
        frames = self.parse(data)
        lag = lags.get(self.dir)
        if self.dir in holding:
            self.queue.append([stamp, None, data, frames])
        elif lag is not None or self.queue:
            due = stamp + lag.at(stamp) if lag is not None else stamp
            self.last_due = max(self.last_due, due)
            self.queue.append([stamp, self.last_due, data, frames])
            self.wake.set()
        else:
            self.deliver(stamp, data, frames, False)

    def deliver(self, stamp, data, frames, late):
        self.writer.write(data)
        now = time.monotonic()
        read = " read=%.6f" % stamp if late else ""
        acts = []
        for _, text, info in frames:
            log_file.write("%.6f %s%s %s%s\n" % (now, self.prefix, self.dir, text, read))
            if triggered_by(info):
                acts.append(text)
        log_file.flush()
        if acts and trigger is not None:
            fire("after %s%s %s" % (self.prefix, self.dir, acts[0]))

    def release(self, count):
        """Forward the first count (bytes, frames) or the items read
        before a time; count: ("all"|"before"|"bytes"|"packets", n)."""
        how, n = count
        sent_bytes = sent_frames = 0
        if how in ("bytes", "packets") and n <= 0:
            return 0, 0
        while self.queue:
            item = self.queue[0]
            stamp, _, data, frames = item
            if how == "before" and stamp >= n:
                break
            take = len(data)
            if how == "bytes":
                take = min(take, n - sent_bytes)
            elif how == "packets":
                ends = [f[0] for f in frames]
                if len(ends) > n - sent_frames:
                    take = ends[n - sent_frames - 1]
            if take <= 0:
                break
            if take < len(data):
                head = [f for f in frames if f[0] <= take]
                item[2] = data[take:]
                item[3] = [(f[0] - take, f[1], f[2]) for f in frames if f[0] > take]
                self.deliver(stamp, data[:take], head, True)
                sent_bytes += take
                sent_frames += len(head)
                break
            self.queue.popleft()
            self.deliver(stamp, data, frames, True)
            sent_bytes += take
            sent_frames += len(frames)
            if how == "packets" and sent_frames >= n:
                break
        return sent_bytes, sent_frames

    def held(self):
        return (sum(len(i[2]) for i in self.queue), sum(len(i[3]) for i in self.queue),
                self.queue[0][0] if self.queue else None)

    async def drain(self):
        """Forwards lagged items at their due times."""
        while True:
            if not self.queue or self.queue[0][1] is None:
                self.wake.clear()
                await self.wake.wait()
                continue
            wait = self.queue[0][1] - time.monotonic()
            if wait > 0:
                self.wake.clear()
                try:
                    await asyncio.wait_for(self.wake.wait(), wait)
                except asyncio.TimeoutError:
                    pass
                continue
            stamp, _, data, frames = self.queue.popleft()
            try:
                self.deliver(stamp, data, frames, True)
            except (ConnectionError, OSError, RuntimeError):
                return


class Frames:
    """Splits a byte stream into 4-byte-length frames: (end offset in the
    data just fed, body) for each frame it completes."""

    def __init__(self):
        self.buf = b""

    def feed(self, data):
        start = len(self.buf)
        self.buf += data
        frames = []
        at = 0
        while len(self.buf) - at >= 4:
            n = struct.unpack(">i", self.buf[at:at + 4])[0]
            if n < 0 or len(self.buf) - at < 4 + n:
                break
            frames.append((at + 4 + n - start, self.buf[at + 4:at + 4 + n]))
            at += 4 + n
        self.buf = self.buf[at:]
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

    def parse_requests(self, data):
        return [(end, self.on_request(body), None)
                for end, body in self.requests.feed(data)]

    def parse_replies(self, data):
        return [(end,) + self.on_reply(body) for end, body in self.replies.feed(data)]

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
        """(log text, what a trigger looks at)"""
        if not self.connected:
            self.connected = True
            timeout, sid = struct.unpack(">iq", body[4:16])
            return "connected sid=0x%x timeout=%d" % (sid, timeout), None
        xid, zxid, err = struct.unpack(">iqi", body[:16])
        op = self.types.pop(xid, None)
        path = self.paths.pop(xid, None)
        return ("rep xid=%d zxid=0x%x err=%d type=%s" % (xid, zxid, err, op),
                ("reply", xid, err, path))


async def client_link(reader, writer, target_port):
    global next_conn_id
    if refusing_clients:
        log("client - - refused (by command)")
        writer.close()
        return
    target = await tcpproxy.connect_target(writer, target_port, None)
    if target is None:
        return
    server_reader, server_writer = target
    next_conn_id += 1
    conn = ClientConn(next_conn_id)
    prefix = "client %d " % conn.id
    to_server = Pipe("c>s", prefix, server_writer, conn.parse_requests)
    to_client = Pipe("s>c", prefix, writer, conn.parse_replies)
    await run_pumps(pump(reader, to_server), pump(server_reader, to_client),
                    writer, server_writer)
    to_server.close()
    to_client.close()


async def pump(reader, pipe, cut_drops=False):
    while True:
        data = await reader.read(65536)
        if not data:
            break
        if cut_drops and cut_at is not None:
            continue
        pipe.feed(data)


async def run_pumps(a, b, *writers):
    try:
        await asyncio.gather(a, b)
    except (ConnectionError, OSError):
        pass
    for w in writers:
        tcpproxy.reset(w)


class QuorumParser:
    """A quorum stream's packets.  On the leader's side a SNAP is followed
    by the raw snapshot: skipped up to the NEWLEADER that carries the zxid
    of the LEADERINFO.  A packet that makes no sense ends the parsing of
    the stream (logged once)."""

    def __init__(self, leader_side, prefix):
        self.leader_side = leader_side
        self.prefix = prefix
        self.buf = b""
        self.raw = False
        self.lost = False
        self.new_leader = None

    def feed(self, data):
        if self.lost:
            return []
        start = len(self.buf)
        self.buf += data
        out = []
        at = 0
        while True:
            if self.raw:
                mark = self.buf.find(self.new_leader, at)
                if mark < 0:
                    at = max(at, len(self.buf) - len(self.new_leader) + 1)
                    break
                at = mark
                self.raw = False
            try:
                qtype, zxid = struct.unpack(">iq", self.buf[at:at + 12])
                length = struct.unpack(">i", self.buf[at + 12:at + 16])[0]
                if qtype not in QUORUM_TYPES or length > MAX_PACKET:
                    self.lost = True
                    log(self.prefix + "unparsed from here (type %d, length %d)"
                        % (qtype, length))
                    return out
                payload, end = read_string(self.buf, at + 12)
                count = struct.unpack(">i", self.buf[end:end + 4])[0]
                end += 4
                for _ in range(max(count, 0) * 2):
                    _, end = read_string(self.buf, end)
            except struct.error:
                break
            if end > len(self.buf):
                break
            out.append((end - start, self.describe(qtype, zxid, payload), self.info(qtype, payload)))
            at = end
            if self.leader_side and qtype == 17:
                self.new_leader = struct.pack(">iq", 10, zxid)
            elif self.leader_side and qtype == 15 and self.new_leader is not None:
                self.raw = True
        self.buf = self.buf[at:]
        return out

    def describe(self, qtype, zxid, payload):
        text = "%s zxid=0x%x" % (QUORUM_TYPES[qtype], zxid)
        if payload is None:
            return text
        if qtype == 5 and not self.leader_side:
            text += " touched=" + ",".join("0x%x" % s for s in self.sessions(payload))
        elif qtype == 1 and len(payload) >= 16:
            text += " sid=0x%x cxid=%d type=%d" % struct.unpack(">qii", payload[:16])
        elif qtype == 6 and len(payload) >= 12 and not self.leader_side:
            text += " sid=0x%x timeout=%d" % struct.unpack(">qi", payload[:12])
        elif qtype == 2 and len(payload) >= 32:
            sid, cxid = struct.unpack(">qi", payload[:12])
            text += " sid=0x%x cxid=%d type=%d" % (sid, cxid,
                                                   struct.unpack(">i", payload[28:32])[0])
        return text

    def info(self, qtype, payload):
        if qtype == 5 and not self.leader_side and payload is not None:
            return ("touch", self.sessions(payload))
        return None

    @staticmethod
    def sessions(payload):
        return [struct.unpack(">q", payload[i:i + 8])[0]
                for i in range(0, len(payload) - 11, 12)]


class QuorumConn:
    def __init__(self, writer):
        self.writers = [writer]
        self.pipes = []

    def close(self):
        quorum_conns.discard(self)
        for p in self.pipes:
            p.close()
        for w in self.writers:
            tcpproxy.reset(w)


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
    if not parse:
        await run_pumps(plain_pump(reader, server_writer), plain_pump(server_reader, writer),
                        writer, server_writer)
        return
    quorum_conns.add(conn)
    to_leader = Pipe("f>l", prefix, server_writer, QuorumParser(False, prefix).feed)
    to_follower = Pipe("l>f", prefix, writer, QuorumParser(True, prefix).feed)
    conn.pipes = [to_leader, to_follower]
    await run_pumps(pump(reader, to_leader, True), pump(server_reader, to_follower, True),
                    writer, server_writer)
    conn.close()


async def plain_pump(reader, writer):
    while True:
        data = await reader.read(65536)
        if not data:
            break
        writer.write(data)


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


def direction(word):
    if word not in DIRS:
        raise ValueError("no direction %s (one of %s)" % (word, " ".join(DIRS)))
    return word


def arm(args):
    """arm [cut | hold DIR] KIND ARG"""
    global trigger, fired
    action = "cut"
    if args and args[0] == "cut":
        args = args[1:]
    elif args and args[0] == "hold":
        action, args = direction(args[1]), args[2:]
    if len(args) != 2 or args[0] not in ("create", "xid", "touch"):
        return "error arm: [cut | hold DIR] create SUBSTR | xid N | touch SID"
    kind, arg = args
    if kind == "xid":
        trigger = (action, "reply", int(arg), "xid")
    elif kind == "create":
        trigger = (action, "reply", arg, "create")
    else:
        trigger = (action, "touch", int(arg, 16))
    fired = asyncio.get_running_loop().create_future()
    log("relay - - armed %s %s %s" % (action, kind, arg))
    return "ok armed"


def release(args):
    d = direction(args[0])
    how = args[1] if len(args) > 1 else "all"
    if how == "all":
        count = ("all", None)
    elif how in ("before", "bytes", "packets") and len(args) == 3:
        count = (how, float(args[2]) if how == "before" else int(args[2]))
    else:
        return "error release: DIR [all | before MONO | packets N | bytes N]"
    sent_bytes = sent_frames = 0
    for pipe in list(pipes[d]):
        b, f = pipe.release(count)
        sent_bytes += b
        sent_frames += f
    if how == "all":
        holding.discard(d)
    left = sum(p.held()[0] for p in pipes[d])
    log("relay - - release %s %s: %d bytes, %d frames; %d bytes held"
        % (d, " ".join(args[1:]) or "all", sent_bytes, sent_frames, left))
    return "ok release %s %d bytes %d frames, %d bytes held %.6f" % (
        d, sent_bytes, sent_frames, left, time.monotonic())


def lag(args):
    d = direction(args[0])
    if args[1:] == ["off"]:
        lags.pop(d, None)
        sent = sum(p.release(("all", None))[0] for p in list(pipes[d])
                   if d not in holding)
        log("relay - - lag %s off: %d bytes at once" % (d, sent))
        return "ok lag %s off %d bytes %.6f" % (d, sent, time.monotonic())
    lo, hi = float(args[1]), float(args[2])
    rate = float(args[3]) if len(args) > 3 else 0.5
    seed = args[4] if len(args) > 4 else None
    if not 0 <= lo <= hi or not 0 < rate < 1:
        return "error lag: 0 <= MIN <= MAX, 0 < RATE < 1"
    now = time.monotonic()
    start = lags[d].at(now) if d in lags else 0.0
    lags[d] = Lag(lo, hi, rate, start, seed)
    log("relay - - lag %s %.3f..%.3f s at %.2f s/s (from %.3f s)" % (d, lo, hi, rate, start))
    return "ok lag %s %.6f" % (d, now)


async def command(cmd, args):
    """Carry out one control command; returns its answer."""
    global refusing_clients
    if cmd == "arm":
        return arm(args)
    if cmd == "wait" and len(args) == 1:
        if fired is None:
            return "error nothing armed"
        try:
            act, at = await asyncio.wait_for(asyncio.shield(fired), float(args[0]))
            return "%s %.6f" % (act, at)
        except asyncio.TimeoutError:
            return "timeout"
    if cmd == "cut":
        return "ok cut %.6f" % cut("by command")
    if cmd == "heal":
        heal()
        return "ok heal %.6f" % time.monotonic()
    if cmd == "hold" and len(args) == 1:
        return "ok hold %s %.6f" % (args[0], hold(direction(args[0]), "by command"))
    if cmd == "release" and args:
        return release(args)
    if cmd == "lag" and len(args) in (2, 3, 4, 5):
        return lag(args)
    if cmd == "held" and len(args) == 1:
        d = direction(args[0])
        counts = [p.held() for p in pipes[d]]
        oldest = [c[2] for c in counts if c[2] is not None]
        return "ok %s %d bytes %d frames%s" % (
            d, sum(c[0] for c in counts), sum(c[1] for c in counts),
            " since %.6f" % min(oldest) if oldest else "")
    if cmd == "refuse" and len(args) == 2 and args[0] == "client" and args[1] in ("on", "off"):
        refusing_clients = args[1] == "on"
        log("relay - - refuse client " + args[1])
        return "ok refuse client %s %.6f" % (args[1], time.monotonic())
    if cmd == "mark":
        log("relay - - mark " + " ".join(args))
        return "ok %.6f" % time.monotonic()
    return "error unknown command"


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
