"""test_lifetime.py - a batch held across a re-attach keeps its bytes, and its ring is unmapped
with the last array of it. Regression: Loader._disconnect unmapped the ring under arrays the
caller still held (seek, load_state_dict, the re-attach after a daemon restart), so that an old
batch read another step's pixels from the next ring mapped at the same address, or crashed.
Both paths, with numpy arrays, torch tensors and torch.from_numpy of numpy arrays; the mappings
are counted in /proc/self/maps."""
import gc
import signal

import pytest

np = pytest.importorskip("numpy", reason="the Python client tests need numpy (pip install numpy)")

import loaderd  # noqa: E402
from conftest import Daemon  # noqa: E402

BATCH, CROP = 5, 32


def rings(base=0):
    """Distinct loaderd rings this process maps (by the memfd's inode), less @base (those mapped
    before the test: arrays another test left to the garbage collector)."""
    gc.collect()
    inodes = set()
    with open("/proc/self/maps") as f:
        for line in f:
            if "memfd:loaderd-ring-" in line:
                inodes.add(line.split()[4])
    return len(inodes) - base


def make(daemon, ds, output, **kw):
    return loaderd.Loader(daemon.sock, ds.path, BATCH, crop=CROP, epochs=2, seed=7,
                          output=output, return_meta=True, **kw)


def as_numpy(x):
    return x.numpy() if hasattr(x, "numpy") else x


def hold(batch, how):
    """What a caller keeps of @batch: its images and labels as they come, or (numpy output) as
    torch tensors made with torch.from_numpy, the numpy arrays themselves dropped."""
    images, labels = batch.images, batch.labels
    if how == "from_numpy":
        torch = pytest.importorskip("torch")
        images, labels = torch.from_numpy(images), torch.from_numpy(labels)
    return images, labels


def check_kept(it, kept, want, step):
    images, labels = kept
    lo, hi = it._base, it._base + it._ring_buf._length_
    ptr = images.data_ptr() if hasattr(images, "data_ptr") else images.ctypes.data
    assert not lo <= ptr < hi, "the held batch lies in the new ring"
    assert np.array_equal(as_numpy(images), want[0]), f"step {step}: the held pixels changed"
    assert np.array_equal(as_numpy(labels), want[1])


CASES = [("numpy", "views"), ("numpy", "from_numpy"), ("torch", "views")]


def _skip_without_torch(output, how):
    if output == "torch" or how == "from_numpy":
        pytest.importorskip("torch", reason="torch is not installed")


@pytest.mark.parametrize("output,how", CASES)
def test_batch_held_across_seek_keeps_its_bytes(daemon, imagefolder, output, how):
    _skip_without_torch(output, how)
    base = rings()
    it = make(daemon, imagefolder, output, job=f"seek-{output}-{how}")
    g = iter(it)
    b = next(g)
    step = b.step
    kept = hold(b, how)
    want = (np.array(as_numpy(b.images)), np.array(as_numpy(b.labels)))
    sd = it.state_dict()
    del b
    it.seek(1, 3)                       # a new ring; the old one must stay for `kept`
    b2 = next(iter(it))
    assert (b2.epoch, b2.step_in_epoch) == (1, 3)
    assert rings(base) == 2
    check_kept(it, kept, want, step)
    it.load_state_dict(sd)              # back again: a third ring, the second one goes
    del b2
    b3 = next(iter(it))
    assert b3.step == step + 1
    assert rings(base) == 2, "the second ring, no longer viewed, was not unmapped"
    check_kept(it, kept, want, step)
    del g, b3
    gc.collect()
    assert rings(base) == 2
    kept = None
    assert rings(base) == 1, "the first ring outlived its last array"
    it.close()
    assert rings(base) == 0, "close() with no array left unmaps"


@pytest.mark.parametrize("output,how", CASES)
def test_batch_held_across_a_daemon_restart_keeps_its_bytes(daemon, bins, imagefolder, output,
                                                            how):
    _skip_without_torch(output, how)
    base = rings()
    it = make(daemon, imagefolder, output, job=f"rs-{output}-{how}", slots=2)
    g = iter(it)
    next(g)
    b = next(g)
    step = b.step
    kept = hold(b, how)
    want = (np.array(as_numpy(b.images)), np.array(as_numpy(b.labels)))
    del b
    daemon.kill(signal.SIGKILL)
    with pytest.raises(loaderd.LoaderdError):
        for _ in range(100):
            next(g)
    d2 = Daemon(bins / "loaderd", sock=daemon.sock)
    try:
        b2 = next(iter(it))              # the silent re-attach, to the new daemon
        assert rings(base) == 2
        check_kept(it, kept, want, step)
        del g, b2
        gc.collect()
        kept = None
        assert rings(base) == 1, "the dead daemon's ring outlived its last array"
        it.close()
        assert rings(base) == 0
    finally:
        it.close()
        d2.stop()


def test_close_keeps_a_held_batch(daemon, imagefolder):
    base = rings()
    it = make(daemon, imagefolder, "numpy", job="close")
    b = next(iter(it))
    want = np.array(b.images)
    it.close()
    assert rings(base) == 1
    assert np.array_equal(b.images, want)
    del b
    gc.collect()
    assert rings(base) == 0
