#!/usr/bin/env python3
"""s3_hold.py PORTFILE FLAG - a hostile S3 endpoint for tests/it_s3.sh: it takes every connection
and reads the request, then answers nothing (a store that never answers a HEAD or a GET) until the
file FLAG exists; from then on each request, held or new, is answered 403 at once and closed."""
import os, socket, sys, threading, time

def serve(c, flag):
    try:
        c.settimeout(0.1)
        while not os.path.exists(flag):
            try:
                if not c.recv(65536):
                    return
            except socket.timeout:
                pass
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
