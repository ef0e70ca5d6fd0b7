"""conftest.py - fixtures for the Python client tests: the built programs, small datasets made
with dsgen + dpack, and a loaderd of our own on a temporary socket (stopped, and its files
removed, whatever the test did)."""
import hashlib
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("BUILD", "build"))
if not BUILD.is_absolute():
    BUILD = REPO / BUILD
BIN = BUILD / "bin"
LIB = BUILD / "lib" / "libldc.so"

# The package under test is the one in this tree, with the library of this build.
sys.path.insert(0, str(REPO / "python"))
os.environ.setdefault("LOADERD_LIB", str(LIB))


def run(*args):
    return subprocess.run([str(a) for a in args], check=True, capture_output=True, text=True)


@pytest.fixture(scope="session")
def bins():
    need = [BIN / "loaderd", BIN / "dsgen", BIN / "dpack", LIB]
    missing = [str(p) for p in need if not p.exists()]
    if missing:
        pytest.skip("not built (run make): " + ", ".join(missing))
    return BIN


def dpk_index(path):
    """[(offset, length, label)] of every record of a .dpk (docs/FORMAT.md), read directly."""
    data = Path(path).read_bytes()
    count, = struct.unpack_from("<Q", data, 16)
    index, = struct.unpack_from("<Q", data, 56)
    return [struct.unpack_from("<QQq", data, index + 64 * i) for i in range(count)], data


class Dataset:
    pass


@pytest.fixture(scope="session")
def workdir():
    """A temporary directory for the session's datasets, removed at the end."""
    d = Path(tempfile.mkdtemp(prefix="ldpy-data."))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="session")
def imagefolder(bins, workdir):
    """4 classes x 12 small JPEGs, packed as dpack does by default (rewritten with restart
    markers); .labels[id] is the class index of the file whose bytes are record id of the same
    tree packed with --keep-jpeg (same order), found by content (classes are the sorted folder
    names, as torchvision's)."""
    d = workdir / "imagefolder"
    d.mkdir()
    run(bins / "dsgen", "imagefolder", d / "tree", "--classes", 4, "--per-class", 12,
        "--min-side", 64, "--max-side", 160)
    run(bins / "dpack", "pack", d / "tree", d / "train.dpk")
    run(bins / "dpack", "pack", "--keep-jpeg", d / "tree", d / "kept.dpk")
    classes = sorted(p.name for p in (d / "tree").iterdir() if p.is_dir())
    by_hash = {}
    for ci, c in enumerate(classes):
        for f in (d / "tree" / c).iterdir():
            by_hash[hashlib.sha1(f.read_bytes()).hexdigest()] = ci
    entries, data = dpk_index(d / "kept.dpk")
    ds = Dataset()
    ds.path = d / "train.dpk"
    ds.tree = d / "tree"
    ds.n = len(entries)
    ds.labels = [by_hash[hashlib.sha1(data[o:o + n]).hexdigest()] for o, n, _ in entries]
    return ds


@pytest.fixture(scope="session")
def npyset(bins, workdir):
    """30 raw 8x8x3 images (records as stored: the ring holds them byte for byte)."""
    np = pytest.importorskip("numpy")
    d = workdir / "npy"
    d.mkdir()
    run(bins / "dsgen", "npy", d / "x.npy", d / "y.npy", "--count", 30, "--height", 8,
        "--width", 8, "--channels", 3, "--classes", 5)
    run(bins / "dpack", "pack", d / "x.npy", d / "y.npy", d / "raw.dpk")
    ds = Dataset()
    ds.path = d / "raw.dpk"
    ds.images = np.load(d / "x.npy")
    ds.labels = np.load(d / "y.npy")
    ds.n = len(ds.labels)
    return ds


class Daemon:
    def __init__(self, binary, sock=None):
        # A short directory of our own: unix socket paths are limited to 107 bytes.
        self.dir = tempfile.mkdtemp(prefix="ldpy.")
        self.sock = sock or os.path.join(self.dir, "loaderd.sock")
        self.log = open(os.path.join(self.dir, "loaderd.log"), "w+")
        from loaderd import daemon  # here: the package loads libldc, which the bins fixture checked
        try:
            self.proc, _ = daemon.start([binary, "--socket", self.sock, "--workers", "2"],
                                        self.log)
        except daemon.StartError:
            self.log.close()
            shutil.rmtree(self.dir, ignore_errors=True)
            raise

    def text(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def kill(self, sig=signal.SIGKILL):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        self.proc.wait(timeout=10)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def daemon(bins):
    d = Daemon(bins / "loaderd")
    yield d
    d.stop()
