"""test_augment_map.py - loaderd.augment_map: its spec parser gives the C parser's CTL_AUGMENT
body byte for byte (build/bin/ldaug spec) and the same digest, refuses what the C parser
refuses; describe() gives each torchvision transform its verdict (reproduced, done by another
Loader argument, or lost in a swap), for diagnose."""
import json
import subprocess

import pytest

from conftest import BIN
from loaderd import augment_map as AM

LDAUG = BIN / "ldaug"

SPECS = [
    "jitter=0.4:0.4:0.4:0.1,randaugment=2:9,erase=0.25,interp=bicubic,antialias",
    "jitter=1.5", "brightness=0:16,hue=-0.5:0.5", "saturation=0.25:1.75",
    "trivialaugment", "trivialaugment=17", "autoaugment", "randaugment=8:63:64",
    "erase=1:1:1:100:100,erase_value=random", "erase=0.5,erase_value=7:8:9",
    "erase=0.3,erase_value=random,erase_norm=0.5:0.5:0.5:0.25:0.25:0.25",
    "interp=random,antialias", "erase=0", "",
]


@pytest.mark.parametrize("spec", SPECS)
def test_python_parse_equals_c(spec):
    if not LDAUG.exists():
        pytest.skip(f"not built: {LDAUG}")
    r = subprocess.run([str(LDAUG), "spec", spec], capture_output=True, text=True, check=True)
    a = AM.parse(spec)
    assert bytes(a).hex() == r.stdout.strip()
    assert AM.digest(a) == json.loads(r.stderr)["digest"]


@pytest.mark.parametrize("spec", ["jitter=nan", "hue=1", "randaugment=9", "erase=1.5",
                                  "erase_value=1:2:3", "interp=nearest", "antialias", "flip",
                                  "randaugment,autoaugment", "trivialaugment=1"])
def test_python_refuses_what_c_refuses(spec):
    with pytest.raises(ValueError):
        AM.parse(spec)
    if LDAUG.exists():
        r = subprocess.run([str(LDAUG), "spec", spec], capture_output=True, text=True)
        assert r.returncode == 2, r.stdout


def test_describe_verdicts():
    T = pytest.importorskip("torchvision.transforms")
    IM = T.InterpolationMode
    cases = [
        (T.ColorJitter(0.4, 0.4, 0.4), "reproduced"),
        (T.RandAugment(), "reproduced"),
        (T.RandAugment(fill=[128, 128, 128]), "not reproduced"),
        (T.RandAugment(interpolation=IM.BILINEAR), "not reproduced"),
        (T.TrivialAugmentWide(), "reproduced"),
        (T.AutoAugment(), "reproduced"),
        (T.AutoAugment(T.AutoAugmentPolicy.CIFAR10), "not reproduced"),
        (T.RandomErasing(), "reproduced"),
        (T.RandomErasing(value="random"), "reproduced"),
        (T.RandomResizedCrop(224, interpolation=IM.BICUBIC), "reproduced"),
        (T.RandomResizedCrop(224, scale=(0.35, 1)), "not reproduced"),
        (T.RandomResizedCrop(224, interpolation=IM.NEAREST), "not reproduced"),
        (T.RandomHorizontalFlip(), "loader"),
        (T.RandomHorizontalFlip(p=0.3), "not reproduced"),
        (T.Normalize((0.5,) * 3, (0.5,) * 3), "loader"),
        (T.GaussianBlur(3), "not reproduced"),
        (T.RandomRotation(10), "not reproduced"),
        (T.RandomGrayscale(), "not reproduced"),
    ]
    for t, want in cases:
        got, why = AM.describe(t)
        assert got == want, f"{t}: {got} ({why})"
        assert type(t).__name__.split("(")[0] in why


def test_translate_colorjitter_ranges_and_erasing_fill():
    T = pytest.importorskip("torchvision.transforms")
    spec, handled, refused = AM.translate([T.ColorJitter(brightness=(0.5, 2.0), hue=0.2),
                                           T.ToTensor(), T.RandomErasing(value=(0.1, 0.2, 0.3))])
    assert refused == []
    assert spec == "brightness=0.5:2,hue=0.2,erase=0.5:0.02:0.33:0.3:3.3,erase_value=26:51:76"
    assert AM.parse(spec).jitter == 0b1001


def test_unreproduced_names_what_a_swap_loses():
    T = pytest.importorskip("torchvision.transforms")

    class Preset:  # torchvision's reference presets: an object whose .transforms is a Compose
        def __init__(self, inner):
            self.transforms = T.Compose(inner)

    assert AM.unreproduced(Preset([T.RandomResizedCrop(224), T.RandomHorizontalFlip(),
                                   T.TrivialAugmentWide(), T.PILToTensor(),
                                   T.RandomErasing()])) == []
    lost = AM.unreproduced(Preset([T.RandomResizedCrop(224), T.GaussianBlur(3),
                                   T.Compose([T.RandomGrayscale(), T.ColorJitter(0.4)]),
                                   T.RandAugment(fill=7)]))
    assert [s.split(":")[0].split(" ")[0] for s in lost] == ["GaussianBlur", "RandomGrayscale",
                                                             "RandAugment"]

    class Broken:
        transforms = property(lambda self: (_ for _ in ()).throw(RuntimeError("no")))
    assert AM.unreproduced(Broken()) == ["Broken: its transforms could not be read (no)"]


def _timm_like(name, **attrs):
    """An object shaped as timm's class of that name (timm is not installed here): the same
    class name, module and attributes."""
    cls = type(name, (), {})
    cls.__module__ = "timm.data.transforms" if "Crop" in name else "timm.data.random_erasing"
    obj = cls()
    obj.__dict__.update(attrs)
    return obj


def test_timm_crop_and_erasing():
    import math
    T = pytest.importorskip("torchvision.transforms")
    IM = T.InterpolationMode
    rrc = _timm_like("RandomResizedCropAndInterpolation", size=(224, 224), scale=(0.08, 1.0),
                     ratio=(3 / 4, 4 / 3), interpolation=(IM.BILINEAR, IM.BICUBIC))
    pixel = _timm_like("RandomErasing", probability=0.25, min_area=0.02, max_area=1 / 3,
                       log_aspect_ratio=(math.log(0.3), math.log(1 / 0.3)), min_count=1,
                       max_count=1, num_splits=0, mode="pixel")
    spec, handled, refused = AM.translate([rrc, T.RandomHorizontalFlip(), T.ToTensor(),
                                           T.Normalize((0.485, 0.456, 0.406),
                                                       (0.229, 0.224, 0.225)), pixel])
    assert refused == []
    assert spec == ("interp=random,antialias,erase=0.25:0.02:0.333333:0.3:3.33333,"
                    "erase_value=random,erase_norm=0.485:0.456:0.406:0.229:0.224:0.225")
    AM.parse(spec)
    several = _timm_like("RandomErasing", probability=0.25, min_area=0.02, max_area=1 / 3,
                         log_aspect_ratio=(0, 1), min_count=1, max_count=3, num_splits=0,
                         mode="pixel")
    assert AM.describe(several)[0] == "not reproduced"
    rand = _timm_like("RandomErasing", probability=0.25, min_area=0.02, max_area=1 / 3,
                      log_aspect_ratio=(0, 1), min_count=1, max_count=1, num_splits=0,
                      mode="rand")
    assert "mode 'rand'" in AM.describe(rand)[1]


def test_timm_auto_augment_is_named_not_reproduced():
    ra = _timm_like("RandAugment", ops=[], num_layers=2, choice_weights=None)
    verdict, why = AM.describe(ra)
    assert verdict == "not reproduced" and why.startswith("timm's RandAugment")
    assert AM.unreproduced([ra]) == [why]
