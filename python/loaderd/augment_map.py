"""augment_map.py - what loaderd reproduces of a torchvision transform pipeline.

Three things, one table:
  - parse(spec): the text spec ("jitter=0.4:0.4:0.4,randaugment=2:9,erase=0.25,interp=bicubic,
    antialias"; docs/AUGMENT.md) as a CTL_AUGMENT body (ctypes struct ctl_augment), with the C
    parser's meaning (shm/ctl_augment.c; python/tests/test_augment_map.py checks both agree).
  - translate(transform): a torchvision transform (a Compose, a preset object holding one, a
    list) as that spec, with what the Loader's other arguments already do (crop, flip,
    normalize) and what loaderd cannot reproduce, each by name.
  - describe(transform): one transform's verdict, for diagnose: ("reproduced" | "loader" |
    "not reproduced", a sentence).

Torchvision is not imported here: transforms are recognised by class name and read by attribute,
so a script's objects are understood without loading torchvision into this process.
"""
from __future__ import annotations

import math

from . import _lib as L

ONE = 1_000_000
JITTER = ("brightness", "contrast", "saturation", "hue")
AUTO = {"randaugment": 1, "trivialaugment": 2, "autoaugment": 3}
INTERP = {"fast": 0, "bilinear": 1, "bicubic": 2, "random": 3}
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def _micro(x: float, lo: float, hi: float, what: str) -> int:
    if not (isinstance(x, (int, float)) and lo <= x <= hi):
        raise ValueError(f"augment: {what}: {x!r} is not in {lo}..{hi}")
    v = x * ONE
    return int(v + 0.5) if v >= 0 else -int(-v + 0.5)


def _numbers(val):
    if val is None or val == "":
        return []
    try:
        out = [float(p) for p in val.split(":")]
    except ValueError:
        raise ValueError(f"augment: {val!r}: numbers separated by ':' expected") from None
    if any(not math.isfinite(x) or abs(x) >= 1e9 for x in out):
        raise ValueError(f"augment: {val!r}: a number out of range")
    return out


def _whole(x) -> int:
    if not (0 <= x <= 1000 and x == int(x)):
        raise ValueError(f"augment: {x!r} is not a whole number in 0..1000")
    return int(x)


def _set_jitter(a, i, v):
    if len(v) == 1:
        if v[0] == 0:
            return
        if v[0] < 0:
            raise ValueError(f"augment: {JITTER[i]}: {v[0]} is negative")
        lo, hi = (-v[0], v[0]) if i == 3 else (max(0.0, 1.0 - v[0]), 1.0 + v[0])
    elif len(v) == 2:
        lo, hi = v
    else:
        raise ValueError(f"augment: {JITTER[i]}: one value or lo:hi")
    a.jitter |= 1 << i
    mn, mx = (-0.5, 0.5) if i == 3 else (0.0, 16.0)
    a.jitter_lo[i] = _micro(lo, mn, mx, JITTER[i])
    a.jitter_hi[i] = _micro(hi, mn, mx, JITTER[i])
    if a.jitter_lo[i] > a.jitter_hi[i]:
        raise ValueError(f"augment: {JITTER[i]}: {lo}..{hi} is reversed")


def parse(spec: str) -> L.ctl_augment:
    """The CTL_AUGMENT body of @spec; ValueError naming the item it does not take."""
    a = L.ctl_augment()
    for item in [s for s in spec.split(",") if s]:
        key, eq, val = item.partition("=")
        val = val if eq else None
        if key == "jitter":
            v = _numbers(val)
            if not 1 <= len(v) <= 4:
                raise ValueError("augment: jitter=B[:C[:S[:H]]]")
            for i, x in enumerate(v):
                _set_jitter(a, i, [x])
        elif key in JITTER:
            _set_jitter(a, JITTER.index(key), _numbers(val))
        elif key in AUTO:
            if a.autoaug:
                raise ValueError("augment: one of randaugment, trivialaugment, autoaugment")
            a.autoaug = AUTO[key]
            if key == "randaugment":
                d = [2, 9, 31]
                v = _numbers(val)
                if len(v) > 3:
                    raise ValueError("augment: randaugment=N:M[:BINS]")
                d[:len(v)] = v
                a.num_ops, a.magnitude, a.bins = (_whole(x) for x in d)
            elif key == "trivialaugment":
                v = _numbers(val)
                if len(v) > 1:
                    raise ValueError("augment: trivialaugment[=BINS]")
                a.bins = _whole(v[0]) if v else 31
            elif val not in (None, "imagenet"):
                raise ValueError(f"augment: autoaugment={val}: only the ImageNet policy")
        elif key == "erase":
            d = [0.5, 0.02, 0.33, 0.3, 3.3]
            v = _numbers(val)
            if len(v) not in (0, 1, 3, 5):
                raise ValueError("augment: erase=P[:SCALE_LO:SCALE_HI[:RATIO_LO:RATIO_HI]]")
            d[:len(v)] = v
            a.erase_p = _micro(d[0], 0, 1, "erase p")
            a.erase_scale[0] = _micro(d[1], 0, 1, "erase scale")
            a.erase_scale[1] = _micro(d[2], 0, 1, "erase scale")
            a.erase_ratio[0] = _micro(d[3], 0, 100, "erase ratio")
            a.erase_ratio[1] = _micro(d[4], 0, 100, "erase ratio")
        elif key == "erase_value":
            if val == "random":
                a.erase_fill = 1
                for c in range(3):
                    a.erase_mean[c] = _micro(IMAGENET_MEAN[c] * 255, 0, 255, "mean")
                    a.erase_std[c] = _micro(IMAGENET_STD[c] * 255, 0, 255, "std")
            else:
                v = _numbers(val)
                if len(v) not in (1, 3) or any(not (0 <= x <= 255 and x == int(x)) for x in v):
                    raise ValueError("augment: erase_value=random, V or R:G:B (0..255)")
                for c in range(3):
                    a.erase_rgb[c] = int(v[0 if len(v) == 1 else c])
        elif key == "erase_norm":
            v = _numbers(val)
            if len(v) != 6 or any(not 0 <= x <= 1 for x in v):
                raise ValueError("augment: erase_norm=M:M:M:S:S:S (fractions of 255)")
            for c in range(3):
                a.erase_mean[c] = _micro(v[c] * 255, 0, 255, "mean")
                a.erase_std[c] = _micro(v[3 + c] * 255, 0, 255, "std")
        elif key == "interp" and val in INTERP:
            a.interp = INTERP[val]
        elif key == "antialias" and val is None:
            a.antialias = 1
        else:
            raise ValueError(f"augment: {item!r}: not understood (docs/AUGMENT.md)")
    if not a.erase_p:
        if a.erase_fill or any(a.erase_rgb):
            raise ValueError("augment: erase_value without erase")
        for f in ("erase_scale", "erase_ratio", "erase_mean", "erase_std"):
            ctypes_zero(getattr(a, f))
        a.erase_fill = 0
    if a.autoaug == 1 and not (1 <= a.num_ops <= 8 and 2 <= a.bins <= 64 and a.magnitude < a.bins):
        raise ValueError("augment: randaugment: num_ops 1..8, bins 2..64, magnitude < bins")
    if a.autoaug == 2 and not 2 <= a.bins <= 64:
        raise ValueError("augment: trivialaugment: bins 2..64")
    if a.erase_p and not (0 < a.erase_scale[0] <= a.erase_scale[1] and
                          0 < a.erase_ratio[0] <= a.erase_ratio[1]):
        raise ValueError("augment: erase: scale and ratio above 0, in order")
    if a.antialias and not a.interp:
        raise ValueError("augment: antialias needs interp=bilinear, bicubic or random")
    return a


def ctypes_zero(arr):
    for i in range(len(arr)):
        arr[i] = 0


def digest(a: L.ctl_augment) -> int:
    """shm/ctl_augment.c's ctl_augment_digest: FNV-1a of the body, 0 for all zero."""
    b = bytes(a)
    if not any(b):
        return 0
    h = 2166136261
    for x in b:
        h = ((h ^ x) * 16777619) & 0xFFFFFFFF
    return h or 1


# ---- torchvision objects ----

def _name(t) -> str:
    return type(t).__name__


def _interp(t) -> str | None:
    """torchvision's InterpolationMode (or its int / PIL constant) as a loaderd filter."""
    m = getattr(t, "interpolation", None)
    v = getattr(m, "value", m)
    return {"bilinear": "bilinear", "bicubic": "bicubic", 2: "bilinear", 3: "bicubic",
            "nearest": None, 0: None}.get(v, "?")


def _fill_nonzero(f) -> bool:
    if f is None:
        return False
    if isinstance(f, (int, float)):
        return f != 0
    return any(x != 0 for x in f)


def _fmt(x) -> str:
    return f"{x:g}"


def _jitter_range(v, i):
    """ColorJitter stores (lo, hi) tuples or None."""
    if v is None:
        return None
    lo, hi = v
    if i == 3 and lo == -hi:
        return _fmt(hi)
    if i < 3 and math.isclose(hi - 1.0, 1.0 - lo) and lo > 0:
        return _fmt(hi - 1.0)
    return f"{_fmt(lo)}:{_fmt(hi)}"


def _walk(t):
    """The leaves of nested containers: Compose (.transforms), a list or tuple, a preset object
    whose .transforms is a Compose."""
    if isinstance(t, (list, tuple)):
        for x in t:
            yield from _walk(x)
        return
    inner = getattr(t, "transforms", None)
    if inner is not None and (isinstance(inner, (list, tuple)) or hasattr(inner, "transforms")):
        yield from _walk(inner)
        return
    yield t


LOADER = {  # what the Loader's own arguments do
    "RandomResizedCrop": "crop=SIZE, transforms='train'",
    "RandomHorizontalFlip": "transforms='train' (p = 0.5)",
    "CenterCrop": "transforms='eval'",
    "Resize": "transforms='eval' (with CenterCrop)",
    "ToTensor": "dtype=float32 (x / 255)",
    "PILToTensor": "uint8 output (the default)",
    "ConvertImageDtype": "dtype=",
    "Normalize": "normalize=(mean, std)",
}


def _is_timm(t) -> bool:
    return type(t).__module__.startswith("timm")


def _timm_interp(t):
    """timm's RandomResizedCropAndInterpolation: a mode, or (bilinear, bicubic) for 'random'."""
    m = getattr(t, "interpolation", None)
    if isinstance(m, (list, tuple)):
        names = sorted(str(getattr(x, "value", x)) for x in m)
        return "random" if names in (["bicubic", "bilinear"], ["2", "3"]) else "?"
    return _interp(t)


def describe(t) -> tuple[str, str]:
    """(verdict, sentence) for one torchvision transform @t: "reproduced" (loaderd's
    augment= does it, as torchvision does), "loader" (another Loader argument does it), or
    "not reproduced" (a swap would lose it)."""
    n = _name(t)
    if _is_timm(t) and n in ("RandAugment", "AutoAugment", "AugMixAugment", "TrivialAugment"):
        return "not reproduced", (f"timm's {n} (its own ops, magnitude noise and weights, not "
                                  "torchvision's): loaderd reproduces torchvision's RandAugment, "
                                  "TrivialAugmentWide and AutoAugment")
    if n == "ColorJitter":
        return "reproduced", "ColorJitter: augment='jitter=...' (random order, as torchvision)"
    if n == "RandAugment":
        if getattr(t, "interpolation", None) is not None and _interp(t) not in (None,):
            return "not reproduced", f"{n}: interpolation {_interp(t)} (loaderd's ops use nearest)"
        if _fill_nonzero(getattr(t, "fill", None)):
            return "not reproduced", f"{n}: fill {t.fill} (loaderd fills with 0)"
        return "reproduced", f"{n}(num_ops={t.num_ops}, magnitude={t.magnitude}): augment="
    if n == "TrivialAugmentWide":
        if _interp(t) is not None or _fill_nonzero(getattr(t, "fill", None)):
            return "not reproduced", f"{n}: interpolation or fill other than nearest, 0"
        return "reproduced", f"{n}: augment='trivialaugment'"
    if n == "AutoAugment":
        pol = getattr(getattr(t, "policy", None), "value", None)
        if pol != "imagenet":
            return "not reproduced", f"AutoAugment policy {pol}: only the ImageNet policy"
        if _interp(t) is not None or _fill_nonzero(getattr(t, "fill", None)):
            return "not reproduced", f"{n}: interpolation or fill other than nearest, 0"
        return "reproduced", "AutoAugment(IMAGENET): augment='autoaugment'"
    if n == "RandomErasing" and _is_timm(t):
        if getattr(t, "max_count", 1) not in (None, 1) or getattr(t, "min_count", 1) != 1:
            return "not reproduced", "timm RandomErasing with several boxes (max_count)"
        if getattr(t, "num_splits", 0):
            return "not reproduced", "timm RandomErasing with num_splits (augmentation splits)"
        if getattr(t, "mode", "const") not in ("const", "pixel"):
            return "not reproduced", (f"timm RandomErasing mode {t.mode!r} (one random colour "
                                      "a box): loaderd has const and pixel")
        return "reproduced", f"timm RandomErasing (mode {t.mode}): augment='erase=...'"
    if n == "RandomResizedCropAndInterpolation":  # timm's
        ip = _timm_interp(t)
        sc, ra = tuple(getattr(t, "scale", (0.08, 1.0))), tuple(getattr(t, "ratio", (0.75, 4 / 3)))
        if not (math.isclose(sc[0], 0.08) and math.isclose(sc[1], 1.0) and
                math.isclose(ra[0], 0.75) and math.isclose(ra[1], 4 / 3)):
            return "not reproduced", (f"RandomResizedCropAndInterpolation scale={sc} ratio={ra}: "
                                      "loaderd's is scale=(0.08, 1), ratio=(3/4, 4/3)")
        if ip in ("?", None):
            return "not reproduced", f"RandomResizedCropAndInterpolation interpolation {ip}"
        return "reproduced", (f"RandomResizedCropAndInterpolation ({ip}): crop=, "
                              f"transforms='train', augment='interp={ip},antialias'")
    if n == "RandomErasing":
        v = getattr(t, "value", 0)
        if isinstance(v, str) and v != "random":
            return "not reproduced", f"RandomErasing value {v!r}"
        if not isinstance(v, str) and not isinstance(v, (int, float)) and len(set(v)) > 1 \
                and len(v) != 3:
            return "not reproduced", f"RandomErasing value {v!r}"
        return "reproduced", "RandomErasing: augment='erase=...' (after Normalize: the fill is " \
                             "the mean colour, or random with normalize's mean and std)"
    if n == "RandomResizedCrop":
        ip = _interp(t)
        sc, ra = tuple(getattr(t, "scale", (0.08, 1.0))), tuple(getattr(t, "ratio", (0.75, 4 / 3)))
        if not (math.isclose(sc[0], 0.08) and math.isclose(sc[1], 1.0) and
                math.isclose(ra[0], 0.75) and math.isclose(ra[1], 4 / 3)):
            return "not reproduced", (f"RandomResizedCrop scale={sc} ratio={ra}: loaderd's is "
                                      "scale=(0.08, 1), ratio=(3/4, 4/3)")
        if ip == "?" or ip is None:
            return "not reproduced", f"RandomResizedCrop interpolation {t.interpolation}"
        return "reproduced", f"RandomResizedCrop ({ip}): crop=, transforms='train', " \
                             f"augment='interp={ip}' (antialias as PIL: 'antialias')"
    if n == "RandomHorizontalFlip":
        if not math.isclose(getattr(t, "p", 0.5), 0.5):
            return "not reproduced", f"RandomHorizontalFlip p={t.p} (loaderd's is 0.5)"
        return "loader", "RandomHorizontalFlip: " + LOADER[n]
    if n in LOADER:
        return "loader", f"{n}: {LOADER[n]}"
    return "not reproduced", f"{n}: loaderd has no such transform; a swap would drop it"


def translate(transform, *, antialias: bool = True) -> tuple[str, list[str], list[str]]:
    """(spec, handled, refused) for a torchvision pipeline: the augment= spec of what loaderd
    reproduces; what other Loader arguments do (to set them); and the sentence of each transform
    it cannot reproduce. @antialias: PIL images (an ImageFolder's) are always resized with
    antialiasing, so the swap of a PIL-based recipe asks for it."""
    items, handled, refused = [], [], []
    seen_auto = False
    norm = None  # Normalize's (mean, std), for RandomErasing's fill after it
    for t in _walk(transform):
        if _name(t) == "Normalize":
            norm = (tuple(t.mean), tuple(t.std))
        verdict, why = describe(t)
        n = _name(t)
        if verdict == "not reproduced":
            refused.append(why)
            continue
        if verdict == "loader":
            handled.append(why)
            continue
        if n == "ColorJitter":
            if seen_auto:
                refused.append("ColorJitter after the auto-augment: loaderd runs it before")
                continue
            for i, f in enumerate(JITTER):
                r = _jitter_range(getattr(t, f, None), i)
                if r is not None:
                    items.append(f"{f}={r}")
        elif n == "RandAugment":
            items.append(f"randaugment={t.num_ops}:{t.magnitude}:{t.num_magnitude_bins}")
            seen_auto = True
        elif n == "TrivialAugmentWide":
            items.append(f"trivialaugment={t.num_magnitude_bins}")
            seen_auto = True
        elif n == "AutoAugment":
            items.append("autoaugment")
            seen_auto = True
        elif n == "RandomErasing" and _is_timm(t):
            mean, std = norm if norm else ((0.0,) * 3, (1.0,) * 3)
            lo, hi = (math.exp(x) for x in t.log_aspect_ratio)
            items.append(f"erase={_fmt(t.probability)}:{_fmt(t.min_area)}:{_fmt(t.max_area)}:"
                         f"{_fmt(round(lo, 6))}:{_fmt(round(hi, 6))}")
            if t.mode == "pixel":
                items.append("erase_value=random")
                items.append("erase_norm=" + ":".join(_fmt(x) for x in mean + std))
            else:  # const: zeros in Normalize's units, the mean colour
                px = [min(255, max(0, round(mean[c] * 255))) for c in range(3)]
                items.append("erase_value=" + ":".join(str(x) for x in px))
        elif n == "RandomResizedCropAndInterpolation":
            items.append(f"interp={_timm_interp(t)}")
            items.append("antialias")  # timm resizes PIL images: antialiased
            handled.append("RandomResizedCropAndInterpolation: crop=SIZE, transforms='train'")
        elif n == "RandomErasing":
            sc, ra = t.scale, t.ratio
            items.append(f"erase={_fmt(t.p)}:{_fmt(sc[0])}:{_fmt(sc[1])}:{_fmt(ra[0])}:"
                         f"{_fmt(ra[1])}")
            mean, std = norm if norm else ((0.0,) * 3, (1.0,) * 3)
            if t.value == "random":
                items.append("erase_value=random")
                items.append("erase_norm=" + ":".join(_fmt(x) for x in mean + std))
            else:
                # the value is in Normalize's units (0: the mean colour), the pixel
                # mean + value * std, in levels
                v = t.value if isinstance(t.value, (list, tuple)) else [t.value] * 3
                if len(v) == 1:
                    v = list(v) * 3
                px = [min(255, max(0, round((mean[c] + v[c] * std[c]) * 255))) for c in range(3)]
                items.append("erase_value=" + ":".join(str(x) for x in px))
        elif n == "RandomResizedCrop":
            items.append(f"interp={_interp(t)}")
            if antialias:
                items.append("antialias")
            handled.append("RandomResizedCrop: crop=SIZE, transforms='train'")
    return ",".join(items), handled, refused


def unreproduced(transform) -> list[str]:
    """For diagnose: a sentence for every transform of @transform (nested containers walked) that
    a swap to loaderd.Loader would not reproduce, by name; [] when the swap keeps them all. A
    part that cannot be read is named too, never a reason to drop the rest."""
    out = []
    try:
        leaves = list(_walk(transform))
    except Exception as e:  # a container whose .transforms is not what it says
        return [f"{_name(transform)}: its transforms could not be read ({e})"]
    for t in leaves:
        try:
            verdict, why = describe(t)
        except Exception as e:
            verdict, why = "not reproduced", f"{_name(t)}: could not be read ({e})"
        if verdict == "not reproduced":
            out.append(why)
    _spec, _handled, refused = translate(leaves)
    out += [r for r in refused if r not in out]
    return out
