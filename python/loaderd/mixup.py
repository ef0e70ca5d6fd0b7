"""mixup.py - the batch-level augmentations of the common recipes, on the device batch: mixup,
cutmix and label smoothing with timm's Mixup semantics (mode='batch'), so that a script that
applied them in its collate_fn or on the batch keeps them after the swap to loaderd.Loader.

    mix = loaderd.mixup.Mixup(mixup_alpha=0.8, cutmix_alpha=1.0, prob=1.0, switch_prob=0.5,
                              label_smoothing=0.1, num_classes=1000)
    for images, labels in loader:              # images float (N, 3, H, W) on the device
        images, targets = mix(images, labels)  # targets (N, num_classes), soft
        loss = torch.sum(-targets * F.log_softmax(model(images), -1), -1).mean()

What timm's Mixup does, and this does the same way: one draw per batch: with probability prob
the batch is mixed; when both alphas are set, cutmix with probability switch_prob, else mixup;
lambda ~ Beta(alpha, alpha). Mixup: x = lam x + (1 - lam) x.flip(0). Cutmix: a box of
(H sqrt(1 - lam)) x (W sqrt(1 - lam)) centred at a uniform point, clipped to the image, pasted
from the flipped batch, and lam corrected to the box's true area (correct_lam). Targets: one-hot
with label smoothing (off = smoothing / classes, on = 1 - smoothing + off), then
lam y + (1 - lam) y.flip(0). The batch must be even (the flipped pairing). pairing="roll" pairs
each sample with the one before it (torchvision's reference RandomMixup / RandomCutmix) instead.

Random numbers: numpy's global generator by default (as timm); seed= makes every batch's draw a
function of (seed, step) (pass step=batch.step), so that a resumed run mixes the same way.
Images are mixed in place when they are a float tensor, as timm does.
"""
from __future__ import annotations

import math


def smooth_one_hot(labels, num_classes: int, smoothing: float = 0.0):
    """(N, num_classes) float targets: 1 - smoothing + smoothing / num_classes at the label,
    smoothing / num_classes elsewhere (timm's; CrossEntropyLoss(label_smoothing=) on hard
    labels gives the same loss)."""
    import torch
    off = smoothing / num_classes
    on = 1.0 - smoothing + off
    labels = labels.long().view(-1, 1)
    out = torch.full((labels.shape[0], num_classes), off, device=labels.device)
    return out.scatter_(1, labels, on)


class Mixup:
    def __init__(self, mixup_alpha: float = 1.0, cutmix_alpha: float = 0.0, prob: float = 1.0,
                 switch_prob: float = 0.5, mode: str = "batch", correct_lam: bool = True,
                 label_smoothing: float = 0.1, num_classes: int = 1000, *,
                 pairing: str = "flip", layout: str = "NCHW", seed: int | None = None,
                 rng=None):
        if mode != "batch":
            raise ValueError(f"mode {mode!r}: only 'batch' (one draw per batch) is reproduced")
        if pairing not in ("flip", "roll"):
            raise ValueError(f"pairing {pairing!r}: 'flip' (timm) or 'roll' (torchvision)")
        if layout not in ("NCHW", "NHWC"):
            raise ValueError(f"layout {layout!r}: 'NCHW' or 'NHWC'")
        if mixup_alpha < 0 or cutmix_alpha < 0 or not (mixup_alpha > 0 or cutmix_alpha > 0):
            raise ValueError("mixup_alpha, cutmix_alpha: non-negative, one of them above 0")
        if not (0 <= prob <= 1 and 0 <= switch_prob <= 1 and 0 <= label_smoothing < 1):
            raise ValueError("prob, switch_prob in 0..1, label_smoothing in 0..1 (exclusive)")
        if int(num_classes) < 1:
            raise ValueError("num_classes: at least 1")
        self.mixup_alpha, self.cutmix_alpha = float(mixup_alpha), float(cutmix_alpha)
        self.mix_prob, self.switch_prob = float(prob), float(switch_prob)
        self.correct_lam = bool(correct_lam)
        self.label_smoothing = float(label_smoothing)
        self.num_classes = int(num_classes)
        self.pairing, self.layout = pairing, layout
        self.seed = seed
        self._rng = rng
        self.mixup_enabled = True
        self.last = None  # (lam, use_cutmix, box or None) of the last batch

    def _gen(self, step):
        import numpy as np
        if self._rng is not None:
            return self._rng
        if self.seed is not None:
            if step is None:
                raise ValueError("Mixup(seed=...) draws by step: call mix(images, labels, "
                                 "step=batch.step)")
            return np.random.default_rng([int(self.seed) & (2**63 - 1), int(step)])
        return np.random  # the global generator, as timm

    def _params(self, g):
        lam, use_cutmix = 1.0, False
        if self.mixup_enabled and g.random() < self.mix_prob:
            if self.mixup_alpha > 0 and self.cutmix_alpha > 0:
                use_cutmix = g.random() < self.switch_prob
                a = self.cutmix_alpha if use_cutmix else self.mixup_alpha
                lam = float(g.beta(a, a))
            elif self.mixup_alpha > 0:
                lam = float(g.beta(self.mixup_alpha, self.mixup_alpha))
            else:
                use_cutmix = True
                lam = float(g.beta(self.cutmix_alpha, self.cutmix_alpha))
        return lam, use_cutmix

    def _box(self, g, h, w, lam):
        """timm's rand_bbox, then the area-corrected lambda."""
        ratio = math.sqrt(1.0 - lam)
        cut_h, cut_w = int(h * ratio), int(w * ratio)
        draw = g.integers if hasattr(g, "integers") else g.randint  # Generator, or np.random
        cy, cx = int(draw(0, h)), int(draw(0, w))
        yl, yh = min(max(cy - cut_h // 2, 0), h), min(max(cy + cut_h // 2, 0), h)
        xl, xh = min(max(cx - cut_w // 2, 0), w), min(max(cx + cut_w // 2, 0), w)
        if self.correct_lam:
            lam = 1.0 - (yh - yl) * (xh - xl) / float(h * w)
        return (yl, yh, xl, xh), lam

    def _partner(self, t):
        return t.flip(0) if self.pairing == "flip" else t.roll(1, 0)

    def __call__(self, images, labels, step=None):
        """(images mixed in place, soft targets (N, num_classes) float32)."""
        if self.pairing == "flip" and len(images) % 2:
            raise ValueError(f"Mixup: a batch of {len(images)}: it must be even (timm's flipped "
                             "pairing; tail='drop' gives whole batches)")
        if not images.is_floating_point():
            raise TypeError("Mixup: float images (normalize= or dtype= on the Loader)")
        g = self._gen(step)
        lam, use_cutmix = self._params(g)
        box = None
        if lam != 1.0:
            if use_cutmix:
                h, w = (images.shape[-2], images.shape[-1]) if self.layout == "NCHW" else \
                       (images.shape[-3], images.shape[-2])
                box, lam = self._box(g, h, w, lam)
                yl, yh, xl, xh = box
                other = self._partner(images)
                if self.layout == "NCHW":
                    images[:, :, yl:yh, xl:xh] = other[:, :, yl:yh, xl:xh]
                else:
                    images[:, yl:yh, xl:xh, :] = other[:, yl:yh, xl:xh, :]
            else:
                other = self._partner(images).mul_(1.0 - lam)
                images.mul_(lam).add_(other)
        self.last = (lam, use_cutmix, box)
        y = smooth_one_hot(labels.to(images.device), self.num_classes, self.label_smoothing)
        targets = y * lam + self._partner(y) * (1.0 - lam)
        return images, targets
