#!/usr/bin/python3
"""A loopback TCP proxy that loses replies on demand, for fault tests.

Usage: tcpproxy.py [--delay=MS] [--refuse] [--faulty=PATH]
                   LISTEN_PORT:TARGET_PORT [...]

Forwards 127.0.0.1:LISTEN_PORT to 127.0.0.1:TARGET_PORT and prints "ready"
once listening.  With --delay, every reply from the server reaches the
client MS milliseconds late (in order).  With --refuse, a connection whose
target is down is reset at once and the port stops listening for a moment,
as a closed port refuses: for ZooKeeper's quorum and election ports, whose
peers take a connection that is accepted and then closed for a live peer
and wait initLimit x tickTime before they try another (a leader killed
becomes an outage of that long).  With --faulty, SIGTTOU (below) makes the
server behind it act as a ZooKeeper 3.8.0 follower did whose data tree had
lost the node PATH after a resync with its leader: it lists PATH as missing
(NONODE), and a create of a child of PATH is carried out by the leader but
never answered (that server failed to serialize the reply and logged
"Destruction averted"); the client gets the next reply where it waited for
the create's.  Signals:

  SIGUSR1  drop every open connection at once;
  SIGUSR2  cut every open connection right after it has forwarded the
           client's next request: the server gets the request and acts on
           it, but its reply never reaches the client (a lost reply);
  SIGWINCH the same, but after the client's next create request (and
           whatever came with it): a create whose reply is lost;
  SIGHUP   start or stop refusing new connections (reset at once);
  SIGTTIN  start or stop a partition: the connections stay open but every
           byte either way is dropped (a link that went silent, not one
           that closed); when it stops, the partitioned connections are
           dropped, so that their ends connect again afresh;
  SIGTTOU  with --faulty, start or stop the faulty server's answers.

A cut resets the client's side and closes the server's side after the data,
so the server still reads the request.  SIGTERM stops the proxy.  Each of
the signals above is acknowledged with a line "done <SIG>" on stdout once it
has taken effect, so that a test knows what the next request will meet.
"""
import asyncio
import signal
import socket
import struct
import sys

connections = set()
refusing = False
refuse_when_down = False
# How long a --refuse port stays closed after its target was found down.
REFUSE_PAUSE_S = 0.2
partitioned = False
delay_s = 0.0
# How long the server's side of a cut connection stays open (see drop).
CUT_SERVER_GRACE_S = 1.0
# ZooKeeper's create, create2, createContainer and createTTL requests.
CREATE_OPS = (1, 15, 19, 21)
# getChildren, getChildren2; ZooKeeper's NONODE.
CHILDREN_OPS = (8, 12)
ZNONODE = -101
faulty_path = None
faulty = False


class Connection:
    def __init__(self, client_writer, server_writer):
        self.client_writer = client_writer
        self.server_writer = server_writer
        self.cut_after_request = False
        self.cut_after_create = False
        self.partitioned = False
        self.late = asyncio.Queue()
        self.closed = False
        self.cut = False
        # Client-side framing (4-byte length, then the request: xid, type,
        # ...), so that a cut comes after a whole request, however the
        # client split it.
        self.frame_left = 0
        self.header = b""
        self.request_head = b""
        # With --faulty: whole frames each way (the first is the session's
        # connect request or response), and what to do to the reply of
        # each request the faulty server mistreats, by xid.
        self.requests = b""
        self.replies = b""
        self.connect_request_seen = False
        self.connect_response_seen = False
        self.mistreated = {}

    def note_requests(self, data):
        """Mark the requests the faulty server mistreats, before they are
        forwarded (their replies may come back at once)."""
        self.requests += data
        while len(self.requests) >= 4:
            n = struct.unpack(">i", self.requests[:4])[0]
            if len(self.requests) < 4 + max(n, 0):
                return
            frame = self.requests[4:4 + max(n, 0)]
            self.requests = self.requests[4 + max(n, 0):]
            if not self.connect_request_seen:
                self.connect_request_seen = True
                continue
            if not faulty or len(frame) < 12:
                continue
            xid, op, length = struct.unpack(">iii", frame[:12])
            path = frame[12:12 + max(length, 0)].decode("utf-8", "replace")
            if op in CREATE_OPS and path.startswith(faulty_path + "/"):
                self.mistreated[xid] = "unanswered"
            elif op in CHILDREN_OPS and path == faulty_path:
                self.mistreated[xid] = "nonode"

    def mistreat_replies(self, data):
        """The server's bytes as the faulty server sends them: whole
        frames only, some dropped, some answered NONODE."""
        self.replies += data
        out = b""
        while len(self.replies) >= 4:
            n = struct.unpack(">i", self.replies[:4])[0]
            if len(self.replies) < 4 + max(n, 0):
                break
            frame = self.replies[:4 + max(n, 0)]
            self.replies = self.replies[4 + max(n, 0):]
            if not self.connect_response_seen or n < 16:
                self.connect_response_seen = True
                out += frame
                continue
            xid, zxid = struct.unpack(">iq", frame[4:16])
            how = self.mistreated.pop(xid, None)
            if how == "nonode":
                out += struct.pack(">iiqi", 16, xid, zxid, ZNONODE)
            elif how is None:
                out += frame
        return out

    def count_requests(self, data):
        """Advance the framing over data; return the requests it completed,
        and how many of them were creates."""
        completed = creates = 0
        i = 0
        while i < len(data):
            if self.frame_left == 0:
                need = 4 - len(self.header)
                self.header += data[i:i + need]
                i += need
                if len(self.header) == 4:
                    self.frame_left = struct.unpack(">i", self.header)[0]
                    self.header = b""
                    self.request_head = b""
                    if self.frame_left <= 0:
                        completed += 1
                        self.frame_left = 0
            else:
                take = min(self.frame_left, len(data) - i)
                if len(self.request_head) < 8:
                    self.request_head += data[i:i + min(take, 8 - len(self.request_head))]
                self.frame_left -= take
                i += take
                if self.frame_left == 0:
                    completed += 1
                    if (len(self.request_head) == 8 and
                            struct.unpack(">ii", self.request_head)[1] in CREATE_OPS):
                        creates += 1
        return completed, creates

    def drop(self):
        """Reset the client's side, close the server's side gracefully.

        After a cut, the server's side is closed only a while later: a
        ZooKeeper server drops a request whose connection closed before
        the request's turn came (a stale request), and the cut is to lose
        the reply of a request the server carried out."""
        if self.closed:
            return
        self.closed = True
        reset(self.client_writer)
        if self.cut:
            asyncio.get_running_loop().call_later(CUT_SERVER_GRACE_S,
                                                  self.server_writer.close)
        else:
            self.server_writer.close()
        connections.discard(self)


async def pump(reader, writer, conn, from_client):
    try:
        while not conn.closed:
            data = await reader.read(65536)
            if not data:
                break
            if partitioned or conn.partitioned:
                conn.partitioned = True
                continue
            if faulty_path is not None:
                if from_client:
                    conn.note_requests(data)
                else:
                    data = conn.mistreat_replies(data)
                    if not data:
                        continue
            if delay_s > 0 and not from_client:
                conn.late.put_nowait((asyncio.get_running_loop().time() + delay_s, data))
                continue
            writer.write(data)
            await writer.drain()
            if from_client:
                completed, creates = conn.count_requests(data)
                if ((conn.cut_after_request and completed > 0) or
                        (conn.cut_after_create and creates > 0)):
                    conn.cut = True
                    break
    except (ConnectionError, OSError):
        pass
    conn.drop()


async def deliver_late(conn):
    """With --delay: the server's bytes, each at its time, in order."""
    loop = asyncio.get_running_loop()
    try:
        while not conn.closed:
            due, data = await conn.late.get()
            await asyncio.sleep(max(0.0, due - loop.time()))
            conn.client_writer.write(data)
            await conn.client_writer.drain()
    except (ConnectionError, OSError):
        conn.drop()


def reset(writer):
    """Close a connection with a reset (RST), not an orderly FIN."""
    sock = writer.get_extra_info("socket")
    try:
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                            struct.pack("ii", 1, 0))
    except OSError:
        pass  # already closed
    writer.transport.abort()


async def connect_target(client_writer, target_port, listener):
    """Open the connection to the target before anything is forwarded;
    returns (reader, writer), or None once the client's side was reset
    (and, with --refuse, the listener closed for REFUSE_PAUSE_S)."""
    try:
        return await asyncio.open_connection("127.0.0.1", target_port)
    except OSError:
        reset(client_writer)
        if refuse_when_down and listener is not None:
            listener.pause()
        return None


class Listener:
    """A listening port that --refuse can close for a moment, so that
    connections are refused by the kernel while the target is down."""

    def __init__(self, port, handler):
        self.port = port
        self.handler = handler
        self.server = None
        self.paused = False

    async def start(self):
        self.server = await asyncio.start_server(
            lambda r, w: self.handler(r, w, self), "127.0.0.1", self.port)

    def pause(self):
        if self.paused:
            return
        self.paused = True
        self.server.close()
        asyncio.get_running_loop().call_later(REFUSE_PAUSE_S, self._resume)

    def _resume(self):
        async def reopen():
            try:
                await self.start()
            except OSError:
                asyncio.get_running_loop().call_later(REFUSE_PAUSE_S, self._resume)
                return
            self.paused = False
        asyncio.ensure_future(reopen())

    def close(self):
        if self.server is not None:
            self.server.close()


async def handle(client_reader, client_writer, target_port, listener=None):
    if refusing:
        reset(client_writer)
        return
    target = await connect_target(client_writer, target_port, listener)
    if target is None:
        return
    server_reader, server_writer = target
    conn = Connection(client_writer, server_writer)
    connections.add(conn)
    if delay_s > 0:
        late = asyncio.ensure_future(deliver_late(conn))
    await asyncio.gather(
        pump(client_reader, server_writer, conn, True),
        pump(server_reader, client_writer, conn, False))
    if delay_s > 0:
        late.cancel()


def drop_all():
    for conn in list(connections):
        conn.drop()


def toggle_refusing():
    global refusing
    refusing = not refusing


def toggle_partition():
    global partitioned
    partitioned = not partitioned
    if not partitioned:
        for conn in list(connections):
            if conn.partitioned:
                conn.drop()


def toggle_faulty():
    global faulty
    faulty = not faulty


def cut_after_next_request():
    for conn in list(connections):
        conn.cut_after_request = True


def cut_after_next_create():
    for conn in list(connections):
        conn.cut_after_create = True


def acknowledged(name, action):
    def handler():
        action()
        print("done", name, flush=True)
    return handler


async def main(pairs):
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGUSR1, acknowledged("USR1", drop_all))
    loop.add_signal_handler(signal.SIGUSR2,
                            acknowledged("USR2", cut_after_next_request))
    loop.add_signal_handler(signal.SIGWINCH,
                            acknowledged("WINCH", cut_after_next_create))
    loop.add_signal_handler(signal.SIGHUP,
                            acknowledged("HUP", toggle_refusing))
    loop.add_signal_handler(signal.SIGTTIN,
                            acknowledged("TTIN", toggle_partition))
    loop.add_signal_handler(signal.SIGTTOU,
                            acknowledged("TTOU", toggle_faulty))
    stop = loop.create_future()
    loop.add_signal_handler(signal.SIGTERM, stop.set_result, None)
    listeners = []
    for listen_port, target_port in pairs:
        listener = Listener(listen_port,
                            lambda r, w, l, t=target_port: handle(r, w, t, l))
        await listener.start()
        listeners.append(listener)
    print("ready", flush=True)
    await stop
    for listener in listeners:
        listener.close()
    drop_all()


if __name__ == "__main__":
    args = sys.argv[1:]
    while args and args[0].startswith("--"):
        opt = args.pop(0)
        if opt.startswith("--delay="):
            delay_s = int(opt[len("--delay="):]) / 1000.0
        elif opt == "--refuse":
            refuse_when_down = True
        elif opt.startswith("--faulty="):
            faulty_path = opt[len("--faulty="):]
        else:
            sys.exit("tcpproxy.py: unknown option " + opt)
    asyncio.run(main([tuple(int(p) for p in arg.split(":"))
                      for arg in args]))
