"""test_mixup.py - loaderd.mixup against a reference written here, sample by sample and pixel by
pixel in plain numpy, from timm's documented semantics (Mixup, mode='batch'): the same draws in
the same order from a generator of the same seed, then mixup's blend with the flipped batch,
cutmix's box pasted from it with the area-corrected lambda, smoothed one-hot targets mixed with
the flipped ones; torchvision's roll pairing; the switch between the two; prob; seed= per step
(a resumed run mixes the same way); odd batches and integer images refused."""
import math

import pytest

np = pytest.importorskip("numpy")
torch = pytest.importorskip("torch")
from loaderd.mixup import Mixup, smooth_one_hot  # noqa: E402

N, C, H, W, K = 6, 3, 9, 11, 5


def reference(x, labels, seed, mixup_alpha, cutmix_alpha, prob, switch_prob, smoothing,
              pairing="flip"):
    """(mixed x, targets, lam, cutmix?) the way the semantics say, with loops."""
    g = np.random.default_rng(seed)
    n = len(x)
    partner = [n - 1 - i for i in range(n)] if pairing == "flip" else [(i - 1) % n for i in range(n)]
    lam, cut = 1.0, False
    if g.random() < prob:
        if mixup_alpha > 0 and cutmix_alpha > 0:
            cut = g.random() < switch_prob
            a = cutmix_alpha if cut else mixup_alpha
        elif mixup_alpha > 0:
            a = mixup_alpha
        else:
            cut, a = True, cutmix_alpha
        lam = float(g.beta(a, a))
    out = x.copy()
    if lam != 1.0 and cut:
        r = math.sqrt(1 - lam)
        ch, cw = int(H * r), int(W * r)
        cy, cx = int(g.integers(0, H)), int(g.integers(0, W))
        y0, y1 = max(cy - ch // 2, 0), min(cy + ch // 2, H)
        x0, x1 = max(cx - cw // 2, 0), min(cx + cw // 2, W)
        for i in range(n):
            for yy in range(y0, y1):
                for xx in range(x0, x1):
                    out[i, :, yy, xx] = x[partner[i], :, yy, xx]
        lam = 1 - (y1 - y0) * (x1 - x0) / (H * W)
    elif lam != 1.0:
        for i in range(n):
            out[i] = lam * x[i] + (1 - lam) * x[partner[i]]
    t = np.zeros((n, K))
    for i in range(n):
        for k in range(K):
            def soft(lbl):
                return (1 - smoothing + smoothing / K) if lbl == k else smoothing / K
            t[i, k] = lam * soft(labels[i]) + (1 - lam) * soft(labels[partner[i]])
    return out, t, lam, cut


@pytest.mark.parametrize("ma,ca,prob,sw,pairing", [
    (0.8, 0.0, 1.0, 0.5, "flip"), (0.0, 1.0, 1.0, 0.5, "flip"), (0.8, 1.0, 1.0, 0.5, "flip"),
    (0.8, 1.0, 0.5, 0.5, "flip"), (0.2, 0.0, 1.0, 0.5, "roll"), (0.0, 1.0, 1.0, 0.5, "roll")])
def test_mixup_matches_reference(ma, ca, prob, sw, pairing):
    seen_cut = seen_mix = seen_none = 0
    for seed in range(40):
        x = np.random.default_rng(1000 + seed).random((N, C, H, W)).astype(np.float32)
        labels = np.random.default_rng(seed).integers(0, K, N)
        want_x, want_t, want_lam, cut = reference(x, labels, seed, ma, ca, prob, sw, 0.1,
                                                  pairing)
        mix = Mixup(ma, ca, prob, sw, label_smoothing=0.1, num_classes=K, pairing=pairing,
                    rng=np.random.default_rng(seed))
        got_x, got_t = mix(torch.from_numpy(x.copy()), torch.from_numpy(labels))
        assert np.allclose(got_x.numpy(), want_x, atol=1e-6), f"seed {seed}: images"
        assert np.allclose(got_t.numpy(), want_t, atol=1e-6), f"seed {seed}: targets"
        assert math.isclose(mix.last[0], want_lam, abs_tol=1e-12)
        seen_cut += cut and want_lam != 1
        seen_mix += (not cut) and want_lam != 1
        seen_none += want_lam == 1
    if ca > 0:
        assert seen_cut > 0
    if ma > 0:
        assert seen_mix > 0
    if prob < 1:
        assert seen_none > 0


def test_targets_rows_sum_to_one_and_smoothing_alone():
    y = smooth_one_hot(torch.tensor([0, 4, 2]), K, 0.1)
    assert torch.allclose(y.sum(1), torch.ones(3))
    assert math.isclose(float(y[1, 4]), 0.92, rel_tol=1e-6)
    assert math.isclose(float(y[1, 0]), 0.02, rel_tol=1e-6)
    assert torch.equal(smooth_one_hot(torch.tensor([3]), K, 0.0), torch.eye(K)[3:4])


def test_seed_per_step_repeats_and_requires_a_step():
    x = torch.rand(N, C, H, W)
    labels = torch.arange(N) % K
    a = Mixup(0.8, 1.0, seed=7, num_classes=K)
    b = Mixup(0.8, 1.0, seed=7, num_classes=K)
    ra = [a(x.clone(), labels, step=s)[0] for s in range(10)]
    rb = [b(x.clone(), labels, step=s)[0] for s in (5, 6, 7, 8, 9)]  # a resumed run, from step 5
    for u, v in zip(ra[5:], rb):
        assert torch.equal(u, v)
    assert not all(torch.equal(ra[0], r) for r in ra[1:])
    with pytest.raises(ValueError, match="step="):
        a(x.clone(), labels)


def test_refusals():
    with pytest.raises(ValueError, match="even"):
        Mixup(num_classes=K)(torch.rand(5, C, H, W), torch.zeros(5, dtype=torch.long))
    with pytest.raises(TypeError, match="float"):
        Mixup(num_classes=K)(torch.zeros(4, C, H, W, dtype=torch.uint8), torch.zeros(4))
    with pytest.raises(ValueError, match="batch"):
        Mixup(mode="elem")
    with pytest.raises(ValueError):
        Mixup(mixup_alpha=0, cutmix_alpha=0)


def test_nhwc_cutmix_equals_nchw():
    x = torch.rand(N, C, H, W)
    labels = torch.arange(N) % K
    a = Mixup(0.0, 1.0, num_classes=K, rng=np.random.default_rng(3))
    b = Mixup(0.0, 1.0, num_classes=K, rng=np.random.default_rng(3), layout="NHWC")
    xa, ta = a(x.clone(), labels)
    xb, tb = b(x.permute(0, 2, 3, 1).contiguous(), labels)
    assert torch.equal(xa, xb.permute(0, 3, 1, 2)) and torch.equal(ta, tb)
