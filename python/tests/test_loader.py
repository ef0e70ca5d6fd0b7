"""test_loader.py - the Python client against a real loaderd, numpy output (no torch needed):
an epoch sees every sample once with its ImageFolder label; the ring views hold the right bytes;
state_dict()/load_state_dict() resume exactly; a killed daemon raises within a second."""
import gc
import json
import os
import shutil
import signal
import subprocess
import time

import pytest

np = pytest.importorskip("numpy", reason="the Python client tests need numpy (pip install numpy)")

import loaderd  # noqa: E402  (conftest puts python/ first on sys.path)
from conftest import BIN, REPO  # noqa: E402

BATCH = 5        # 48 samples: 10 steps per epoch, the last one of 3
CROP = 32


def loader(daemon, ds, **kw):
    kw.setdefault("output", "numpy")
    kw.setdefault("crop", CROP)
    kw.setdefault("return_meta", True)
    return loaderd.Loader(daemon.sock, ds.path, kw.pop("batch_size", BATCH), **kw)


def steps(it, n=None):
    """Up to @n batches of the current epoch (all when None) as owned copies."""
    out = []
    for b in it:
        out.append(b.copy())
        if n is not None and len(out) == n:
            break
    return out


def same(a, b):
    assert [x.step for x in a] == [x.step for x in b]
    for x, y in zip(a, b):
        assert (x.epoch, x.step_in_epoch, x.count) == (y.epoch, y.step_in_epoch, y.count)
        assert np.array_equal(x.ids, y.ids), f"step {x.step}: ids differ"
        assert np.array_equal(x.labels, y.labels)
        assert np.array_equal(x.images, y.images), f"step {x.step}: pixels differ"


def test_abi_matches_the_c_headers(tmp_path):
    """Every field of every mirrored struct at the C offset (compiled here when cc exists)."""
    loaderd.abi_check()
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        pytest.skip("no C compiler to read the layout from")
    from loaderd import _lib as L
    lines = ['#include "shm/ldc.h"', "#include <stdio.h>", "int main(void) {"]
    expect = []
    for st in (L.ldc_job, L.ldc_info, L.ldc_batch, L.ring_hdr, L.ring_slot_hdr, L.ctl_stats):
        n = st.__name__
        lines.append(f'printf("%zu\\n", sizeof(struct {n}));')
        expect.append(L.ctypes.sizeof(st))
        for f, _ in st._fields_:
            lines.append(f'printf("%zu\\n", offsetof(struct {n}, {f}));')
            expect.append(getattr(st, f).offset)
    lines += ["return 0;", "}"]
    src = tmp_path / "abi.c"
    src.write_text("\n".join(lines))
    subprocess.run([cc, "-std=c11", "-D_GNU_SOURCE", f"-I{REPO}", str(src), "-o",
                    str(tmp_path / "abi")], check=True)
    got = [int(x) for x in subprocess.run([str(tmp_path / "abi")], check=True,
                                          capture_output=True, text=True).stdout.split()]
    assert got == expect


def test_full_epoch_every_sample_once_with_its_label(daemon, imagefolder):
    with loader(daemon, imagefolder, epochs=1) as it:
        assert len(it) == 10
        assert it.samples == imagefolder.n
        seen = []
        batches = 0
        for b in it:
            assert isinstance(b.images, np.ndarray) and b.images.dtype == np.uint8
            assert b.images.shape == (b.count, CROP, CROP, 3)
            assert b.labels.dtype == np.int64 and b.ids.dtype == np.uint64
            assert (b.step, b.epoch, b.step_in_epoch) == (batches, 0, batches)
            assert not b.flags.any() and it.last_flags is b.flags
            assert np.array_equal(b.weights, np.ones(b.count, np.float32))
            assert b.last == (batches == 9)
            assert b.images.std() > 0, "decoded images are not blank"
            for i, lab in zip(b.ids.tolist(), b.labels.tolist()):
                assert lab == imagefolder.labels[i], f"sample {i}: label {lab}"
                seen.append(i)
            batches += 1
        assert batches == 10 and b.count == 3
        assert sorted(seen) == list(range(imagefolder.n))
        assert list(it) == [], "the job had one epoch"
        assert it.position == (1, 0)


def test_tuples_by_default_and_ranks_are_disjoint(daemon, imagefolder):
    """world 5 over 48 samples: 10 per rank, the 2 extra flagged padding with weight 0."""
    seen, padded = [], 0
    its = [loader(daemon, imagefolder, job="disjoint", rank=r, world_size=5, tail="mask",
                  epochs=1, return_meta=False) for r in range(5)]
    try:
        for it in its:
            assert len(it) == 2
            for images, labels in it:
                assert images.shape[1:] == (CROP, CROP, 3) and len(labels) == len(images)
                b = it.last_batch
                for i, f, w in zip(b.ids.tolist(), b.flags.tolist(), b.weights.tolist()):
                    if f & loaderd.SAMPLE_PADDING:
                        assert w == 0.0
                        padded += 1
                    else:
                        assert w == 1.0
                        seen.append(i)
        assert its[0].job_name == its[4].job_name == "disjoint"
    finally:
        for it in its:
            it.close()
    assert sorted(seen) == list(range(imagefolder.n)) and padded == 2


def test_ring_bytes_are_the_records(daemon, npyset):
    """Records as stored (crop=None): each image view is exactly the .npy image of its id."""
    with loader(daemon, npyset, crop=None, batch_size=7, sampling="sequential", epochs=1) as it:
        n = 0
        for b in it:
            assert b.images.shape == (b.count, 8, 8, 3)
            for j, i in enumerate(b.ids.tolist()):
                assert np.array_equal(b.images[j], npyset.images[i])
                assert b.labels[j] == npyset.labels[i]
            n += b.count
        assert n == npyset.n


def test_views_are_zero_copy_and_released_on_next(daemon, imagefolder):
    with loader(daemon, imagefolder, slots=2) as it:
        g = iter(it)
        b0 = next(g)
        base = it._base
        assert base <= b0.images.ctypes.data < base + it._ring_buf._length_
        assert it.stats()["occupancy"] >= 1
        next(g)
        st = it.stats()
        assert st["released"] == 1, "the first slot goes back when the second batch is taken"


def test_state_dict_resume_continues_exactly(daemon, imagefolder):
    """Reference: 2 epochs in one go. Then: stop at epoch 1 step 3 and resume from the state's
    token, (a) in a new job (as after a loaderd restart), (b) reattaching to the same job, (c) at
    a position of another rank's state: each starts exactly there, nothing taken and dropped."""
    with loader(daemon, imagefolder, job="ref", epochs=2, seed=3) as it:
        ref = steps(it) + steps(it)
    assert len(ref) == 20

    with loader(daemon, imagefolder, job="stop", epochs=2, seed=3) as it:
        first = steps(it) + steps(it, 3)
        sd = it.state_dict()
    assert (sd["epoch"], sd["step_in_epoch"], sd["step"]) == (1, 3, 13)
    assert isinstance(sd["token"], bytes) and len(sd["token"]) == 112

    # (a) a fresh job (the state names none)
    with loader(daemon, imagefolder, job="other", epochs=2, seed=3) as it:
        it.load_state_dict(dict(sd, job=None))
        assert len(it) == 10
        for epoch in range(sd["epoch"], 2):
            it.set_epoch(epoch)           # the usual loop: a no-op mid-way through epoch 1
            rest = steps(it)
        assert it.job_name == "other" and it.skipped_steps == 0
        assert it.stats()["published"] == 7, "loaderd filled steps 13..19 only"
    same(first + rest, ref)

    # (b) the loop of a restarted process: same job, exactly at the state's step
    with loader(daemon, imagefolder, job="stop2", epochs=2, seed=3) as it:
        first = steps(it) + steps(it, 3)
        sd = it.state_dict()
    with loader(daemon, imagefolder, job="stop2", epochs=2, seed=3) as it:
        it.load_state_dict(sd)
        rest = steps(it)
        assert it.job_name == "stop2" and it.skipped_steps == 0
        assert list(it) == []
    same(first + rest, ref)

    # (c) a fresh job that starts mid-epoch 0, at a position saved by another rank's Loader
    with loader(daemon, imagefolder, job="stop3", epochs=2, seed=3) as it:
        it.load_state_dict(dict(sd, token=None, version=1, epoch=0, step_in_epoch=7, step=7,
                                job=None))
        rest = steps(it)
        assert it.skipped_steps == 0 and it.position == (1, 0)
    same(rest, ref[7:10])


def test_state_dict_token_refused_when_it_does_not_fit(daemon, imagefolder, tmp_path):
    """A damaged token, and tokens for another seed or another dataset, are refused by name."""
    with loader(daemon, imagefolder, job="tk", epochs=2, seed=3) as it:
        steps(it, 2)
        sd = it.state_dict()
    bad = bytearray(sd["token"])
    bad[24] ^= 1
    with loader(daemon, imagefolder, job="tk2", epochs=2, seed=3) as it:
        with pytest.raises(ValueError, match="checksum"):
            it.load_state_dict(dict(sd, token=bytes(bad)))
        with pytest.raises(ValueError, match="truncated"):
            it.load_state_dict(dict(sd, token=sd["token"][:50]))
    with loader(daemon, imagefolder, job="tk3", epochs=2, seed=4) as it:
        with pytest.raises(ValueError, match="seed"):
            it.load_state_dict(dict(sd, seed=4))
    # the same images packed again with one moved to another class: as many samples and
    # steps, another dataset identity (its index differs), so loaderd refuses the token
    tree = tmp_path / "tree"
    shutil.copytree(imagefolder.tree, tree)
    a, b = sorted(p for p in tree.iterdir() if p.is_dir())[:2]
    f = sorted(a.iterdir())[0]
    shutil.move(str(f), str(b / f.name))
    subprocess.run([str(BIN / "dpack"), "pack", str(tree),
                    str(tmp_path / "moved.dpk")], check=True, capture_output=True)

    class Moved:
        path = tmp_path / "moved.dpk"
    with loader(daemon, Moved, job="tk4", epochs=2, seed=3) as it:
        it.load_state_dict(sd)
        with pytest.raises(loaderd.LoaderdError, match="resume token: dataset"):
            it.open()


def test_state_dict_refuses_another_configuration(daemon, imagefolder):
    with loader(daemon, imagefolder, epochs=1) as it:
        sd = it.state_dict()
    with loader(daemon, imagefolder, batch_size=6, epochs=1) as it:
        with pytest.raises(ValueError, match="batch_size"):
            it.load_state_dict(sd)


def test_block_sampling_geometry_two_ranks_and_resume(daemon, imagefolder):
    """sampling="block" with block=5, window=2 (windows of 10 records, the last one short):
    2 ranks see every sample once per epoch; a window's 10 positions read 2 blocks; the state
    carries the geometry, resumes exactly, and a Loader of another block refuses it by name."""
    seen = []
    its = [loader(daemon, imagefolder, job="blk", rank=r, world_size=2, epochs=1, seed=4,
                  sampling="block", block=5, window=2, batch_size=5) for r in range(2)]
    try:
        per_rank = [[i for b in steps(it) for i in b.ids.tolist()] for it in its]
    finally:
        for it in its:
            it.close()
    for ids in per_rank:
        seen += ids
    assert sorted(seen) == list(range(imagefolder.n))
    # DistributedSampler order: position p is rank p % 2's (p // 2)-th sample
    order = [per_rank[p % 2][p // 2] for p in range(imagefolder.n)]
    for w0 in range(0, 40, 10):
        assert len({i // 5 for i in order[w0:w0 + 10]}) == 2, f"window at {w0}: {order}"
    # the last window, positions 40..47: one whole block and the short last one (45..47)
    assert len({i // 5 for i in order[40:]}) == 2 and {45, 46, 47} <= set(order[40:])

    kw = dict(job="blk1", epochs=2, seed=4, sampling="block", block=5, window=2)
    with loader(daemon, imagefolder, **kw) as it:
        ref = steps(it) + steps(it)
    with loader(daemon, imagefolder, **dict(kw, job="blk2")) as it:
        first = steps(it) + steps(it, 3)
        sd = it.state_dict()
    assert (sd["block"], sd["window"], sd["window_shards"]) == (5, 2, 0)
    with loader(daemon, imagefolder, **dict(kw, job="blk3")) as it:
        it.load_state_dict(dict(sd, job=None))
        rest = steps(it)
    same(first + rest, ref)
    with loader(daemon, imagefolder, **dict(kw, job="blk4", block=6)) as it:
        with pytest.raises(ValueError, match="block"):
            it.load_state_dict(sd)
        with pytest.raises(ValueError, match="resume token: block: the token has 5"):
            it.load_state_dict(dict(sd, block=6))
    with pytest.raises(ValueError, match="window: for sampling=\"block\" only"):
        loader(daemon, imagefolder, window=3)
    with pytest.raises(ValueError, match="block: 16777217 is not in 1..16777216"):
        loader(daemon, imagefolder, sampling="block", block=(1 << 24) + 1)


def test_set_epoch_and_seek(daemon, imagefolder):
    with loader(daemon, imagefolder, job="ep", epochs=3, seed=9) as it:
        ref = [steps(it) for _ in range(3)]
    with loader(daemon, imagefolder, job="ep2", epochs=3, seed=9) as it:
        it.set_epoch(2)                    # before attaching: the job starts at epoch 2
        same(steps(it), ref[2])
        it.set_epoch(1)                    # backwards: a new attach at epoch 1
        part = steps(it, 4)
        it.set_epoch(2)                    # forwards out of a partial epoch
        same(part + steps(it), ref[1][:4] + ref[2])
        it.seek(0, 8)
        same(steps(it), ref[0][8:])


def test_unbounded_epochs_advance(daemon, imagefolder):
    """epochs=None: each for loop is the next epoch, as DataLoader with set_epoch(e) calls."""
    with loader(daemon, imagefolder) as it:
        for e in range(3):
            bs = steps(it)
            assert len(bs) == 10 and {b.epoch for b in bs} == {e}
            assert sorted(i for b in bs for i in b.ids.tolist()) == list(range(imagefolder.n))


def test_copy_option_and_views_after_gc(daemon, imagefolder):
    with loader(daemon, imagefolder, job="cp", epochs=1) as it:
        ref = steps(it)
    it = loader(daemon, imagefolder, job="cp2", epochs=1, copy=True, slots=2)
    kept = list(it)                          # copies stay good after their slots are reused
    it.close()
    same(kept, ref)

    it = loader(daemon, imagefolder, job="cp3", epochs=1)
    view = next(iter(it)).images
    del it
    gc.collect()                             # the view keeps the mapping (and connection) alive
    assert np.array_equal(view, ref[0].images)


def test_killed_daemon_raises_within_a_second(daemon, imagefolder):
    def alarm(*_):
        raise AssertionError("the client hung after loaderd was killed")
    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(30)
    try:
        with loader(daemon, imagefolder, slots=2) as it:
            g = iter(it)
            kept = next(g)
            for _ in range(3):
                next(g)
            daemon.kill(signal.SIGKILL)
            t0 = time.monotonic()
            with pytest.raises(loaderd.LoaderdError) as ei:
                while True:
                    b = next(g)              # published batches first, then the error
                    assert b.images.std() >= 0
            dt = time.monotonic() - t0
            assert dt < 1.0, f"took {dt:.2f} s"
            assert "exited or was killed" in str(ei.value)
            assert ei.value.errno == 32   # EPIPE
            assert kept.images.shape[0] == BATCH
            with pytest.raises(loaderd.LoaderdError):
                next(iter(it))
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def test_goes_on_after_loaderd_restarts(daemon, bins, imagefolder):
    """After the error, iterating again attaches to whatever loaderd serves the socket now and
    continues at the same position."""
    from conftest import Daemon
    with loader(daemon, imagefolder, job="rs0", epochs=1) as it:
        ref = steps(it)
    got = []
    with loader(daemon, imagefolder, job="rs", epochs=1, slots=2) as it:
        got += steps(it, 4)
        daemon.kill(signal.SIGKILL)
        with pytest.raises(loaderd.LoaderdError):
            for b in it:
                got.append(b.copy())
        assert got[-1].images.std() > 0, "batches taken before the error stay readable"
        with pytest.raises(loaderd.LoaderdError, match="cannot connect"):
            next(iter(it))
        d2 = Daemon(bins / "loaderd", sock=daemon.sock)
        try:
            got += steps(it)
        finally:
            d2.stop()
    same(got, ref)


def test_stopped_daemon_says_so(daemon, imagefolder):
    with loader(daemon, imagefolder) as it:
        next(iter(it))
        daemon.kill(signal.SIGTERM)
        with pytest.raises(loaderd.LoaderdError, match="shutting down"):
            for _ in range(1000):
                next(iter(it))


def test_errors_are_loaderd_errors(daemon, imagefolder, tmp_path):
    with pytest.raises(loaderd.LoaderdError, match="is loaderd running"):
        loaderd.Loader(str(tmp_path / "none.sock"), imagefolder.path, 4, output="numpy").open()
    with pytest.raises(loaderd.LoaderdError) as ei:
        loaderd.Loader(daemon.sock, tmp_path / "missing.dpk", 4, output="numpy").open()
    assert "missing.dpk" in str(ei.value)
    with pytest.raises(ValueError, match="rank"):
        loaderd.Loader(daemon.sock, imagefolder.path, 4, rank=2, world_size=2)
    with pytest.raises(ValueError, match="transforms"):
        loaderd.Loader(daemon.sock, imagefolder.path, 4, transforms=["blur"])
    for w in (0, 1001):                    # one past each end of 1..1000
        with pytest.raises(ValueError, match="weight"):
            loaderd.Loader(daemon.sock, imagefolder.path, 4, weight=w)


def test_weight_reaches_loaderd(daemon, imagefolder):
    """weight= at both ends of its range opens the job; loaderctl's JSON shows it."""
    for w in (1, 1000):
        with loader(daemon, imagefolder, job=f"w{w}", epochs=1, weight=w) as it:
            steps(it)
            out = subprocess.run([str(BIN / "loaderctl"), "--socket", daemon.sock, "--json",
                                  "jobs"], check=True, capture_output=True, text=True).stdout
            jobs = {j["job"]: j for j in json.loads(out)}
            assert jobs[f"w{w}"]["weight"] == w


def test_timeout_on_a_stalled_daemon(daemon, imagefolder):
    """A daemon that is alive but makes no progress (SIGSTOP): LoaderdTimeout after `timeout`,
    and the Loader goes on once it resumes."""
    with loader(daemon, imagefolder, slots=2, timeout=0.3) as it:
        g = iter(it)
        taken = [next(g).step]
        time.sleep(0.2)                      # the other slot gets filled
        os.kill(daemon.proc.pid, signal.SIGSTOP)
        try:
            t0 = time.monotonic()
            with pytest.raises(loaderd.LoaderdTimeout):
                for _ in range(5):
                    taken.append(next(g).step)
            assert time.monotonic() - t0 < 2.0
        finally:
            os.kill(daemon.proc.pid, signal.SIGCONT)
        assert next(iter(it)).step == taken[-1] + 1


def test_share_group_and_owner_reach_loaderd(daemon, bins, imagefolder):
    """share_group= opens the job shared (loaderctl shows the group); owner= joins another
    user's job and never creates one (issue 23, item 4; the two-user case is test_hostile)."""
    gid = os.getgid()
    with loader(daemon, imagefolder, job="shared-py", share_group=str(gid)) as it:
        next(iter(it))
        out = subprocess.run([str(bins / "loaderctl"), "--socket", daemon.sock, "--json", "jobs"],
                             check=True, capture_output=True, text=True).stdout
        job = [j for j in json.loads(out) if j["job"] == "shared-py"]
        assert job and job[0]["shared_gid"] == gid and job[0]["uid"] == os.getuid()
    with pytest.raises(loaderd.LoaderdError, match="no such job shared with a group of yours"):
        loader(daemon, imagefolder, job="nobodys", owner=str(os.getuid() + 1)).open()
    with pytest.raises(loaderd.LoaderdError, match="share_group: no-such-group-xyz: no such group"):
        loader(daemon, imagefolder, share_group="no-such-group-xyz").open()
    with pytest.raises(ValueError, match="not both"):
        loader(daemon, imagefolder, share_group="0", owner="0")


def test_tail_drop_last_matches_dataloader_drop_last(daemon, imagefolder):
    """tail="drop_last" is DataLoader(drop_last=True): whole batches only, floor(48 / 5) = 9
    steps with one rank; tail="drop" (DistributedSampler(drop_last=True): it drops what does not
    divide among the ranks) keeps the short last batch, 10 steps."""
    want = 48 // BATCH
    try:
        import torch.utils.data as tud
        assert len(tud.DataLoader(list(range(48)), batch_size=BATCH, drop_last=True)) == want
    except ImportError:
        pass
    with loader(daemon, imagefolder, job="tail-drop", tail="drop", epochs=1) as it:
        assert [b.count for b in steps(it)] == [BATCH] * want + [48 % BATCH]
    with loader(daemon, imagefolder, job="tail-drop-last", tail="drop_last", epochs=2) as it:
        for epoch in range(2):
            got = steps(it)
            assert [b.count for b in got] == [BATCH] * want, epoch
            ids = np.concatenate([b.ids for b in got])
            assert len(set(ids.tolist())) == want * BATCH     # no sample twice in an epoch
            assert all(b.epoch == epoch for b in got)
    # two ranks: ceil(48 / 2) = 24 each (DistributedSampler's default), 4 whole batches of 5
    its = [loader(daemon, imagefolder, job="tail-drop-last-2", tail="drop_last", rank=r,
                  world_size=2, epochs=1) for r in range(2)]
    try:
        for it in its:
            assert [b.count for b in steps(it)] == [BATCH] * 4
    finally:
        for it in its:
            it.close()
    # a batch larger than a rank's share: no whole batch, said so
    with pytest.raises(loaderd.LoaderdError, match="drop_last"):
        with loader(daemon, imagefolder, job="tail-drop-last-big", tail="drop_last",
                    batch_size=49, epochs=1) as it:
            steps(it)
