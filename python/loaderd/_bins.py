"""_bins.py - where loaderd's programs (dpack, loaderd) are, for diagnose's swap measurement and
pack_list: $LOADERD_BIN_DIR, then PATH, then a `make install` (PREFIX /usr/local or /usr: its
bin/ directory), then the directory of the installed service's ExecStart (the systemd unit), then
the build/bin of the checkout this package sits in. A pip-installed package has only the client
library; the programs come from one of those.
"""
import os
import shutil

ENV = "LOADERD_BIN_DIR"
PREFIXES = ("/usr/local", "/usr")     # make install's default PREFIX, and a distribution's
UNITS = ("/etc/systemd/system/loaderd.service", "/usr/local/lib/systemd/system/loaderd.service",
         "/usr/lib/systemd/system/loaderd.service", "/lib/systemd/system/loaderd.service")


def _unit_dirs(units):
    """The directories of the programs the loaderd units start (ExecStart=)."""
    out = []
    for u in units:
        try:
            with open(u) as f:
                for ln in f:
                    ln = ln.strip()
                    if ln.startswith("ExecStart="):
                        prog = ln.split("=", 1)[1].lstrip("@-:+!").split()
                        if prog and os.path.isabs(prog[0]):
                            out.append(os.path.dirname(prog[0]))
        except OSError:
            continue
    return out


def candidates(name, prefixes=PREFIXES, units=UNITS):
    """Where @name is looked for, in order (paths, existing or not)."""
    d = os.environ.get(ENV)
    out = [os.path.join(d, name)] if d else []
    w = shutil.which(name)
    if w:
        out.append(w)
    out += [os.path.join(p, "bin", name) for p in prefixes]
    out += [os.path.join(u, name) for u in _unit_dirs(units)]
    here = os.path.dirname(os.path.abspath(__file__))
    out.append(os.path.join(here, "..", "..", os.environ.get("BUILD", "build"), "bin", name))
    return out


def find_bin(name, prefixes=PREFIXES, units=UNITS):
    """The path of loaderd program @name, or None."""
    for c in candidates(name, prefixes, units):
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return os.path.abspath(c)
    return None


def not_found(names):
    """What to do when programs @names are missing: the one-line error."""
    d = os.environ.get(ENV)
    return ("%s not found: looked in %s$PATH, %s, the loaderd service's ExecStart "
            "directory and this checkout's build/bin. Install loaderd (in its source tree: make "
            "&& sudo make install, PREFIX=/usr/local by default) or point $%s at the directory "
            "holding them (e.g. %s=$HOME/loaderd/build/bin)" %
            ("/".join(names), "$%s (%s), " % (ENV, d) if d else "$%s (unset), " % ENV,
             ", ".join(os.path.join(p, "bin") for p in PREFIXES), ENV, ENV))
