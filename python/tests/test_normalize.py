"""test_normalize.py - Loader(normalize=(mean, std), dtype=...) against torchvision's ToTensor +
Normalize on the same uint8 batches (two Loaders of one seed, center crops, sequential: the same
pixels), NCHW and NHWC, float32 and float16, torch and numpy output; the slot is not held (new
memory); bad arguments are refused naming the argument. CPU only here (device= on CUDA converts
on the copy stream: checked where a GPU is lent)."""
import pytest

np = pytest.importorskip("numpy")
torch = pytest.importorskip("torch")

import loaderd  # noqa: E402

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def batches(daemon, ds, layout, output="torch", **kw):
    with loaderd.Loader(daemon.sock, ds.path, 6, crop=24, transforms="eval", layout=layout,
                        sampling="sequential", epochs=1, seed=3, output=output,
                        **kw) as it:
        out = []
        for images, labels in it:
            if isinstance(images, np.ndarray):
                images = images.copy()
            elif images.dtype == torch.uint8:
                images = images.clone()
            out.append((images, labels.clone() if hasattr(labels, "clone") else labels.copy()))
            lo, hi = it._base, it._base + it._ring_buf._length_
            if "normalize" in kw:
                ptr = images.data_ptr() if hasattr(images, "data_ptr") else images.ctypes.data
                assert not lo <= ptr < hi, "normalized images are new memory"
        return out


def reference(u8, layout):
    tv = pytest.importorskip("torchvision.transforms")
    x = u8 if layout == "NCHW" else u8.permute(0, 3, 1, 2)
    y = torch.stack([tv.Normalize(MEAN, STD)(tv.ConvertImageDtype(torch.float32)(img))
                     for img in x])
    return y if layout == "NCHW" else y.permute(0, 2, 3, 1)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_normalize_matches_torchvision(daemon, imagefolder, layout):
    raw = batches(daemon, imagefolder, layout)
    got = batches(daemon, imagefolder, layout, normalize=(MEAN, STD))
    assert len(raw) == len(got) == imagefolder.n // 6
    for (u8, l0), (f, l1) in zip(raw, got):
        assert f.dtype == torch.float32 and f.shape == u8.shape
        assert torch.equal(l0, l1)
        assert torch.allclose(f, reference(u8, layout), atol=1e-5, rtol=0)


def test_float16_and_dtype_alone(daemon, imagefolder):
    raw = batches(daemon, imagefolder, "NCHW")
    half = batches(daemon, imagefolder, "NCHW", normalize=(MEAN, STD), dtype=torch.float16)
    assert half[0][0].dtype == torch.float16
    assert torch.allclose(half[0][0].float(), reference(raw[0][0], "NCHW"), atol=1e-2)
    tt = batches(daemon, imagefolder, "NCHW", dtype="float32")   # ToTensor alone: x / 255
    assert torch.allclose(tt[0][0], raw[0][0].float() / 255, atol=1e-6)


def test_numpy_output(daemon, imagefolder):
    raw = batches(daemon, imagefolder, "NHWC", output="numpy")
    got = batches(daemon, imagefolder, "NHWC", output="numpy", normalize=(MEAN, STD),
                  dtype=np.float32)
    assert got[0][0].dtype == np.float32
    want = reference(torch.from_numpy(raw[0][0]), "NHWC").numpy()
    assert np.allclose(got[0][0], want, atol=1e-5)


@pytest.mark.parametrize("kw, word", [
    ({"normalize": ((0.5, 0.5), (0.2, 0.2))}, "normalize"),
    ({"normalize": ((0.5,) * 3, (0.2, 0.0, 0.2))}, "std"),
    ({"normalize": "imagenet"}, "normalize"),
    ({"normalize": (MEAN, STD), "dtype": "int8"}, "dtype"),
    ({"dtype": torch.uint8}, "dtype"),
])
def test_bad_arguments_named(daemon, imagefolder, kw, word):
    with pytest.raises(ValueError, match=word):
        loaderd.Loader(daemon.sock, imagefolder.path, 6, crop=24, **kw)
    with pytest.raises(ValueError, match="crop"):
        loaderd.Loader(daemon.sock, imagefolder.path, 6, crop=None, normalize=(MEAN, STD))
