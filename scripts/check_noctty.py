#!/usr/bin/env python3
"""check_noctty.py [ROOT] - every open loaderd's code makes carries O_NOCTTY.

loaderd may be a session leader with no controlling terminal (systemd starts services that way,
so does setsid): there, opening a terminal without O_NOCTTY makes it loaderd's controlling
terminal, and whoever holds the other end can then stop, core-dump or (hang-up) kill the daemon.
So in the folders the daemon is built from (loader/, formats/, codec/, common/, shm/), every call
of open, openat, open64 or openat64 names O_NOCTTY in its arguments, and nothing calls fopen,
freopen or creat (stdio cannot ask for O_NOCTTY: common/fdio.h's fd_fopen_read can). Comments and
string literals are not code. Prints one line per call refused, "file:line: what", and ends on
"noctty: N files, N opens, N refused"; exit 1 when any was refused.
"""
import os
import re
import sys

FOLDERS = ("loader", "formats", "codec", "common", "shm")
CALL = re.compile(r"(?<![A-Za-z0-9_>.])(open|openat|open64|openat64|fopen|freopen|creat)\s*\(")
TOKEN = re.compile(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)


def blank(m):
    """A comment or a literal, as spaces (newlines kept, so line numbers hold)."""
    return re.sub(r"[^\n]", " ", m.group(0))


def args_of(code, start):
    """The text from the call's '(' to its matching ')'."""
    depth = 0
    for i in range(start, len(code)):
        if code[i] == "(":
            depth += 1
        elif code[i] == ")":
            depth -= 1
            if depth == 0:
                return code[start:i + 1]
    return code[start:]


def refusals(path, rel):
    code = TOKEN.sub(blank, open(path, encoding="utf-8", errors="replace").read())
    out, calls = [], 0
    for m in CALL.finditer(code):
        calls += 1
        line = code.count("\n", 0, m.start()) + 1
        name = m.group(1)
        if name in ("fopen", "freopen", "creat"):
            out.append("%s:%d: %s cannot ask for O_NOCTTY (use fd_fopen_read, common/fdio.h)"
                       % (rel, line, name))
        elif "O_NOCTTY" not in args_of(code, m.end() - 1):
            out.append("%s:%d: %s without O_NOCTTY" % (rel, line, name))
    return out, calls


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    files = opens = refused = 0
    for folder in FOLDERS:
        for d, _, names in sorted(os.walk(os.path.join(root, folder))):
            for n in sorted(names):
                if not n.endswith(".c"):
                    continue
                path = os.path.join(d, n)
                rel = os.path.relpath(path, root)
                out, calls = refusals(path, rel)
                files += 1
                opens += calls
                for o in out:
                    print(o)
                refused += len(out)
    print("noctty: %d files, %d opens, %d refused" % (files, opens, refused))
    return 1 if refused else 0


if __name__ == "__main__":
    sys.exit(main())
