"""test_augment_loader.py - augment= through loaderd: the augmented samples are a function of
(seed, epoch, sample) alone (two runs, and a resume from state_dict, deliver the same pixels; two
ranks of one job see the augmentation of their own samples as a single-rank run does), they
differ from the unaugmented ones, every rank of a job must send the same augmentations (and a
resume token carries them), hostile bodies are refused naming the field, and a torchvision
pipeline is translated or refused by name."""
import ctypes
import subprocess
import errno

import pytest

import loaderd
from loaderd import _lib as L
from loaderd import augment_map as AM

np = pytest.importorskip("numpy")

CROP = 32
BATCH = 8
SPEC = "jitter=0.4:0.4:0.4:0.1,randaugment=2:9,erase=0.5,interp=bicubic,antialias"


def loader(daemon, ds, **kw):
    kw.setdefault("output", "numpy")
    kw.setdefault("crop", CROP)
    kw.setdefault("return_meta", True)
    return loaderd.Loader(daemon.sock, ds.path, kw.pop("batch_size", BATCH), **kw)


def by_id(it, n=None):
    """{sample id: pixels} of the epoch's batches (up to @n)."""
    out = {}
    for k, b in enumerate(it):
        for i, sid in enumerate(b.ids.tolist()):
            out.setdefault(sid, b.images[i].copy())
        if n is not None and k + 1 == n:
            break
    return out


def test_augmented_samples_repeat_exactly_and_differ_from_plain(daemon, imagefolder):
    with loader(daemon, imagefolder, job="aug-a", seed=5, epochs=1, augment=SPEC) as it:
        a = by_id(it)
    with loader(daemon, imagefolder, job="aug-b", seed=5, epochs=1, augment=SPEC) as it:
        b = by_id(it)
    with loader(daemon, imagefolder, job="plain", seed=5, epochs=1) as it:
        plain = by_id(it)
    assert a.keys() == b.keys() == plain.keys()
    for k in a:
        assert np.array_equal(a[k], b[k]), f"sample {k}: two runs differ"
    changed = sum(not np.array_equal(a[k], plain[k]) for k in a)
    assert changed >= len(a) * 0.9, f"only {changed} of {len(a)} samples augmented"


def test_two_ranks_see_the_single_rank_augmentation(daemon, imagefolder):
    """The key is (seed, epoch, sample id): whichever rank or worker decodes a sample."""
    with loader(daemon, imagefolder, job="aug-1", seed=9, epochs=1, augment=SPEC) as it:
        one = by_id(it)
    with loader(daemon, imagefolder, job="aug-2", seed=9, epochs=1, augment=SPEC, rank=0,
                world_size=2) as r0, loader(daemon, imagefolder, job="aug-2", seed=9, epochs=1,
                                            augment=SPEC, rank=1, world_size=2) as r1:
        two = by_id(r0)
        two.update(by_id(r1))
    for k, v in two.items():
        assert np.array_equal(v, one[k]), f"sample {k} differs between 1 and 2 ranks"


def test_resume_delivers_the_same_augmented_pixels(daemon, imagefolder):
    with loader(daemon, imagefolder, job="aug-ref", seed=3, epochs=1, augment=SPEC) as it:
        ref = [b.copy() for b in it]
    with loader(daemon, imagefolder, job="aug-stop", seed=3, epochs=1, augment=SPEC) as it:
        g = iter(it)
        [next(g).copy() for _ in range(2)]
        sd = it.state_dict()
    assert sd["augment"] == SPEC
    with loader(daemon, imagefolder, job="aug-go", seed=3, epochs=1, augment=SPEC) as it:
        it.load_state_dict(dict(sd, job=None))
        rest = [b.copy() for b in it]
    assert [b.step for b in rest] == [b.step for b in ref[2:]]
    for x, y in zip(rest, ref[2:]):
        assert np.array_equal(x.images, y.images), f"step {x.step}: pixels differ"
    # a state of an unaugmented run does not resume an augmented one, and the token says so
    with loader(daemon, imagefolder, job="aug-x", seed=3, epochs=1) as it:
        with pytest.raises(ValueError, match="augment"):
            it.load_state_dict(sd)
        t = it._parse_token(bytes(sd["token"]))
        assert t.augment == AM.digest(AM.parse(SPEC)) != 0


def test_ranks_of_one_job_must_agree(daemon, imagefolder):
    with loader(daemon, imagefolder, job="aug-agree", seed=1, augment=SPEC, rank=0,
                world_size=2) as r0:
        next(iter(r0))
        other = loader(daemon, imagefolder, job="aug-agree", seed=1, augment="jitter=0.2",
                       rank=1, world_size=2)
        # EEXIST: the Loader tries the next job names (it does not join a job of another shape)
        next(iter(other))
        assert other.job_name != r0.job_name
        other.close()


def _raw_open(daemon, imagefolder, body: bytes):
    """Send a CTL_AUGMENT body through libldc's socket by hand, then a job open: the error."""
    lib = L.lib()
    p = ctypes.c_void_p()
    err = ctypes.create_string_buffer(512)
    assert lib.ldc_connect(str(daemon.sock).encode(), ctypes.byref(p), err, len(err)) == 0
    a = L.ctl_augment.from_buffer_copy(body)
    rc = lib.ldc_augment(p, ctypes.byref(a))
    msg = lib.ldc_error(p).decode()
    lib.ldc_close(p)
    return rc, msg


@pytest.mark.parametrize("edit,needle", [
    (lambda a: setattr(a, "jitter", 0x10), "jitter: unknown bits"),
    (lambda a: (setattr(a, "jitter", 1), a.jitter_hi.__setitem__(0, 16 * 10**6 + 1)),
     "jitter brightness"),
    (lambda a: (setattr(a, "autoaug", 1), setattr(a, "bins", 31), setattr(a, "num_ops", 9)),
     "num_ops: 9 outside 1..8"),
    (lambda a: (setattr(a, "autoaug", 1), setattr(a, "bins", 65), setattr(a, "num_ops", 1)),
     "bins: 65 outside 2..64"),
    (lambda a: setattr(a, "erase_p", 10**6 + 1), "erase_p"),
    (lambda a: setattr(a, "interp", 4), "interp: unknown"),
    (lambda a: setattr(a, "antialias", 1), "antialias"),
    (lambda a: a.reserved.__setitem__(3, 1), "reserved"),
])
def test_hostile_augment_bodies_are_refused(daemon, imagefolder, edit, needle):
    a = L.ctl_augment()
    edit(a)
    rc, msg = _raw_open(daemon, imagefolder, bytes(a))
    assert rc == -errno.EINVAL and needle in msg, msg


def test_bounds_at_the_limit_are_taken(daemon, imagefolder):
    a = AM.parse("brightness=0:16,hue=-0.5:0.5,randaugment=8:63:64,erase=1:1:1:100:100")
    rc, msg = _raw_open(daemon, imagefolder, bytes(a))
    assert rc == 0, msg


def test_augment_needs_a_crop(daemon, npyset):
    with pytest.raises(ValueError, match="needs crop"):
        loaderd.Loader(daemon.sock, npyset.path, 4, crop=None, augment="jitter=0.4")


def test_torchvision_pipeline_translated_or_refused():
    T = pytest.importorskip("torchvision.transforms")
    pipe = T.Compose([T.RandomResizedCrop(224, interpolation=T.InterpolationMode.BICUBIC),
                      T.RandomHorizontalFlip(), T.RandAugment(num_ops=2, magnitude=9),
                      T.ColorJitter(0.4, 0.4, 0.4), T.PILToTensor(),
                      T.ConvertImageDtype(__import__("torch").float),
                      T.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
                      T.RandomErasing(p=0.25)])
    spec, handled, refused = AM.translate(pipe)
    # ColorJitter after RandAugment is refused: loaderd runs jitter first
    assert any("ColorJitter after" in r for r in refused)
    pipe.transforms.pop(3)
    spec, handled, refused = AM.translate(pipe)
    assert refused == []
    assert spec == ("interp=bicubic,antialias,randaugment=2:9:31,"
                    "erase=0.25:0.02:0.33:0.3:3.3,erase_value=124:116:104")
    AM.parse(spec)  # loaderd takes it
    # a preset object holding a Compose (torchvision's reference presets), and an unknown op
    class Preset:
        def __init__(self):
            self.transforms = T.Compose([T.TrivialAugmentWide(), T.GaussianBlur(3)])
    spec, handled, refused = AM.translate(Preset())
    assert spec == "trivialaugment=31"
    assert len(refused) == 1 and refused[0].startswith("GaussianBlur")
    with pytest.raises(ValueError, match="GaussianBlur"):
        loaderd.Loader("/nonexistent", "/nonexistent.dpk", 4, augment=Preset())


M64 = 2**64 - 1


def _mix64(z):
    z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & M64
    z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & M64
    return z ^ (z >> 31)


def _mix3(a, b, c):
    """common/mix.h's mix3: the sample's key is mix3(seed, epoch, id)."""
    return _mix64(((a * 0x9e3779b97f4a7c15) & M64) ^
                  ((((b + 0x632be59bd9b4e019) & M64) * 0xbf58476d1ce4e5b9) & M64) ^
                  ((((c + 0x85157af5) & M64) * 0x94d049bb133111eb) & M64))


@pytest.fixture(scope="module")
def rawset(bins, workdir):
    """40 raw 64x48x3 images (no JPEG: the window is resized as stored)."""
    from conftest import run, Dataset
    d = workdir / "raw6448"
    d.mkdir(exist_ok=True)
    run(bins / "dsgen", "npy", d / "x.npy", d / "y.npy", "--count", 40, "--height", 64,
        "--width", 48, "--channels", 3, "--classes", 5)
    run(bins / "dpack", "pack", d / "x.npy", d / "y.npy", d / "raw.dpk")
    ds = Dataset()
    ds.path = d / "raw.dpk"
    ds.images = np.load(d / "x.npy")
    return ds


def test_daemon_runs_the_documented_pipeline_with_the_sample_key(daemon, rawset):
    """What loaderd delivers with augment= is ldaug's pipeline (codec/augment.c) on what it
    delivers without, drawn from mix3(seed, epoch, id): the key docs/AUGMENT.md names."""
    from conftest import BIN
    spec = "jitter=0.4:0.4:0.4:0.1,randaugment=2:9,erase=0.5:0.02:0.33:0.3:3.3"
    kw = dict(crop=(20, 24), transforms="eval", seed=11, epochs=1, sampling="sequential")
    with loader(daemon, rawset, job="pipe-plain", **kw) as it:
        plain = by_id(it)
    with loader(daemon, rawset, job="pipe-aug", augment=spec, **kw) as it:
        aug = by_id(it)
    for sid, img in plain.items():
        r = subprocess.run([str(BIN / "ldaug"), "run", spec, str(_mix3(11, 0, sid)), "20", "24"],
                           input=img.tobytes(), capture_output=True, check=True)
        want = np.frombuffer(r.stdout, np.uint8).reshape(20, 24, 3)
        assert np.array_equal(aug[sid], want), f"sample {sid}"


def test_bicubic_antialias_through_the_daemon_is_torchvisions(daemon, rawset):
    """transforms='eval' on raw records: the centre window (cdc_crop_center) resized by
    torchvision's bicubic with antialias, within 1."""
    import math
    F = pytest.importorskip("torchvision.transforms.functional")
    from torchvision.transforms import InterpolationMode
    torch = pytest.importorskip("torch")
    oh, ow = 20, 24
    with loader(daemon, rawset, job="bicubic", crop=(oh, ow), transforms="eval", epochs=1,
                augment="interp=bicubic,antialias") as it:
        got = by_id(it)
    h, w = rawset.images.shape[1:3]
    short, oshort = min(w, h), min(ow, oh)
    scale = short / math.floor(oshort / 0.875)
    cw, ch = min(w, max(1, round(ow * scale))), min(h, max(1, round(oh * scale)))
    x, y = (w - cw) // 2, (h - ch) // 2
    for sid, img in got.items():
        t = torch.from_numpy(rawset.images[sid].copy()).permute(2, 0, 1).contiguous()
        want = F.resized_crop(t, y, x, ch, cw, [oh, ow], interpolation=InterpolationMode.BICUBIC,
                              antialias=True).permute(1, 2, 0).numpy()
        d = np.abs(img.astype(int) - want.astype(int))
        assert d.max() <= 1, f"sample {sid}: off by {d.max()}"
