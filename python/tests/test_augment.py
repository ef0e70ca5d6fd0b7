"""test_augment.py - loaderd's per-sample augmentations (codec/augment.c, through build/bin/ldaug)
against torchvision's own functional ops on uint8 tensors, pixel for pixel: every RandAugment /
TrivialAugmentWide / AutoAugment op at several magnitudes (both signs), ColorJitter's four
adjustments, RandomErasing's fill, on a photograph-like image and an odd-sized one, in both
layouts (NHWC, NCHW); and the magnitude bins against torchvision's _augmentation_space. The
differences allowed are the ones docs/AUGMENT.md states (0 for every op measured so far)."""
import json
import subprocess

import pytest

from conftest import BIN

np = pytest.importorskip("numpy")
torch = pytest.importorskip("torch")
F = pytest.importorskip("torchvision.transforms.functional")
from torchvision.transforms import InterpolationMode, RandAugment, TrivialAugmentWide  # noqa: E402
from torchvision.transforms.autoaugment import AutoAugment, _apply_op  # noqa: E402

LDAUG = BIN / "ldaug"


@pytest.fixture(scope="module")
def ldaug():
    if not LDAUG.exists():
        pytest.skip(f"not built: {LDAUG} (run make)")
    return LDAUG


def photo(h, w, seed):
    """Smooth colour fields plus noise: every channel and level used, as in a photograph."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([128 + 100 * np.sin(x / 7 + c) * np.cos(y / 11 - c) for c in range(3)], -1)
    return np.clip(base + rng.normal(0, 20, base.shape), 0, 255).astype(np.uint8)


def ours(ldaug, a, name, mag, chw=False):
    h, w, _ = a.shape
    args = [str(ldaug), "op", name, mag if isinstance(mag, str) else repr(mag), str(h), str(w)] + (["chw"] if chw else [])
    r = subprocess.run(args, input=a.tobytes(), capture_output=True, check=True)
    return np.frombuffer(r.stdout, np.uint8).reshape(h, w, 3)


def theirs(a, name, mag):
    t = torch.from_numpy(a.copy()).permute(2, 0, 1).contiguous()
    if name == "Hue":
        o = F.adjust_hue(t, mag)
    elif name == "Saturation":
        o = F.adjust_saturation(t, mag)
    else:
        o = _apply_op(t, name, mag, interpolation=InterpolationMode.NEAREST, fill=None)
    return o.permute(1, 2, 0).numpy()


# (op, magnitudes): both signs, the ends of RandAugment's and TrivialAugmentWide's ranges, and
# values between bins.
CASES = [
    ("Identity", [0.0]),
    ("ShearX", [0.09, -0.3, 0.99, -0.57]),
    ("ShearY", [0.21, -0.99]),
    ("TranslateX", [40.0, -101.5, 32.0]),
    ("TranslateY", [-33.7, 13.0]),
    ("Rotate", [9.0, -30.0, 135.0, -77.3]),
    ("Brightness", [0.27, -0.9, 0.99, -0.99]),
    ("Color", [0.5, -0.3, 0.99]),
    ("Contrast", [0.27, -0.5, 0.99, -0.99]),
    ("Sharpness", [0.27, -0.9, 0.99]),
    ("Posterize", [8.0, 7.0, 4.0, 2.0, 0.0]),
    ("Solarize", [255.0, 178.5, 127.5, 0.0]),
    ("AutoContrast", [0.0]),
    ("Equalize", [0.0]),
    ("Invert", [0.0]),
    ("Hue", [0.1, -0.37, 0.5, -0.5, 0.0]),
    ("Saturation", [0.0, 0.6, 1.4]),
]


@pytest.mark.parametrize("shape", [(224, 224), (37, 53)])
@pytest.mark.parametrize("name,mags", CASES, ids=[c[0] for c in CASES])
def test_op_matches_torchvision(ldaug, shape, name, mags):
    a = photo(*shape, seed=len(name))
    for mag in mags:
        got = ours(ldaug, a, name, mag).astype(int)
        want = theirs(a, name, mag).astype(int)
        diff = np.abs(got - want)
        assert diff.max() == 0, (f"{name}({mag}) on {shape}: {int((diff > 0).sum())} values "
                                 f"differ, by up to {diff.max()}")
        assert np.array_equal(ours(ldaug, a, name, mag, chw=True), got), f"{name} NCHW"


def test_autocontrast_and_equalize_on_flat_channels(ldaug):
    """The degenerate cases: a constant channel (autocontrast's scale is not finite, equalize's
    step is 0) and a two-level one."""
    a = photo(16, 16, seed=3)
    a[..., 1] = 77
    a[..., 2] = np.where(a[..., 0] > 128, 200, 10)
    for name in ("AutoContrast", "Equalize"):
        assert np.array_equal(ours(ldaug, a, name, 0.0), theirs(a, name, 0.0)), name


def test_erase_matches_torchvision(ldaug):
    a = photo(40, 50, seed=9)
    got = ours(ldaug, a, "Erase", "3,7,20,11,0")
    t = torch.from_numpy(a.copy()).permute(2, 0, 1).contiguous()
    want = F.erase(t, 3, 7, 20, 11, torch.tensor(0, dtype=torch.uint8)).permute(1, 2, 0).numpy()
    assert np.array_equal(got, want)


@pytest.mark.parametrize("space,bins,cls", [("rand", 31, RandAugment), ("wide", 31, TrivialAugmentWide),
                                            ("rand", 10, RandAugment), ("auto", 10, AutoAugment)])
def test_magnitude_bins_match_torchvision(ldaug, space, bins, cls):
    h, w = 224, 160
    r = subprocess.run([str(ldaug), "mags", space, str(bins), str(h), str(w)], check=True,
                       capture_output=True, text=True)
    got = json.loads(r.stdout)
    aug = cls() if cls is not RandAugment else cls(num_magnitude_bins=bins)
    if cls is TrivialAugmentWide:
        aug = cls(num_magnitude_bins=bins)
        meta = aug._augmentation_space(bins)
    else:
        meta = aug._augmentation_space(bins, (h, w))
    a = photo(h, w, seed=bins)
    for op, (mags, _signed) in meta.items():
        if mags.ndim == 0:
            assert got[op] == [0.0] * bins, op
            continue
        want = [float(m) for m in mags.tolist()]
        if op == "Posterize":
            assert got[op] == want, op
            continue
        # torch.linspace's vectorised loop (AVX2 here) rounds some bins in another order than
        # its scalar formula: a bin may differ by one float ulp. Where one does, the op must
        # still give torchvision's pixels with torchvision's own bin.
        assert got[op] == pytest.approx(want, rel=2e-7, abs=1e-12), op
        for b, (g, m) in enumerate(zip(got[op], want)):
            if g != m:
                for sign in (1.0, -1.0):
                    mine = ours(LDAUG, a, op, sign * g)
                    assert np.array_equal(mine, theirs(a, op, sign * m)), (op, b, g, m)


@pytest.mark.parametrize("interp", ["bilinear", "bicubic"])
@pytest.mark.parametrize("antialias", [0, 1])
def test_resize_within_one_of_torchvision(ldaug, interp, antialias):
    """RandomResizedCrop's resize: the crop (x, y, w, h) to the output, as F.resized_crop with
    antialias: shrinks (the common case), an enlargement, odd sizes, a crop at the edge."""
    from torchvision.transforms import InterpolationMode as IM
    a = photo(300, 400, seed=5)
    t = torch.from_numpy(a.copy()).permute(2, 0, 1).contiguous()
    mode = IM.BILINEAR if interp == "bilinear" else IM.BICUBIC
    for (x, y, cw, ch, oh, ow) in [(0, 0, 400, 300, 224, 224), (13, 7, 250, 190, 224, 224),
                                   (5, 5, 100, 80, 224, 224), (0, 0, 400, 300, 37, 500),
                                   (100, 50, 41, 33, 224, 160), (250, 200, 150, 100, 7, 9)]:
        r = subprocess.run([str(ldaug), "resize", interp, str(antialias), str(oh), str(ow), "300",
                            "400", str(x), str(y), str(cw), str(ch)], input=a.tobytes(),
                           capture_output=True, check=True)
        got = np.frombuffer(r.stdout, np.uint8).reshape(oh, ow, 3).astype(int)
        want = F.resized_crop(t, y, x, ch, cw, [oh, ow], interpolation=mode,
                              antialias=bool(antialias)).permute(1, 2, 0).numpy().astype(int)
        diff = np.abs(got - want)
        assert diff.max() <= 1, f"crop {(x, y, cw, ch)} to {oh}x{ow}: off by {diff.max()}"
        # differences of 1 are float rounding at a half, rare
        assert (diff > 0).mean() < 0.002, f"crop {(x, y, cw, ch)}: {(diff > 0).sum()} differ"


def test_autoaugment_imagenet_policy_is_torchvisions(ldaug):
    r = subprocess.run([str(ldaug), "policy"], capture_output=True, text=True, check=True)
    got = json.loads(r.stdout)
    want = []
    for sub in AutoAugment()._get_policies(__import__("torchvision").transforms.AutoAugmentPolicy.IMAGENET):
        for name, p, mag in sub:
            want.append([name, p, -1 if mag is None else mag])
    assert got == want
