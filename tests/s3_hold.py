#!/usr/bin/env python3
"""s3_hold.py PORTFILE FLAG - a hostile S3 endpoint for tests/it_s3.sh: it takes every connection
and reads the request, then answers nothing (a store that never answers a HEAD or a GET) until the
file FLAG exists; from then on each request, held or new, is answered 403 at once and closed.
But /B/many-N/set.dpks is a set of N shards (a manifest whose ETag is its MD5, shards of 1 byte
whose HEADs are answered at once): their GETs are held as above, and the first one made touches
FLAG.get (the fetch is then past every HEAD)."""
import hashlib, os, re, socket, sys, threading, time

def manifest(n):
    return ("dpkset 1\n" + "".join("1 %032x s%05d.dpk\n" % (i, i) for i in range(n)) +
            "end %d\n" % n).encode()

def answer(c, code, body, etag, head):
    c.sendall(b"HTTP/1.1 %d OK\r\nContent-Length: %d\r\nETag: %s\r\n\r\n" %
              (code, len(body), etag.encode()) + (b"" if head else body))

def serve(c, flag):
    try:
        c.settimeout(0.1)
        buf = b""
        while not os.path.exists(flag):
            try:
                got = c.recv(65536)
                if not got:
                    return
                buf += got
            except socket.timeout:
                pass
            while b"\r\n\r\n" in buf:  # requests of a many-N set are answered (shard GETs held)
                req, buf = buf.split(b"\r\n\r\n", 1)
                m = re.match(rb"(GET|HEAD) /[^/]+/many-(\d+)/(\S+)", req)
                if not m:
                    buf = req + b"\r\n\r\n" + buf
                    break
                head = m.group(1) == b"HEAD"
                if m.group(3) == b"set.dpks":
                    body = manifest(int(m.group(2)))
                    answer(c, 200, body, '"%s"' % hashlib.md5(body).hexdigest(), head)
                elif head:
                    answer(c, 200, b"x", '"x-1"', True)
                else:
                    open(flag + ".get", "w").close()
                    buf = b""
                    break
        c.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
    except OSError:
        pass
    finally:
        c.close()

def main():
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 0))
    s.listen(128)
    with open(sys.argv[1] + ".tmp", "w") as f:
        f.write(str(s.getsockname()[1]))
    os.rename(sys.argv[1] + ".tmp", sys.argv[1])
    while True:
        c, _ = s.accept()
        threading.Thread(target=serve, args=(c, sys.argv[2]), daemon=True).start()

main()
