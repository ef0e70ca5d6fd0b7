#!/usr/bin/env python3
"""ldfetch_stream.py LDFETCH LOCALDIR URL - drive ldfetch (tools/ldfetch.c) as loaderd does, over
the socketpair it takes as descriptor 3, through the streamed set's protocol (LDF_STREAM,
CTL_SHARD_WANT, CTL_SHARD_DROP: shm/ctl.h, docs/STREAMING.md) against a store (moto's; the
credentials, endpoint and region from AWS_* in the environment), for tests/it_ldfetch_stream.sh.
LOCALDIR holds the set as packed (set.dpks and its shards) to compare what is delivered with; URL is
that set in the store. One line per check, "ok - WHAT" or "not ok - WHAT" (and "# ..." notes); exit
0 when all passed. The 403 case needs STREAM_KEYS ("KEY SECRET" of a user whose policy the script
may change) and STREAM_DENY (a command that denies that user one shard, given its key)."""
import array
import fcntl
import os
import socket
import struct
import subprocess
import sys
import tempfile
import time

MAGIC, VERSION = 0x3143444C, 2
SHARD_FDS, ERROR, STATS_REQ, S3_OPEN, WANT, DROP, SIZES = 11, 5, 3, 14, 16, 17, 18
LDF_STREAM = 1
F_OFD_GETLK = 36
LDFETCH, LOCAL, URL = sys.argv[1:4]
UID = os.getuid()
fails = 0


def check(ok, what):
    global fails
    print(("ok - " if ok else "not ok - ") + what, flush=True)
    if not ok:
        fails += 1


def send(sock, typ, body, fds=()):
    hdr = struct.pack("<IHHII", MAGIC, VERSION, typ, 16 + len(body), 0)
    socket.send_fds(sock, [hdr + body], list(fds)) if fds else sock.send(hdr + body)


def recv(sock, timeout=10.0):
    """(type, body, fds), or None on timeout, or ('hup',) when the peer closed."""
    sock.settimeout(timeout)
    try:
        data, fds, _, _ = socket.recv_fds(sock, 8192, 4)
    except socket.timeout:
        return None
    finally:
        sock.settimeout(None)
    if not data:
        return ("hup", b"", [])
    magic, ver, typ, length, _ = struct.unpack("<IHHII", data[:16])
    assert magic == MAGIC and ver == VERSION and length == len(data), data[:16]
    return (typ, data[16:], fds)


def shard_list(idx, count=None, reserved=0, extra=b""):
    n = len(idx) if count is None else count
    return struct.pack("<II", n, reserved) + b"".join(struct.pack("<I", i) for i in idx) + extra


def error_of(msg):
    err = struct.unpack("<i", msg[1][:4])[0]
    return err, msg[1][4:260].split(b"\0")[0].decode()


class Fetcher:
    """ldfetch DIR SIZE PER_UID with our end of the socketpair as its descriptor 3."""

    def __init__(self, cache, size, per_uid, env=None):
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.log = open(cache + ".log", "w+")
        e = dict(os.environ)
        e.update(env or {})
        self.p = subprocess.Popen([LDFETCH, cache, str(size), str(per_uid)], pass_fds=[3],
                                  stderr=self.log, env=e,
                                  preexec_fn=lambda: os.dup2(theirs.fileno(), 3))
        theirs.close()

    def open(self, keys=None, flags=LDF_STREAM, uid=UID):
        """A streamed open: the request's socket (ours), as loaderd's srv_fetch makes it."""
        key, secret = keys or (os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"])
        ep, region = os.environ["AWS_ENDPOINT_URL"].encode(), os.environ["AWS_REGION"].encode()
        strs = [URL.encode(), ep, region, key.encode(), secret.encode(), b""]
        body = struct.pack("<II", uid, flags) + struct.pack("<6HI", *[len(s) for s in strs], 0)
        body += b"".join(strs)
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        send(self.sock, S3_OPEN, body, [theirs.fileno()])
        theirs.close()
        return mine

    def close(self):
        self.sock.close()
        self.p.wait(timeout=10)
        self.log.seek(0)
        return self.log.read()


def local(name):
    with open(os.path.join(LOCAL, name), "rb") as f:
        return f.read()


MANIFEST = local("set.dpks").decode()
SHARDS = [ln.split()[2] for ln in MANIFEST.splitlines()[1:] if len(ln.split()) == 3]
N = len(SHARDS)


def content(fd):
    return os.pread(fd, 1 << 20, 0)


def held_on_uid(fd):
    """Another open file of the same object conflicts with a write lock on byte UID."""
    o = os.open("/proc/self/fd/%d" % fd, os.O_RDONLY)
    try:
        fl = struct.pack("hhqqi4x", fcntl.F_WRLCK, 0, UID, 1, 0)
        r = fcntl.fcntl(o, F_OFD_GETLK, fl)
        return struct.unpack("hhqqi4x", r)[0] != fcntl.F_UNLCK
    finally:
        os.close(o)


def expect_shard(s, k, timeout=10.0):
    """The next message is shard k's delivery: its descriptor (checked against the local shard)."""
    m = recv(s, timeout)
    if not m or m[0] != SHARD_FDS or len(m[2]) != 1:
        print("# expected shard %d, got %r" % (k, m and (m[0], m[1][:80])))
        return None
    first, total, count, res = struct.unpack("<4I", m[1])
    if (first, total, count, res) != (k, N, 1, 0):
        print("# shard %d's message says %r" % (k, (first, total, count, res)))
        for fd in m[2]:
            os.close(fd)
        return None
    return m[2][0]


def stream_open(f, keys=None):
    """Open a stream: shard 0 then the manifest; returns (sock, shard0 fd, manifest fd)."""
    s = f.open(keys)
    fd0 = expect_shard(s, 0, 30)
    m = recv(s, 30)
    if not m or m[0] != ERROR or error_of(m)[0] != 0 or len(m[2]) != 1:
        print("# the open's answer: %r" % (m and (m[0], error_of(m) if m[0] == ERROR else m[1])))
        return s, fd0, None
    # then every shard's size in the store, in order, before anything else
    sizes = []
    while len(sizes) < N:
        z = recv(s, 30)
        if not z or z[0] != SIZES:
            print("# expected the shards' sizes, got %r" % (z and (z[0], z[1][:40])))
            break
        first, count = struct.unpack("<II", z[1][:8])
        if first != len(sizes) or len(z[1]) != 8 + 8 * count:
            print("# sizes from %d, %d of them, in %d bytes" % (first, count, len(z[1])))
            break
        sizes += struct.unpack("<%dQ" % count, z[1][8:])
    f.sizes = sizes
    return s, fd0, m[2][0]


def usage(cache):
    d = os.path.join(cache, "objects")
    return sum(os.stat(os.path.join(d, e)).st_blocks * 512 for e in os.listdir(d)
               if not e.startswith("."))


def main():
    tmp = tempfile.mkdtemp(prefix="ldfs.", dir=os.environ.get("T", "/tmp"))
    big = Fetcher(os.path.join(tmp, "big"), 1 << 30, 1 << 30,
                  {"LOADERD_CACHE_STREAM_INFLIGHT": "1"})
    # 1. the open: shard 0, then the manifest, each the store's bytes, each held on byte UID
    s, fd0, mfd = stream_open(big)
    check(fd0 is not None and mfd is not None and content(fd0) == local(SHARDS[0]) and
          content(mfd).decode() == MANIFEST,
          "a streamed open delivers shard 0 {first 0, total %d, count 1}, then the manifest "
          "(CTL_ERROR 0), each the store's bytes" % N)
    check(fd0 is not None and held_on_uid(fd0) and held_on_uid(mfd),
          "... each read-locked on byte UID before it is sent")
    want = [len(local(k)) for k in SHARDS]
    check(getattr(big, "sizes", None) == want,
          "... then every shard's size in the store, in order (CTL_SHARD_SIZES): %r" % want[:4])
    # 2. WANT [3,1,2] with one in flight: delivered 3, 1, 2; nothing more until asked
    send(s, WANT, shard_list([3, 1, 2]))
    got = {k: expect_shard(s, k) for k in (3, 1, 2)}
    check(all(got[k] is not None and content(got[k]) == local(SHARDS[k]) for k in got),
          "WANT [3,1,2] (one in flight): shards 3, 1, 2 delivered in that order, the store's bytes")
    check(recv(s, 0.3) is None, "... and nothing else: each shard once (0 is delivered already)")
    # the list replaced: a WANT naming delivered shards and a new one delivers the new one only
    send(s, WANT, shard_list([1, 2, 5]))
    fd5 = expect_shard(s, 5)
    check(fd5 is not None and recv(s, 0.3) is None,
          "WANT [1,2,5] after them: 5 alone (a shard is delivered once per stream)")
    # 3. DROP then WANT again: delivered again
    os.close(got[1])
    send(s, DROP, shard_list([1]))
    send(s, WANT, shard_list([1]))
    fd1 = expect_shard(s, 1)
    check(fd1 is not None and content(fd1) == local(SHARDS[1]),
          "DROP [1] then WANT [1]: shard 1 delivered again")
    # a DROP of a shard not delivered is refused, naming it
    send(s, DROP, shard_list([6]))
    m = recv(s)
    check(m and m[0] == ERROR and "CTL_SHARD_DROP: shard 6, which is not delivered" in error_of(m)[1],
          "DROP of a shard never delivered: CTL_ERROR naming it (%s)" % (m and m[0] == ERROR and error_of(m)[1]))
    m = recv(s, 5)
    check(m is not None and m[0] == "hup", "... then the stream ends (the socket hangs up)")
    s.close()
    # 4. a second stream of the same uid, the first still open: answered (a stream is not the
    # uid's running request past its open)
    s1, a0, am = stream_open(big)
    s2, b0, bm = stream_open(big)
    check(b0 is not None and bm is not None,
          "a second stream of the same uid opens while the first streams on")
    send(s1, WANT, shard_list([4]))
    check(expect_shard(s1, 4) is not None, "... and the first still serves its WANTs")
    for x in (s1, s2):
        x.close()
    # 5. malformed lists: CTL_ERROR naming the field, then the stream ends
    cases = [
        ("count past CTL_SHARD_LIST_MAX", shard_list(list(range(N)), count=1001, extra=b""),
         "count 1001, above CTL_SHARD_LIST_MAX (1000)"),
        ("an index at the set's count", shard_list([1, N]), "is shard %d: the set has %d shards" % (N, N)),
        ("a shard twice", shard_list([2, 3, 2]), "names shard 2 twice"),
        ("reserved set", shard_list([1], reserved=7), "reserved field set (7)"),
        ("length one byte long", shard_list([1, 2], extra=b"\0"), "of 17 bytes whose count 2 says 16"),
        ("length one byte short", shard_list([1, 2])[:-1], "of 15 bytes whose count 2 says 16"),
    ]
    for what, body, needle in cases:
        x, _, _ = stream_open(big)
        send(x, WANT, body)
        m = recv(x)
        text = m and m[0] == ERROR and error_of(m)
        check(text and text[0] == 22 and "CTL_SHARD_WANT" in text[1] and needle in text[1],
              "WANT with %s: CTL_ERROR EINVAL naming it (%s)" % (what, text and text[1]))
        m = recv(x, 5)
        check(m is not None and m[0] == "hup", "... and the stream ends")
        x.close()
    x, _, _ = stream_open(big)
    send(x, STATS_REQ, b"")
    m = recv(x)
    check(m and m[0] == ERROR and "a message of type 3 on the stream" in error_of(m)[1],
          "another message on the stream: CTL_ERROR naming its type")
    x.close()
    # hangup: the child exits quietly
    x, _, _ = stream_open(big)
    x.close()
    time.sleep(0.3)
    log = big.close()
    check("Traceback" not in log and "poll:" not in log and log.count("streamed, %d shards" % N) >= 10,
          "a hangup ends the stream quietly (ldfetch's log: opens only, no error)")
    # 6. a cache smaller than the set: the manifest and 3 shards' blocks
    blk = lambda n: (n + 4095) // 4096 * 4096
    bound = blk(len(MANIFEST)) + 3 * blk(len(local(SHARDS[0])))
    cache = os.path.join(tmp, "small")
    small = Fetcher(cache, bound, 1 << 30, {"LOADERD_CACHE_STREAM_INFLIGHT": "4"})
    s, fd0, mfd = stream_open(small)
    send(s, WANT, shard_list([1, 2, 3, 4]))
    fds = {k: expect_shard(s, k) for k in (1, 2)}
    check(fds[1] is not None and fds[2] is not None and recv(s, 0.6) is None,
          "a cache of the manifest and 3 shards: WANT [1,2,3,4] delivers 1 and 2, then waits "
          "(every shard held)")
    check(usage(cache) <= bound, "... the cache within its bound (%d <= %d)" % (usage(cache), bound))
    path1 = os.readlink("/proc/self/fd/%d" % fds[1])  # its objects/HASH
    os.close(fds[1])
    send(s, WANT, shard_list([3, 4]))
    fd3 = expect_shard(s, 3)
    check(fd3 is not None and content(fd3) == local(SHARDS[3]) and recv(s, 0.4) is None,
          "WANT [3,4]: shard 3 comes into the room of shard 1, which nobody holds any more "
          "(its DROP not come yet), then 4 waits")
    check(not os.path.exists(path1), "... shard 1, let go, was evicted for it (%s)" % path1)
    send(s, DROP, shard_list([1]))
    check(recv(s, 0.4) is None, "DROP [1] (evicted already): 4 still waits, every other shard held")
    check(all(os.fstat(fd).st_nlink >= 1 for fd in (fd0, fds[2], fd3)),
          "... the shards held (0, 2, 3) never evicted: each still in the cache")
    check(usage(cache) <= bound, "... the cache within its bound (%d <= %d)" % (usage(cache), bound))
    os.close(fds[2])
    send(s, DROP, shard_list([2]))
    fd4 = expect_shard(s, 4)
    os.close(fd3)
    send(s, WANT, shard_list([1]))
    send(s, DROP, shard_list([3]))
    fd1 = expect_shard(s, 1)
    check(fd1 is not None and content(fd1) == local(SHARDS[1]) and os.path.exists(path1) and
          os.readlink("/proc/self/fd/%d" % fd1) == path1,
          "DROP then WANT again a shard evicted meanwhile: fetched again from the store (a new file)")
    check(usage(cache) <= bound and fd4 is not None, "... the cache within its bound throughout")
    s.close()
    small.close()
    # 7. a shard the store refuses mid-stream (403): CTL_ERROR naming the object
    keys = os.environ.get("STREAM_KEYS")
    if keys:
        f = Fetcher(os.path.join(tmp, "deny"), 1 << 30, 1 << 30)
        s, fd0, mfd = stream_open(f, keys.split())
        subprocess.run(os.environ["STREAM_DENY"], shell=True, check=True)
        send(s, WANT, shard_list([5]))
        m = recv(s, 30)
        text = m and m[0] == ERROR and error_of(m)
        check(text and text[0] == 13 and SHARDS[5] in text[1] and "AccessDenied" in text[1],
              "a shard the store refuses mid-stream: CTL_ERROR EACCES naming the object and the "
              "store's code (%s)" % (text and text[1]))
        m = recv(s, 5)
        check(m is not None and m[0] == "hup", "... and the stream ends")
        s.close()
        f.close()
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
