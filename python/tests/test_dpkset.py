"""test_dpkset.py - the Python client on a set of .dpk shards (docs/FORMAT.md, "Sets of shards"):
the manifest's path is passed where a .dpk's is; an epoch sees every sample once, each the .npy
image of its id; a resume token taken in one shard resumes exactly in a new job, and is refused
once a shard is appended (the set's identity changed)."""
import subprocess

import pytest

np = pytest.importorskip("numpy", reason="the Python client tests need numpy (pip install numpy)")

import loaderd  # noqa: E402  (conftest puts python/ first on sys.path)
from conftest import BIN  # noqa: E402

BATCH = 4  # 30 samples in shards of 7 records: steps cross shard boundaries


@pytest.fixture
def dset(npyset, tmp_path):
    """npyset (30 raw 8x8x3 records of 192 bytes) cut into shards of 7 records each: a shard of
    7 is align64(4096 + 7 * 192) + 7 * 64 = 5952 bytes."""
    class Set:
        path = tmp_path / "set.dpks"
    x, y = npyset.path.parent / "x.npy", npyset.path.parent / "y.npy"
    subprocess.run([str(BIN / "dpack"), "pack", "--shard-size", "5952", str(x), str(y),
                    str(Set.path)], check=True, capture_output=True)
    lines = Set.path.read_text().splitlines()
    assert lines[0] == "dpkset 1" and lines[-1] == "end 5", lines
    assert [int(ln.split()[0]) for ln in lines[1:-1]] == [7, 7, 7, 7, 2]
    return Set


def run_epoch(daemon, ds, job, n=None, sd=None):
    with loaderd.Loader(daemon.sock, ds.path, BATCH, crop=None, output="numpy", job=job,
                        epochs=1, seed=5, return_meta=True) as it:
        if sd is not None:
            it.load_state_dict(sd)
        out = []
        for b in it:
            out.append(b.copy())
            if n is not None and len(out) == n:
                return out, it.state_dict()
        return out, None


def test_set_epoch_resume_and_append(daemon, npyset, dset, tmp_path):
    ref, _ = run_epoch(daemon, dset, "ref")
    ids = [i for b in ref for i in b.ids.tolist()]
    assert sorted(ids) == list(range(npyset.n)), "every sample of every shard once"
    for b in ref:
        for j, i in enumerate(b.ids.tolist()):
            assert np.array_equal(b.images[j], npyset.images[i]), f"sample {i}: bytes differ"
            assert b.labels[j] == npyset.labels[i]

    first, sd = run_epoch(daemon, dset, "stop", n=3)
    rest, _ = run_epoch(daemon, dset, "resumed", sd=dict(sd, job=None))
    got = first + rest
    assert [b.step for b in got] == [b.step for b in ref]
    for x, y in zip(got, ref):
        assert np.array_equal(x.ids, y.ids) and np.array_equal(x.images, y.images)

    # one more shard, a new pack of 2 samples (8 steps an epoch still): the set's identity
    # changes, so loaderd refuses the token
    subprocess.run([str(BIN / "dsgen"), "npy", str(tmp_path / "x3.npy"), str(tmp_path / "y3.npy"),
                    "--count", "2", "--height", "8", "--width", "8", "--channels", "3",
                    "--classes", "5", "--seed", "9"], check=True, capture_output=True)
    subprocess.run([str(BIN / "dpack"), "pack", str(tmp_path / "x3.npy"),
                    str(tmp_path / "y3.npy"), str(tmp_path / "more.dpk")], check=True,
                   capture_output=True)
    subprocess.run([str(BIN / "dpack"), "append", str(dset.path), str(tmp_path / "more.dpk")],
                   check=True, capture_output=True)
    with loaderd.Loader(daemon.sock, dset.path, BATCH, crop=None, output="numpy", job="after",
                        epochs=1, seed=5) as it:
        assert it.samples == npyset.n + 2
        it.load_state_dict(dict(sd, job=None))
        with pytest.raises(loaderd.LoaderdError, match="resume token: dataset"):
            it.open()


def test_window_shards_sets_block_to_the_largest_shard(daemon, npyset, dset):
    """window_shards=2 on shards of 7, 7, 7, 7, 2 records: block 7, window 2; a window's 14
    positions read 2 shards (the last window, positions 28..29, the short last shard); every
    sample once; the token records block 7, so a Loader with block=6 refuses it."""
    with loaderd.Loader(daemon.sock, dset.path, 2, crop=None, output="numpy", job="ws",
                        epochs=1, seed=5, return_meta=True, sampling="block",
                        window_shards=2) as it:
        order = [i for b in it for i in b.ids.tolist()]
        sd = it.state_dict()
    assert sorted(order) == list(range(npyset.n))
    for w0 in (0, 14):
        assert len({i // 7 for i in order[w0:w0 + 14]}) == 2, order
    assert sorted(order[28:]) == [28, 29]
    t = loaderd._lib.ldc_token.from_buffer_copy(sd["token"])
    assert (t.block, t.window) == (7, 2)
    with loaderd.Loader(daemon.sock, dset.path, 2, crop=None, output="numpy", job="ws2",
                        epochs=1, seed=5, sampling="block", block=6, window=2) as it:
        with pytest.raises(ValueError, match="resume token: block: the token has 7"):
            it.load_state_dict(dict(sd, window_shards=0, block=6, window=2))
    with pytest.raises(loaderd.LoaderdError, match="not a set of shards"):
        with loaderd.Loader(daemon.sock, npyset.path, 2, crop=None, output="numpy",
                            job="ws3", epochs=1, sampling="block", window_shards=2) as it:
            it.open()
