#!/usr/bin/python3
"""delay_proxy.py - a TCP delay line for tools/bench/s3_link.sh: this kernel has no sch_netem, so
the link's round-trip time is added here, in userspace, in front of the store.

  delay_proxy.py proxy LISTEN_HOST:PORT BACKEND_HOST:PORT DELAY_MS
      every byte read from either side is written to the other DELAY_MS later (a delay line, not
      stop-and-wait: bytes keep flowing while earlier ones wait), so a request/response pair
      waits 2 x DELAY_MS more. Reads pause while more than 16 MiB wait in one direction or the
      other side's socket is full (backpressure, no unbounded buffer).
  delay_proxy.py source LISTEN_HOST:PORT
      a server that writes zeros to whoever connects, as fast as it can (the proxy's ceiling).
  delay_proxy.py sink HOST:PORT BYTES
      read BYTES from HOST:PORT; print one JSON line {"bytes", "s", "MBps"}.

Python asyncio, reads of up to 256 KiB. Not part of `make test`.
"""
import asyncio
import collections
import json
import socket
import sys
import time

HIGH = 16 << 20


class Half(asyncio.Protocol):
    """One side of a proxied connection: what it reads goes to .peer, DELAY later."""

    def __init__(self, loop, delay):
        self.loop, self.delay = loop, delay
        self.peer = None           # the other Half
        self.transport = None
        self.q = collections.deque()  # (due, bytes or None for EOF)
        self.held = 0              # bytes waiting in q
        self.timer = None
        self.peer_full = False     # the peer's socket buffer is full
        self.paused = False
        self.early = []            # bytes read before the peer connected

    def connection_made(self, transport):
        self.transport = transport
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def _push(self, data):
        if self.peer is None or self.peer.transport is None:
            self.early.append(data)
            return
        self.q.append((self.loop.time() + self.delay, data))
        if data is not None:
            self.held += len(data)
        if self.timer is None:
            self._arm()
        self._flow()

    def _arm(self):
        if self.q:
            self.timer = self.loop.call_at(self.q[0][0], self._flush)
        else:
            self.timer = None

    def _flush(self):
        now = self.loop.time()
        pt = self.peer.transport
        while self.q and self.q[0][0] <= now:
            _, data = self.q.popleft()
            if data is None:
                if pt.can_write_eof():
                    pt.write_eof()
                else:
                    pt.close()
            else:
                self.held -= len(data)
                pt.write(data)
        self._arm()
        self._flow()

    def _flow(self):
        want = self.held > HIGH or self.peer_full
        if want and not self.paused:
            self.paused = True
            self.transport.pause_reading()
        elif not want and self.paused:
            self.paused = False
            self.transport.resume_reading()

    def data_received(self, data):
        self._push(data)

    def eof_received(self):
        self._push(None)
        return True  # keep the write side open until the peer is told

    def connection_lost(self, exc):
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.close()

    # our transport's write buffer: the peer must stop reading what it would send us
    def pause_writing(self):
        if self.peer is not None:
            self.peer.peer_full = True
            self.peer._flow()

    def resume_writing(self):
        if self.peer is not None:
            self.peer.peer_full = False
            self.peer._flow()


async def proxy(listen, backend, delay_ms):
    loop = asyncio.get_running_loop()
    delay = delay_ms / 1000.0
    bh, bp = backend

    async def accept(cl):
        try:
            _, srv = await loop.create_connection(lambda: Half(loop, delay), bh, bp)
        except OSError:
            cl.transport.close()
            return
        cl.peer, srv.peer = srv, cl
        for d in cl.early:
            cl._push(d)
        cl.early = []

    def factory():
        h = Half(loop, delay)
        loop.call_soon(lambda: loop.create_task(accept(h)))
        return h

    server = await loop.create_server(factory, listen[0], listen[1], reuse_address=True,
                                      backlog=256)
    print("delay_proxy: %s:%d -> %s:%d, %g ms each way" % (listen + backend + (delay_ms,)),
          flush=True)
    async with server:
        await server.serve_forever()


def source(listen):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(listen)
    s.listen(4)
    buf = bytes(1 << 20)
    while True:
        c, _ = s.accept()
        try:
            while True:
                c.sendall(buf)
        except OSError:
            c.close()


def sink(addr, n):
    c = socket.create_connection(addr)
    buf = bytearray(1 << 20)
    mv = memoryview(buf)
    got = 0
    t0 = time.monotonic()
    while got < n:
        k = c.recv_into(mv)
        if k == 0:
            break
        got += k
    s = time.monotonic() - t0
    c.close()
    print(json.dumps({"bytes": got, "s": round(s, 3), "MBps": round(got / 1e6 / s, 1)}))


def hp(a):
    h, p = a.rsplit(":", 1)
    return h, int(p)


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "proxy":
        asyncio.run(proxy(hp(sys.argv[2]), hp(sys.argv[3]), float(sys.argv[4])))
    elif len(sys.argv) == 3 and sys.argv[1] == "source":
        source(hp(sys.argv[2]))
    elif len(sys.argv) == 4 and sys.argv[1] == "sink":
        sink(hp(sys.argv[2]), int(sys.argv[3]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
