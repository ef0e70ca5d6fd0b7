"""daemon.py - start a loaderd and wait until it serves, through its --ready-fd: once its socket
listens and its workers run, loaderd writes "READY socket=PATH pid=PID" on that descriptor and
closes it; if it fails to start, the pipe reaches EOF instead. Standard library only (it needs no
libldc), for tests and benchmarks that run a loaderd of their own.

    with open("loaderd.log", "w+") as log:
        proc, line = loaderd.daemon.start(["build/bin/loaderd", "--socket", sock], log)
"""
import os
import select
import subprocess
import time

READY_TIMEOUT_S = 10


class StartError(RuntimeError):
    """loaderd exited before it served, or did not serve in time; the message ends with its log."""


def _tail(log, n=20):
    try:
        log.flush()
        with open(log.name, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except (AttributeError, OSError, TypeError):
        return "(no log)"


def wait_ready(fd, timeout):
    """The first line read from @fd within @timeout seconds, without its newline; "" at EOF or
    on timeout."""
    deadline = time.monotonic() + timeout
    buf = b""
    while b"\n" not in buf:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return ""
        chunk = os.read(fd, 256)
        if not chunk:
            return ""
        buf += chunk
    return buf.split(b"\n", 1)[0].decode(errors="replace")


def start(cmd, log, timeout=READY_TIMEOUT_S, **popen):
    """Start @cmd (loaderd and its options; --ready-fd is added) with stdout and stderr in the
    open file @log, and wait up to @timeout seconds until it serves. Returns (Popen, ready line).
    Raises StartError, with @log's tail, when loaderd exits first or is not ready in time (it is
    then killed). Other keyword arguments go to subprocess.Popen."""
    r, w = os.pipe()
    try:
        proc = subprocess.Popen([str(c) for c in cmd] + ["--ready-fd", str(w)], stdout=log,
                                stderr=subprocess.STDOUT, pass_fds=(w,), **popen)
    finally:
        os.close(w)
    try:
        line = wait_ready(r, timeout)
    finally:
        os.close(r)
    if line.startswith("READY"):
        return proc, line
    if proc.poll() is None:
        proc.kill()
        proc.wait()
        why = "loaderd did not serve within %.0f s" % timeout
    else:
        why = "loaderd exited (status %d) before serving" % proc.returncode
    raise StartError(why + ":\n" + _tail(log))
