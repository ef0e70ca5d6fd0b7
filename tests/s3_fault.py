#!/usr/bin/env python3
"""s3_fault.py PORTFILE - an HTTP server that misbehaves as stores do, for tests/test_s3.c's retry
and error cases (tests/it_s3.sh starts it). It checks no signature: moto is the real store; this is
the broken network and the overloaded store. It binds a free port on 127.0.0.1 and writes it to
PORTFILE. The path's second segment says what happens (the bucket is the first):

  /B/fail-N-CODE/KEY   the first N requests to this path get HTTP CODE with an S3 error document
                       (Code SlowDown; ExpiredToken for CODE 400), then 200 with the body
                       b"hello fault"
  /B/cut-N/KEY         the first N requests get half the bytes their Content-Length says, then the
                       connection closes; then 200 as above
  /B/reset-N/KEY       the first N requests get the connection closed before any answer
  /B/stall-N/KEY       the first N requests get their headers and then nothing for 5 s (a store
                       that stops sending mid-response)
  /B/corrupt/KEY       every request: the body above, under an ETag that is the MD5 of other
                       bytes (a store, or a network, that changed them)
  /B/size-N/KEY        a HEAD says Content-Length N (no body follows: a store that claims an
                       object of any size)
A Range header (bytes=A-B) is honoured on the 200 (as 206).
"""
import hashlib
import http.server
import re
import socket
import sys
import threading
import time

BODY = b"hello fault"
seen = {}
lock = threading.Lock()


class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def ranged(self):
        rng = re.match(r"bytes=(\d+)-(\d+)$", self.headers.get("Range", ""))
        if rng:
            return BODY[int(rng.group(1)):int(rng.group(2)) + 1], 206
        return BODY, 200

    def answer(self, head_only):
        with lock:
            k = seen[self.path] = seen.get(self.path, 0) + 1
        size = re.match(r"^/[^/]+/size-(\d+)/", self.path)
        if size and head_only:
            self.send_response(200)
            self.send_header("Content-Length", size.group(1))
            self.send_header("ETag", '"fa017"')
            self.end_headers()
            return
        m = re.match(r"^/[^/]+/(fail|cut|reset|stall)-(\d+)(?:-(\d+))?/", self.path)
        if m and k <= int(m.group(2)):
            what = m.group(1)
            if what == "fail":
                doc = (b"<?xml version='1.0'?><Error><Code>SlowDown</Code>"
                       b"<Message>Please reduce your request rate.</Message></Error>")
                if m.group(3) == "400":
                    doc = (b"<?xml version='1.0'?><Error><Code>ExpiredToken</Code>"
                           b"<Message>The provided token has expired.</Message></Error>")
                self.send_response(int(m.group(3)))
                self.send_header("Content-Length", str(len(doc)))
                self.end_headers()
                if not head_only:
                    self.wfile.write(doc)
                return
            if what == "stall":
                body = self.ranged()[0]
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.flush()
                time.sleep(5)
                self.close_connection = True
                return
            if what == "cut":
                body = self.ranged()[0]
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body[:len(body) // 2])
                self.wfile.flush()
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        body, code = self.ranged()
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        if "/corrupt/" in self.path:
            self.send_header("ETag", '"%s"' % hashlib.md5(b"other bytes").hexdigest())
        else:
            self.send_header("ETag", '"fa017"')
        self.end_headers()
        if not head_only:
            self.wfile.write(body)

    def do_GET(self):
        self.answer(False)

    def do_HEAD(self):
        self.answer(True)


srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(srv.server_address[1]))
import os  # noqa: E402
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
srv.serve_forever()
