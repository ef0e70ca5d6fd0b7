"""_normalize.py - the uint8 -> normalised float conversion of Loader(normalize=, dtype=): the
arguments checked (_parse_normalize) and the conversion itself (normalized). Shared by the
Loader and by loaderd.diagnose, which times the conversion for its prediction, so that neither
imports the other for it.
"""

_FLOAT_NAMES = ("float32", "float16", "bfloat16", "float64")


def _parse_normalize(normalize, dtype, crop, layout, torch):
    """(scale, shift, dtype, nchw) such that images * scale + shift is (x / 255 - mean) / std,
    or None when neither normalize nor dtype is given. Raises ValueError naming the argument."""
    if normalize is None and dtype is None:
        return None
    if not crop:
        raise ValueError("normalize/dtype: needs crop= (3-channel images of one size)")
    if dtype is None:
        name = "float32"
    elif isinstance(dtype, str):
        name = dtype
    else:   # numpy.float32 (a class), numpy.dtype("float16"), torch.bfloat16
        name = getattr(dtype, "__name__", None) or str(dtype).replace("torch.", "")
    if name not in _FLOAT_NAMES:
        raise ValueError(f"dtype: {dtype!r} is not one of {', '.join(_FLOAT_NAMES)}")
    if torch is not None:
        dt = getattr(torch, name)
    else:
        import numpy as np
        if name == "bfloat16":
            raise ValueError("dtype: bfloat16 needs torch output")
        dt = getattr(np, name)
    if normalize is None:
        mean, std = (0.0, 0.0, 0.0), (1.0, 1.0, 1.0)
    else:
        try:
            mean, std = normalize
            mean = [float(v) for v in mean]
            std = [float(v) for v in std]
        except (TypeError, ValueError):
            raise ValueError(f"normalize: {normalize!r} is not (mean, std), each 3 numbers "
                             "(or 1)") from None
        if len(mean) == 1:
            mean = mean * 3
        if len(std) == 1:
            std = std * 3
        if len(mean) != 3 or len(std) != 3:
            raise ValueError(f"normalize: {normalize!r}: mean and std need 3 values (or 1)")
        if not all(v > 0 for v in std):
            raise ValueError(f"normalize: std {std} must be positive")
    scale = [1.0 / (255.0 * v) for v in std]
    shift = [-m / v for m, v in zip(mean, std)]
    return scale, shift, dt, layout.upper() == "NCHW"


def normalized(norm, torch, x, consts):
    """uint8 images @x as (x / 255 - mean) / std in the normalize dtype (a new array). @norm:
    _parse_normalize's tuple; @torch: the torch module (torch tensors) or None (numpy);
    @consts: a dict the caller keeps, where the constants are cached per device and dtype."""
    scale, shift, dt, nchw = norm
    if torch is not None:
        key = (x.device, dt)
        c = consts.get(key)
        if c is None:
            shape = (1, 3, 1, 1) if nchw else (1, 1, 1, 3)
            c = consts[key] = (
                torch.tensor(scale, dtype=torch.float32, device=x.device).view(shape),
                torch.tensor(shift, dtype=torch.float32, device=x.device).view(shape))
        y = torch.addcmul(c[1], x.to(torch.float32), c[0])
        return y if dt == torch.float32 else y.to(dt)
    import numpy as np
    shape = (1, 3, 1, 1) if nchw else (1, 1, 1, 3)
    y = x.astype(np.float32) * np.asarray(scale, np.float32).reshape(shape)
    y += np.asarray(shift, np.float32).reshape(shape)
    return y if dt == np.float32 else y.astype(dt)
