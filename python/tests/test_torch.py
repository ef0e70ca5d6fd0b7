"""test_torch.py - the torch face of the client: tensors over the ring without a copy, the same
bytes as the numpy face, NCHW, weights; a checkpoint in the README's three lines resumes bit for
bit; pinned memory and non-blocking copies on a GPU."""
import os
import signal
import time

import pytest

np = pytest.importorskip("numpy", reason="the Python client tests need numpy (pip install numpy)")
torch = pytest.importorskip("torch", reason="torch is not installed")

import loaderd  # noqa: E402

BATCH, CROP = 5, 32


def make(daemon, ds, **kw):
    kw.setdefault("crop", CROP)
    kw.setdefault("epochs", 1)
    kw.setdefault("seed", 5)
    return loaderd.Loader(daemon.sock, ds.path, BATCH, **kw)


def test_torch_tensors_are_views_of_the_ring(daemon, imagefolder):
    with make(daemon, imagefolder, job="np", output="numpy", return_meta=True) as it:
        ref = [b.copy() for b in it]
    with make(daemon, imagefolder, job="t") as it:
        assert it.output == "torch" and it.open() is it
        lo, hi = it._base, it._base + it._ring_buf._length_
        n = 0
        for (images, labels), r in zip(it, ref):
            assert images.dtype == torch.uint8 and images.shape == (r.count, CROP, CROP, 3)
            assert labels.dtype == torch.int64 and labels.shape == (r.count,)
            assert lo <= images.data_ptr() < hi and lo <= labels.data_ptr() < hi
            assert np.array_equal(images.numpy(), r.images)
            assert np.array_equal(labels.numpy(), r.labels)
            b = it.last_batch
            assert np.array_equal(b.ids.numpy().astype(np.uint64), r.ids)
            assert b.weights.dtype == torch.float32 and bool((b.weights == 1).all())
            for i, lab in zip(b.ids.tolist(), labels.tolist()):
                assert lab == imagefolder.labels[i]
            n += 1
        assert n == len(ref) == 10


def test_nchw_is_the_transpose(daemon, imagefolder):
    with make(daemon, imagefolder, job="hwc", return_meta=True) as it:
        ref = [b.copy() for b in it]
    with make(daemon, imagefolder, job="chw", layout="NCHW") as it:
        for (images, _), r in zip(it, ref):
            assert images.shape == (r.count, 3, CROP, CROP)
            assert torch.equal(images, r.images.permute(0, 3, 1, 2))


def _train(it, model, opt, stop=None, path=None):
    """Train over the rest of a 2-epoch job; with @stop, checkpoint after that many steps (the
    README's three lines) and return."""
    n = 0
    for epoch in range(it.position[0], 2):
        it.set_epoch(epoch)
        for images, labels in it:
            x = images.reshape(len(images), -1).float() / 255
            loss = torch.nn.functional.cross_entropy(model(x), labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
            n += 1
            if n == stop:
                tmp = path + ".tmp"
                torch.save({"model": model.state_dict(), "opt": opt.state_dict(),
                            "data": it.state_dict()}, tmp)
                os.replace(tmp, path)
                return


def _model():
    torch.manual_seed(0)
    model = torch.nn.Linear(CROP * CROP * 3, 4)
    return model, torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)


@pytest.mark.parametrize("stop", [1, 10, 13])
def test_checkpoint_resumes_bit_for_bit(daemon, imagefolder, tmp_path, stop):
    """Model, optimizer and loader state saved together after @stop steps (the first step, an
    epoch boundary, mid-epoch), then loaded by new objects in a new job: the same final weights
    as the uninterrupted run, byte for byte."""
    ref, opt = _model()
    with make(daemon, imagefolder, job=f"ref{stop}", epochs=2) as it:
        _train(it, ref, opt)
    path = str(tmp_path / "ck.pt")
    model, opt = _model()
    with make(daemon, imagefolder, job=f"a{stop}", epochs=2) as it:
        _train(it, model, opt, stop, path)
    model, opt = _model()
    with make(daemon, imagefolder, job=f"b{stop}", epochs=2) as it:
        ck = torch.load(path)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        it.load_state_dict(ck["data"])
        _train(it, model, opt)
    for a, b in zip(ref.parameters(), model.parameters()):
        assert torch.equal(a, b)


def test_torch_killed_daemon_raises(daemon, imagefolder):
    with make(daemon, imagefolder, epochs=None, slots=2) as it:
        g = iter(it)
        images, _ = next(g)
        daemon.kill(signal.SIGKILL)
        t0 = time.monotonic()
        with pytest.raises(loaderd.LoaderdError, match="exited or was killed"):
            for _ in range(100):
                next(g)
        assert time.monotonic() - t0 < 1.0


def test_no_cuda_no_pinning(daemon, imagefolder):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present (see test_pinned_non_blocking_copy)")
    with make(daemon, imagefolder) as it:
        images, _ = next(iter(it))
        assert it._conn.pinned is None and not it._track_cuda


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_pinned_non_blocking_copy(daemon, imagefolder):
    with make(daemon, imagefolder, job="cpu", return_meta=True) as it:
        ref = [b.copy() for b in it]
    with make(daemon, imagefolder, job="gpu", slots=2) as it:
        out = []
        for images, labels in it:
            assert images.is_pinned()
            out.append((images.to("cuda", non_blocking=True), labels.to("cuda", non_blocking=True)))
        torch.cuda.synchronize()
        for (x, y), r in zip(out, ref):
            assert torch.equal(x.cpu(), r.images) and torch.equal(y.cpu(), r.labels)
