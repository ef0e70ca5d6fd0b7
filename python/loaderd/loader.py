"""loader.py - Loader: one rank of a loaderd job as a Python iterable of batches.

Each batch is a view of a slot of the shared-memory ring that loaderd fills (no copy): torch
tensors when torch is importable (torch.frombuffer over the mapping), numpy arrays otherwise.
A slot is held from the moment its batch is yielded until the next batch is taken: that is the
window in which loaderd does not write it. A ring stays mapped while any array of it lives: a
seek, a load_state_dict, a re-attach after a daemon restart or close() lets go of the job but
not of the mapping, so a batch kept across them keeps its bytes (never another step's); the
mapping goes with its last array. See README.md for the semantics of epochs, resuming and
errors.
"""
from __future__ import annotations

import collections
import ctypes
import errno as _errno
import hashlib
import os
import re
import secrets
import time
import warnings

from . import _lib as L
from ._normalize import _parse_normalize, normalized
from . import augment_map as AM
from . import s3 as _s3
from . import profile as P

_NAME_OK = re.compile(r"^[A-Za-z0-9._-]+$")
_JOB_BASE_MAX = 40        # leaves room for ".eN.K" within the daemon's 63 bytes
_NAME_TRIES = 8           # fresh names tried per position (base, base.1 .. base.7)
_SLICE_MS = 250           # ldc_acquire is called in slices so that Ctrl-C is seen between them

TRANSFORM_NAMES = {
    "random_resized_crop": L.TF_RANDOM_RESIZED_CROP,
    "center_crop": L.TF_CENTER_CROP,
    "hflip": L.TF_HFLIP,
}
TRANSFORM_PRESETS = {
    "train": L.TF_RANDOM_RESIZED_CROP | L.TF_HFLIP,
    "eval": L.TF_CENTER_CROP,
    "none": 0,
}


class LoaderdError(RuntimeError):
    """loaderd refused a request, went away, or sent something unusable.

    ``errno`` is the positive errno; the message is the client library's sentence (ldc_error),
    e.g. "loaderd closed the connection: it exited or was killed"."""

    def __init__(self, err: int, message: str):
        self.errno = err
        name = _errno.errorcode.get(err, str(err))
        super().__init__(f"{message} [{name}]")


class LoaderdTimeout(LoaderdError):
    """No batch arrived within the Loader's ``timeout``."""


class Batch:
    """One step of one rank: views into a ring slot, valid until the next batch is taken (then
    loaderd refills the slot); a seek, a re-attach or close() leaves them as they are
    (``copy()`` makes an owned copy). Unpacks as ``images, labels``."""

    __slots__ = ("images", "labels", "ids", "flags", "step", "epoch", "step_in_epoch", "count",
                 "last", "global_count", "global_offset", "_weights", "_torch", "fields",
                 "tokens")

    def __init__(self, images, labels, ids, flags, step, epoch, step_in_epoch, count, last,
                 is_torch):
        self.images, self.labels, self.ids, self.flags = images, labels, ids, flags
        self.step, self.epoch, self.step_in_epoch = step, epoch, step_in_epoch
        self.count, self.last = count, last
        # the global step's samples (all ranks) and this batch's place in them; with
        # balance=True count varies by rank, global_count does not (loaderd.ddp weighs by it)
        self.global_count, self.global_offset = count, 0
        self.fields = None   # the aux fields asked for (fields=): {name: [value per sample]}
        self.tokens = None   # what tokenize= made of them
        self._weights = None
        self._torch = is_torch

    @property
    def weights(self):
        """float32 per sample: 0 for tail padding (tail="mask"), else 1. A new array."""
        if self._weights is None:
            pad = (self.flags & L.SAMPLE_PADDING) == 0
            if self._torch:
                import torch
                self._weights = pad.to(torch.float32)
            else:
                import numpy as np
                self._weights = pad.astype(np.float32)
        return self._weights

    def copy(self) -> "Batch":
        """The same batch in memory of its own, safe to keep after the slot is released."""
        cp = (lambda t: t.clone()) if self._torch else (lambda a: a.copy())
        b = Batch(cp(self.images), cp(self.labels), cp(self.ids), cp(self.flags), self.step,
                  self.epoch, self.step_in_epoch, self.count, self.last, self._torch)
        b._weights = self._weights
        b.global_count, b.global_offset = self.global_count, self.global_offset
        b.fields, b.tokens = self.fields, self.tokens   # Python objects of their own already
        return b

    def __iter__(self):
        yield self.images
        yield self.labels

    def __len__(self):
        return self.count

    def __repr__(self):
        return (f"Batch(step={self.step}, epoch={self.epoch}, step_in_epoch={self.step_in_epoch}, "
                f"count={self.count}, images={tuple(self.images.shape)})")


def default_socket() -> str:
    """$LOADERD_SOCKET, else loaderd's own default: $XDG_RUNTIME_DIR/loaderd.sock, else
    /tmp/loaderd-UID.sock."""
    s = os.environ.get("LOADERD_SOCKET")
    if s:
        return s
    d = os.environ.get("XDG_RUNTIME_DIR")
    if d:
        return os.path.join(d, "loaderd.sock")
    return f"/tmp/loaderd-{os.getuid()}.sock"


def _parse_transforms(transforms, crop, layout) -> int:
    if transforms is None:
        bits = TRANSFORM_PRESETS["train"] if crop else 0
    elif isinstance(transforms, int):
        bits = transforms
    elif isinstance(transforms, str) and transforms in TRANSFORM_PRESETS:
        bits = TRANSFORM_PRESETS[transforms]
    else:
        names = [transforms] if isinstance(transforms, str) else list(transforms)
        bits = 0
        for n in names:
            if n not in TRANSFORM_NAMES:
                raise ValueError(f"transforms: unknown {n!r} (known: presets "
                                 f"{sorted(TRANSFORM_PRESETS)}, names {sorted(TRANSFORM_NAMES)})")
            bits |= TRANSFORM_NAMES[n]
    lay = layout.upper()
    if lay not in ("NHWC", "NCHW"):
        raise ValueError(f"layout: {layout!r} is neither 'NHWC' nor 'NCHW'")
    if lay == "NCHW":
        if not crop:
            raise ValueError("layout='NCHW' needs a crop size (records as stored keep their layout)")
        bits |= L.TF_NCHW
    if bits & ~L.TF_ALL:
        raise ValueError(f"transforms: unknown bits {bits & ~L.TF_ALL:#x}")
    if (bits & (L.TF_RANDOM_RESIZED_CROP | L.TF_CENTER_CROP)) and not crop:
        raise ValueError("transforms: a crop transform needs crop=SIZE")
    return bits


def _parse_augment(augment, crop):
    """(spec, ctl_augment or None) of the augment= argument."""
    if augment is None or augment == "":
        return "", None
    if isinstance(augment, L.ctl_augment):
        spec, body = "<ctl_augment>", augment
    elif isinstance(augment, str):
        spec, body = augment, AM.parse(augment)
    else:
        spec, _handled, refused = AM.translate(augment)
        if refused:
            raise ValueError("augment: loaderd cannot reproduce: " + "; ".join(refused))
        body = AM.parse(spec)
    if not crop and any(bytes(body)):
        raise ValueError("augment: needs crop= (the records as stored are not resized or "
                         "augmented)")
    return spec, (body if any(bytes(body)) else None)


def _pick(table, what, value) -> int:
    if value not in table:
        raise ValueError(f"{what}: {value!r} is not one of {sorted(table)}")
    return table[value]


class _Conn:
    """One ldc connection and its ring's mapping. The ring buffer object holds it, and every
    numpy array and torch tensor of the ring holds that buffer (through .base, or the storage
    torch.frombuffer and torch.from_numpy keep), so the mapping goes only with the last view:
    hang_up() lets go of the job at once (loaderd takes this rank's slots back and the rank can
    attach again) and close(), from __del__, unmaps. Memory a live array points into is never
    unmapped, nor reused for another ring."""

    def __init__(self, lib, ptr):
        self.lib, self.ptr = lib, ptr
        self.pinned = None   # (torch module, base address) while registered with CUDA

    def error(self) -> str:
        return self.lib.ldc_error(self.ptr).decode("utf-8", "replace") if self.ptr else ""

    def hang_up(self):
        """Let go of the job; the ring stays mapped, frozen (ldc_detach), until close()."""
        if self.ptr:
            self.lib.ldc_detach(self.ptr)

    def close(self):
        if self.pinned:
            torch, base = self.pinned
            self.pinned = None
            try:
                torch.cuda.synchronize()  # no DMA may still read the mapping
                torch.cuda.cudart().cudaHostUnregister(base)
            except Exception:  # interpreter shutdown, CUDA torn down: the unmap still follows
                pass
        if self.ptr:
            self.lib.ldc_close(self.ptr)
            self.ptr = None

    def __del__(self):
        self.close()


class Loader:
    """One rank of a loaderd job, iterated one epoch per ``for`` loop.

    ``with Loader(socket, dataset, batch_size, crop=224) as it: for images, labels in it: ...``

    Arguments (names as in torch's DataLoader/DistributedSampler where there is one):
      socket        loaderd's control socket; None: $LOADERD_SOCKET or loaderd's default path.
      dataset       a .dpk file (made by dpack), or a set of .dpk shards' manifest
                    (docs/FORMAT.md), opened by this process with its own rights (the C client
                    passes it open to loaderd, which opens a set's shards beside it; the path is
                    only displayed); or s3://bucket/prefix/NAME, read with this user's
                    credentials through loaderd's node cache when loaderd has one (loaderd
                    --cache-dir), else made local in this user's cache, at the first attach
                    (loaderd.s3, docs/S3.md).
      batch_size    samples per step, 1..65536.
      crop          output size: int (square) or (h, w); None: records as stored (raw tensors
                    of one shape, e.g. a packed .npy).
      rank, world_size   default: $RANK and $WORLD_SIZE (torchrun), else 0 and 1.
      seed          shuffling and augmentation seed; equal on all ranks.
      job           job name shared by the ranks on a node ([A-Za-z0-9._-], <= 40 chars).
                    None: "py-<torchrun run id>-<hash of the parameters>" under torchrun, else
                    a name unique to this Loader.
      transforms    None ("train" when crop is given), "train" (random-resized-crop + hflip),
                    "eval" (center crop), "none", a list of names ("random_resized_crop",
                    "center_crop", "hflip") or CTL_TF_* bits.
      layout        "NHWC" (default; images are (N, H, W, 3)) or "NCHW" ((N, 3, H, W)).
      epochs        total epochs of the run (the last one is epochs - 1); None: unbounded.
      sampling      "shuffle" (default: one permutation of the whole dataset per epoch),
                    "sequential" or "block": blocks of consecutive records in a new order each
                    epoch, samples shuffled within a window of blocks, so that a window reads a
                    few blocks of the disk or of a set's shards at a time (a dataset read
                    through a cache smaller than it: docs/S3.md). A batch then mixes samples
                    of one window's blocks only.
      block         sampling="block": records per block, 1..2^24; 0: 64.
      window        sampling="block": blocks per shuffle window, 1..2^16; 0: 16.
      window_shards sampling="block" over a set of shards (a manifest): a window of this many
                    shards (block = the set's largest shard's records, window = this), instead
                    of block= and window=; keep it at most half the shards the cache holds.
      tail          "pad" (DistributedSampler default: repeats, flagged REPEATED), "mask"
                    (repeats flagged PADDING, weight 0), "drop" (DistributedSampler(
                    drop_last=True): floor(N / world) per rank, the last batch may be short)
                    or "drop_last" (DataLoader(drop_last=True): as "pad", then whole batches
                    only: floor(ceil(N / world) / batch_size) steps per epoch).
      on_bad        "substitute" (default: a bad record is replaced, flagged SUBSTITUTED) or
                    "fail".
      slots         ring depth (batches loaderd may prepare ahead); 0: the daemon's default.
      weight        the job's share of loaderd's decode CPU when it is short of it (1..1000,
                    default 1): rings about to run dry go first, weighted (docs/TUNING.md).
      share_group   a group (name or gid) whose members may join this job (loaderd --group);
                    None: the job is this user's alone, unseen by other users, and another
                    user's job of the same name is another job.
      owner         join another user's job (user name or uid) that its owner opened with
                    share_group= one of this user's groups; it never creates the job.
      balance       balanced shares (loaderd --balance): each global step's samples are split
                    across the ranks by their reported speed, so a rank's batch holds 1 to
                    2 x batch_size samples. Report each step's compute time (report_compute,
                    or loaderd.ddp.register does it) and average gradients weighted by the
                    sample counts (loaderd.ddp) to keep the even split's update.
      return_meta   yield Batch objects (images, labels, ids, flags, weights, step, ...)
                    instead of (images, labels) tuples.
      copy          yield copies instead of views (and release each slot at once).
      output        "torch", "numpy" or None (torch when importable).
      pin_memory    register the ring with CUDA as pinned memory: None (when torch sees a
                    GPU), True, False.
      timeout       seconds to wait for one batch before LoaderdTimeout; None: no limit (a
                    dead daemon is still noticed within about 100 ms).
      device        None (batches are views of the ring), or where the Loader moves each
                    batch's images and labels itself: on CUDA, a non-blocking copy on a side
                    stream, a CUDA event, and the current stream waits on it (the slot goes
                    back as soon as the copy is done); "cpu": the views, unchanged. torch only.
      profile       per-step attribution (data wait, step period, exposed copy with device=,
                    exposed allreduce under DistributedDataParallel) and loaderd's fill time
                    for loaderd.diagnose: None (on when $LOADERD_PROFILE=1), True, False.
                    See profile.py and README "Is my training loader-limited?".
      normalize     (mean, std) per channel, in [0, 1] units as torchvision's Normalize after
                    ToTensor: images become (x / 255 - mean) / std in dtype (float32 unless
                    said). Needs a crop (3-channel images); the channel axis follows layout.
                    On the CPU the result is new memory and the slot goes back at once; with
                    device= on CUDA the uint8 batch is copied and converted there, on the
                    copy stream.
      fields        aux fields of a dataset packed with them (dpack pack --field), delivered
                    per sample in batch order beside the images: a name ("txt": the Loader
                    yields (images, texts), a list) or a list of names (yields (images,
                    {name: list})); each value a str when its bytes are UTF-8, else bytes
                    (fields_bytes=True: always bytes). Batch.fields holds them with
                    return_meta. None: not delivered (images, labels as usual).
      tokenize      with fields=: a callable run on each batch's fields (the list, or the
                    dict) on a background thread, one batch ahead of the training thread
                    (which holds one more slot for it); the Loader yields (images, its result)
                    and Batch.tokens. Its exceptions are raised where the batch is yielded.
      augment       per-sample augmentations and the resize filter, run by loaderd on each
                    sample's uint8 pixels after the crop (docs/AUGMENT.md): a spec such as
                    "jitter=0.4:0.4:0.4,randaugment=2:9,erase=0.25,interp=bicubic,antialias",
                    or the script's torchvision transform (a Compose, a preset holding one, a
                    list): ColorJitter, RandAugment, TrivialAugmentWide, AutoAugment (ImageNet),
                    RandomErasing and RandomResizedCrop's interpolation are translated; a
                    transform loaderd cannot reproduce raises ValueError naming it. Seeded per
                    sample: resume and every rank see the same augmented samples. Batch-level
                    mixup/cutmix and label smoothing: loaderd.mixup.
      dtype         the images' type with normalize (float32, float16, bfloat16, float64, as
                    torch or numpy types or their names); alone, x / 255 in that type
                    (ToTensor). None: uint8 as stored.
    """

    def __init__(self, socket, dataset, batch_size, crop=224, *, rank=None, world_size=None,
                 seed=0, job=None, transforms=None, layout="NHWC", epochs=None,
                 sampling="shuffle", block=0, window=0, window_shards=0, tail="pad",
                 on_bad="substitute", slots=0,
                 weight=1, share_group=None, owner=None, balance=False, return_meta=False,
                 copy=False, output=None,
                 pin_memory=None, timeout=None,
                 device=None, profile=None, normalize=None, dtype=None, fields=None,
                 fields_bytes=False, tokenize=None, augment=None):
        self.socket = os.fspath(socket) if socket is not None else default_socket()
        # s3:// stays a URL until an attach: offered to loaderd's node cache, else fetched
        # into the user's cache (_attach)
        self.dataset = os.fspath(dataset) if _s3.is_url(os.fspath(dataset)) else \
            _s3.local_dataset(dataset)
        if len(self.dataset.encode()) >= L.PATH_MAX:
            raise ValueError(f"dataset path longer than {L.PATH_MAX - 1} bytes")
        self.batch_size = int(batch_size)
        if not 1 <= self.batch_size <= 65536:
            raise ValueError(f"batch_size: {batch_size} is not in 1..65536")
        if crop is None or crop == 0:
            self.crop = None
        elif isinstance(crop, int):
            self.crop = (crop, crop)
        else:
            self.crop = (int(crop[0]), int(crop[1]))
        if self.crop and not all(1 <= c <= 8192 for c in self.crop):
            raise ValueError(f"crop: {crop} is not in 1..8192")
        self.rank = int(os.environ.get("RANK", 0) if rank is None else rank)
        self.world_size = int(os.environ.get("WORLD_SIZE", 1) if world_size is None else world_size)
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank {self.rank} is not in 0..world_size-1 ({self.world_size})")
        self.seed = int(seed) & 0xFFFFFFFFFFFFFFFF
        self.transforms = _parse_transforms(transforms, self.crop, layout)
        self.augment, self._aug = _parse_augment(augment, self.crop)
        self.epochs = None if epochs is None else int(epochs)
        if self.epochs is not None and not 1 <= self.epochs < 2**32:
            raise ValueError(f"epochs: {epochs} is not a positive count (None: unbounded)")
        self.sampling = sampling
        self.tail = tail
        self.on_bad = on_bad
        self._sampling = _pick(L.SAMPLING, "sampling", sampling)
        self._tail = _pick(L.TAIL, "tail", tail)
        self._on_bad = _pick(L.ON_BAD, "on_bad", on_bad)
        self.block, self.window, self.window_shards = int(block), int(window), int(window_shards)
        for name, v, hi in (("block", self.block, 1 << 24), ("window", self.window, 1 << 16),
                            ("window_shards", self.window_shards, 1 << 16)):
            if not 0 <= v <= hi:
                raise ValueError(f"{name}: {v} is not in 1..{hi} (0: not given)")
            if v and sampling != "block":
                raise ValueError(f"{name}: for sampling=\"block\" only")
        if self.window_shards and (self.block or self.window):
            raise ValueError("window_shards sets block and window: give it alone, or block= "
                             "and window=")
        self.slots = int(slots)
        if self.slots == 1 or not 0 <= self.slots <= 1024:
            raise ValueError(f"slots: {slots} is not in 2..1024 (0 = loaderd's default)")
        self.weight = int(weight)
        if not 1 <= self.weight <= 1000:
            raise ValueError(f"weight: {weight} is not in 1..1000")
        if share_group is not None and owner is not None:
            raise ValueError("share_group is for the job's owner, owner for another user "
                             "joining it: not both")
        self.share_group = None if share_group is None else str(share_group)
        self.owner = None if owner is None else str(owner)
        self.balance = bool(balance)
        self._t_yield = None          # perf_counter_ns when the last batch was handed out
        self.return_meta = bool(return_meta)
        self.fields = fields
        self._field_names = [fields] if isinstance(fields, str) else \
            (list(fields) if fields is not None else None)
        self.fields_bytes = bool(fields_bytes)
        if tokenize is not None and (fields is None or not callable(tokenize)):
            raise ValueError("tokenize= needs fields= and a callable")
        self.tokenize = tokenize
        self._tok_pool = None   # its thread, made at the first batch
        self.copy = bool(copy)
        self.timeout = timeout

        self._torch = None
        if output is None:
            try:
                import torch
                self._torch = torch
            except ImportError:
                pass
        elif output == "torch":
            import torch
            self._torch = torch
        elif output != "numpy":
            raise ValueError(f"output: {output!r} is not 'torch', 'numpy' or None")
        if self._torch is None:
            import numpy  # noqa: F401  (fail here, not at the first batch)
        self.output = "torch" if self._torch is not None else "numpy"
        self.pin_memory = pin_memory
        self.device = None
        self._copy_stream = None
        if device is not None:
            if self._torch is None:
                raise ValueError("device= needs torch output")
            self.device = self._torch.device(device)
        self._norm = _parse_normalize(normalize, dtype, self.crop, layout, self._torch)
        self.normalize = normalize
        self._wait_ns = 0
        self._copy_ev = None
        self._prof = None
        if profile or (profile is None and P.enabled_by_env()):
            self._prof = P.Recorder(self)

        if job is None:
            job = self._default_job()
        elif not (_NAME_OK.match(job) and len(job) <= _JOB_BASE_MAX):
            raise ValueError(f"job: {job!r} must be 1..{_JOB_BASE_MAX} of [A-Za-z0-9._-]")
        self.job = job

        self._conn = None
        self._closed = False
        self._pos = (0, 0)            # (epoch, step_in_epoch) of the next batch, while unopened
        self._resume_job = None       # daemon job name from load_state_dict
        self._tok = None              # the job's resume token (L.ldc_token), once known
        self._expect_spe = None
        self._spe = None
        self._samples = None
        self._finished = False
        self.job_name = None          # the daemon job this rank is attached to
        self.skipped_steps = 0        # steps taken and dropped to reach a position: always 0,
                                      # loaderd starts at any step
        self.last_batch = None
        self._reset_conn_state()

    # ---- lifecycle ----

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def close(self):
        """Detach from loaderd. The ring is unmapped when no array yielded from it is left: one
        kept from the last batch keeps its bytes until it is dropped."""
        if self._prof is not None and not self._closed:
            self._prof.finish(self if self._conn is not None else None)
        self._disconnect()
        self._closed = True
        if getattr(self, "_tok_pool", None) is not None:
            self._tok_pool.shutdown(wait=True)
            self._tok_pool = None

    def open(self):
        """Attach now (otherwise the first iteration or len() does). Returns self."""
        self._ensure_open()
        return self

    # ---- position ----

    @property
    def position(self):
        """(epoch, step_in_epoch) of the next batch this Loader will yield."""
        if self._conn is not None:   # a batch taken ahead for tokenize= is not consumed
            return divmod(self._next - (self._ahead is not None), self._spe)
        return self._pos

    @property
    def steps_per_epoch(self) -> int:
        self._ensure_open()
        return self._spe

    @property
    def samples(self) -> int:
        """Samples in the dataset."""
        self._ensure_open()
        return self._samples

    def __len__(self) -> int:
        """Steps per epoch of this rank (all ranks have the same; the last may be short)."""
        return self.steps_per_epoch

    def set_epoch(self, epoch: int):
        """Make the next ``for`` loop cover @epoch. A no-op when the position is already in that
        epoch (at its start, or mid-way after load_state_dict); otherwise the position moves to
        the start of @epoch. Moving anywhere but forward by the natural step reattaches to
        loaderd, which invalidates arrays yielded before."""
        epoch = int(epoch)
        if epoch < 0:
            raise ValueError("epoch must be >= 0")
        if self.position[0] != epoch:
            self.seek(epoch, 0)

    def seek(self, epoch: int, step_in_epoch: int = 0):
        """Position the next batch at (@epoch, @step_in_epoch) exactly."""
        epoch, step_in_epoch = int(epoch), int(step_in_epoch)
        if epoch < 0 or step_in_epoch < 0 or (self._spe and step_in_epoch >= self._spe):
            raise ValueError(f"position ({epoch}, {step_in_epoch}) is out of range")
        if self.position == (epoch, step_in_epoch):
            return
        self._disconnect()
        self._finished = False
        self._pos = (epoch, step_in_epoch)

    def state_dict(self) -> dict:
        """Where this rank stands: the position of the next batch (the batches yielded so far
        count as consumed) as a resume token, bytes bound to the dataset's identity and the job's
        shape (loaderd refuses it for another dataset, world size, batch, ...), plus the same
        position and parameters in plain fields for people to read."""
        e, k = self.position
        return {
            "version": 2,
            "token": self._token_at(e, k),
            "epoch": e,
            "step_in_epoch": k,
            "step": e * self._spe + k if self._spe else None,
            "steps_per_epoch": self._spe,
            "batch_size": self.batch_size,
            "world_size": self.world_size,
            "seed": self.seed,
            "sampling": self.sampling,
            "block": self.block,
            "window": self.window,
            "window_shards": self.window_shards,
            "tail": self.tail,
            "crop": list(self.crop) if self.crop else None,
            "transforms": self.transforms,
            "augment": self.augment,
            "job": self.job_name or self._resume_job,
        }

    def load_state_dict(self, sd: dict):
        """Continue from @sd (a state_dict() of this or an earlier run, any rank): the next batch
        is the step its token names, and loaderd starts filling there (nothing before it is read
        or decoded). A token that is damaged, of another version, or made for another dataset or
        job shape is refused with the field named (ValueError here, or LoaderdError at attach
        for the dataset, which only loaderd can check). A version 1 state (no token) is taken by
        its (epoch, step_in_epoch), without the dataset check."""
        if sd.get("version") not in (1, 2):
            raise ValueError(f"state_dict version {sd.get('version')!r}; this client reads 1 and 2")
        mine = self.state_dict()
        for k in ("batch_size", "world_size", "seed", "sampling", "block", "window",
                  "window_shards", "tail", "crop", "transforms", "augment"):
            # keys a state of an older client lacks: what that client could only have had
            absent = {"augment": "", "block": 0, "window": 0, "window_shards": 0}.get(k)
            if sd.get(k, absent) != mine[k]:
                raise ValueError(f"state_dict has {k}={sd.get(k)!r}, this Loader {mine[k]!r}: "
                                 "the steps would not line up")
        tok = sd.get("token")
        if tok is not None:
            t = self._parse_token(bytes(tok))
            want = (("world", self.world_size, "world_size"), ("batch", self.batch_size, "batch_size"),
                    ("seed", self.seed, "seed"), ("sampling", self._sampling, "sampling"),
                    ("tail", self._tail, "tail"), ("transforms", self.transforms, "transforms"),
                    ("crop_h", self.crop[0] if self.crop else 0, "crop"),
                    ("crop_w", self.crop[1] if self.crop else 0, "crop"),
                    ("augment", AM.digest(self._aug) if self._aug else 0, "augment"))
            if not self.window_shards:   # else block is the set's (libldc checks it at open)
                blk = self._sampling == L.SAMPLING["block"]
                want += (("block", (self.block or 64) if blk else 0, "block"),
                         ("window", (self.window or 16) if blk else 0, "window"))
            for f, v, name in want:
                if getattr(t, f) != v:
                    raise ValueError(f"resume token: {f}: the token has {getattr(t, f)}, this "
                                     f"Loader's {name} is {v}")
            if self._spe and t.steps_per_epoch != self._spe:
                raise ValueError(f"resume token: steps_per_epoch: the token has "
                                 f"{t.steps_per_epoch}, loaderd {self._spe}")
            epoch, step, spe = t.epoch, t.step, t.steps_per_epoch
        else:
            epoch, step, spe = int(sd["epoch"]), int(sd["step_in_epoch"]), sd.get("steps_per_epoch")
            if spe and self._spe and spe != self._spe:
                raise ValueError(f"state_dict has {spe} steps per epoch, loaderd {self._spe}")
            t = None
        self.seek(epoch, step)
        self._expect_spe = spe
        if t is not None:
            self._tok = t
        job = sd.get("job")
        if job and isinstance(job, str) and _NAME_OK.match(job) and len(job) < L.JOB_NAME_MAX:
            self._resume_job = job

    # ---- iteration ----

    def __iter__(self):
        """The rest of the current epoch: from the position to its last step (or the job's)."""
        return self._epoch()

    def _epoch(self):
        self._ensure_open()
        if self._finished:
            return
        end = (self._next // self._spe + 1) * self._spe
        if self._steps_total:
            end = min(end, self._steps_total)
        prof = self._prof
        while self.tokenize is not None and self._conn is not None and \
                (self._next < end or self._ahead is not None):
            out = self._take_tokenized(end)
            if out is None:
                return
            yield out
        while self._conn is not None and self._next < end:
            if prof is None:
                out = self._take()
                if out is None:
                    return
                yield out
                continue
            t_req = prof.begin()
            out = self._take()
            if out is None:
                return
            b, ev = self.last_batch, self._copy_ev
            yield out
            prof.end(b.step, t_req, self._wait_ns, b.count, ev, P._now())

    @property
    def last_flags(self):
        """Per-sample RING_SAMPLE_* flags of the batch yielded last (a view; None before)."""
        return self.last_batch.flags if self.last_batch is not None else None

    def stats(self) -> dict:
        """loaderd's counters for this rank (ctl_stats) as a dict."""
        self._ensure_open()
        st = L.ctl_stats()
        rc = self._lib.ldc_stats(self._conn.ptr, ctypes.byref(st))
        if rc < 0:
            raise LoaderdError(-rc, self._conn.error())
        out = {}
        for f, _ in L.ctl_stats._fields_:
            if f == "phase_ns":
                out.update(zip(L.PHASES, st.phase_ns))
            elif not f.startswith("reserved"):
                out[f] = getattr(st, f)
        return out

    # ---- internals ----

    def _default_job(self) -> str:
        run = os.environ.get("TORCHELASTIC_RUN_ID")
        if run and run != "none":
            key = repr((self.dataset, self.batch_size, self.crop, self.transforms, self.augment,
                        self.seed,
                        self.world_size, self.epochs, self._sampling, self._tail, self._on_bad,
                        self.balance) +
                       ((self.block, self.window, self.window_shards)
                        if self._sampling == L.SAMPLING["block"] else ()))
            h = hashlib.blake2b(key.encode(), digest_size=4).hexdigest()
            run = re.sub(r"[^A-Za-z0-9._-]", "_", run)[:_JOB_BASE_MAX - 12]
            return f"py-{run}-{h}"
        return f"py-{os.getpid()}-{secrets.token_hex(4)}"

    def _reset_conn_state(self):
        self._next = 0
        self._steps_total = 0
        self._held = collections.deque()   # [step, cuda event or None], oldest first
        self._ahead = None          # tokenize=: (Batch, future) taken, not yet yielded
        self._views = {}
        self._ring_buf = None       # holds the connection: see _Conn
        self._ring_view = None
        self._hdr = None
        self._base = 0
        self._track_cuda = False
        self._dead = False

    def _ensure_open(self):
        if self._closed:
            raise ValueError("this Loader is closed")
        if self._conn is not None and self._dead:
            self._disconnect()  # loaderd went away: try again at the same position
        if self._conn is None and not (self._finished and self._spe):
            self._attach()

    def _spec(self, name: str, pos) -> L.ldc_job:
        j = L.ldc_job()
        j._keep = [name.encode(), self.dataset.encode()]  # c_char_p does not own its bytes
        j.job, j.dataset = j._keep
        j.batch = self.batch_size
        j.crop_h, j.crop_w = self.crop if self.crop else (0, 0)
        j.transforms = self.transforms
        j.seed = self.seed
        j.rank, j.world = self.rank, self.world_size
        j.sampling, j.tail, j.on_bad = self._sampling, self._tail, self._on_bad
        j.slots = self.slots
        j.weight = self.weight
        j.balance = 1 if self.balance else 0
        j.block, j.window, j.window_shards = self.block, self.window, self.window_shards
        if self.share_group is not None:
            j._keep.append(self.share_group.encode())
            j.share_group = j._keep[-1]
        if self.owner is not None:
            j._keep.append(self.owner.encode())
            j.owner = j._keep[-1]
        j.epochs = self.epochs if self.epochs is not None else 0
        j.start_epoch = 0
        # Always an exact start: loaderd computes that step's samples directly.
        j.start_at, (j.at_epoch, j.at_step) = 1, pos
        tok = self._token_at(*pos)
        if tok is not None:
            buf = ctypes.create_string_buffer(tok, len(tok))
            j._keep.append(buf)
            j.token, j.token_len = ctypes.addressof(buf), len(tok)
        return j

    def _parse_token(self, tok: bytes) -> L.ldc_token:
        lib = L.lib()
        t = L.ldc_token()
        why = ctypes.create_string_buffer(256)
        rc = lib.ldc_token_parse(tok, len(tok), ctypes.byref(t), why, len(why))
        if rc < 0:
            raise ValueError(why.value.decode("utf-8", "replace"))
        return t

    def _token_at(self, epoch: int, step: int):
        """The resume token for (epoch, step) of this job, or None before the job's identity is
        known (no attach yet and no state loaded)."""
        t = self._tok
        if t is None or step >= t.steps_per_epoch:
            return None
        u = L.ldc_token.from_buffer_copy(t)
        u.epoch, u.step = epoch, step
        L.lib().ldc_token_seal(ctypes.byref(u))
        return ctypes.string_at(ctypes.addressof(u), ctypes.sizeof(u))

    def _connect(self) -> _Conn:
        lib = self._lib = L.lib()
        p = ctypes.c_void_p()
        err = ctypes.create_string_buffer(512)
        rc = lib.ldc_connect(self.socket.encode(), ctypes.byref(p), err, len(err))
        if rc < 0:
            raise LoaderdError(-rc, err.value.decode("utf-8", "replace"))
        return _Conn(lib, p)

    def _candidates(self):
        """Daemon job names to try, in order: the job a loaded state came from, then this
        Loader's name and NAME.1 .. NAME.7. Every one is opened at the exact position, so which
        one it is changes nothing but sharing: ranks that run together attach to one job."""
        out = [self._resume_job] if self._resume_job else []
        out += [self.job] + [f"{self.job}.{i}" for i in range(1, _NAME_TRIES)]
        return [n for n in out if len(n) < L.JOB_NAME_MAX]

    def _attach(self):
        """Attach at self._pos = (E, k): loaderd starts this rank's ring at step E * spe + k and
        fills nothing before it. A job name that exists with other parameters (EEXIST) or whose
        rank is attached elsewhere (EBUSY) is left for the next name."""
        pos_e, pos_k = self._pos
        # At or past the end of a bounded run, attach to the last epoch only to learn
        # steps_per_epoch; the Loader is finished.
        past_end = self.epochs is not None and pos_e >= self.epochs
        want_e, want_k = (self.epochs - 1, 0) if past_end else (pos_e, pos_k)
        last = None
        for name in self._candidates():
            conn = self._connect()
            if _s3.is_url(self.dataset):
                try:
                    if not _s3.through_node_cache(conn, self.dataset):
                        self.dataset = _s3.local_dataset(self.dataset)
                except BaseException:
                    conn.close()
                    raise
            info = L.ldc_info()
            job = self._spec(name, (want_e, want_k))
            rc = 0
            if self._aug is not None:
                rc = conn.lib.ldc_augment(conn.ptr, ctypes.byref(self._aug))
                if rc < 0:
                    e = LoaderdError(-rc, conn.error())
                    conn.close()
                    raise e
            rc = conn.lib.ldc_open(conn.ptr, ctypes.byref(job), ctypes.byref(info))
            if rc in (-_errno.EEXIST, -_errno.EBUSY):
                last = LoaderdError(-rc, conn.error())
                conn.close()
                continue
            if rc < 0:
                e = LoaderdError(-rc, conn.error())
                conn.close()
                if rc == -_errno.EINVAL and "at_step" in str(e):
                    raise ValueError(f"position step {pos_k} is not in an epoch of this job: {e}")
                raise e
            spe, first = info.steps_per_epoch, info.first_step
            if self._expect_spe is not None and spe != self._expect_spe:
                conn.close()
                raise ValueError(f"the state_dict has {self._expect_spe} steps per epoch, loaderd "
                                 f"now {spe}: another dataset, or another tail policy")
            if first != want_e * spe + want_k:
                conn.close()
                raise LoaderdError(_errno.EBADMSG, f"loaderd started the ring at step {first}, "
                                   f"asked for {want_e * spe + want_k}")
            try:
                self._map(conn, info)
            except Exception:
                conn.close()
                raise
            self._conn = conn
            self._spe, self._samples = spe, info.samples
            self._steps_total = info.steps_total
            self._next = first
            self.job_name = name
            buf = ctypes.create_string_buffer(L.TOKEN_SIZE)
            if conn.lib.ldc_token(conn.ptr, first, buf, len(buf)) == L.TOKEN_SIZE:
                self._tok = self._parse_token(buf.raw)
            if past_end:
                self._next = pos_e * spe + pos_k
                self._finished = True
                self._disconnect()
            return
        raise last if last else LoaderdError(_errno.EEXIST, f"no job name left for {self.job!r}")

    def _map(self, conn: _Conn, info: L.ldc_info):
        """Views over the whole mapping, and CUDA registration."""
        lib = conn.lib
        base, size = lib.ldc_ring_base(conn.ptr), lib.ldc_ring_size(conn.ptr)
        hdr = L.ring_hdr.from_buffer_copy(info.ring.contents)
        L.check_ring_header(hdr)
        # balanced shares: a slot holds up to twice the batch (ctl.h CTL_BALANCE_CAP)
        cap = min(2 * self.batch_size, 65536) if self.balance else self.batch_size
        if hdr.total_size != size or hdr.batch != cap:
            raise LoaderdError(_errno.EBADMSG, "the ring's header disagrees with the job")
        buf = (ctypes.c_uint8 * size).from_address(base)
        buf._conn = conn            # views -> buffer -> connection: GC never unmaps under a view
        self._ring_buf, self._base, self._hdr = buf, base, hdr
        if self._torch is not None:
            self._ring_view = self._torch.frombuffer(buf, dtype=self._torch.uint8)
        else:
            import numpy as np
            self._ring_view = np.frombuffer(buf, dtype=np.uint8)
        self._pin(conn, base, size)

    def _pin(self, conn: _Conn, base: int, size: int):
        torch = self._torch
        if torch is None or self.pin_memory is False:
            return
        try:
            if not torch.cuda.is_available():
                return
            cudart = torch.cuda.cudart()
            err = cudart.cudaHostRegister(base, size, 1)  # cudaHostRegisterPortable
            if err != cudart.cudaError.success:
                warnings.warn(f"loaderd: cudaHostRegister of the ring ({size >> 20} MiB) failed "
                              f"({err}); host-to-device copies will not be pinned", RuntimeWarning)
                return
        except Exception as e:  # no CUDA runtime in this torch build, or no device
            if self.pin_memory:
                warnings.warn(f"loaderd: cannot pin the ring: {e}", RuntimeWarning)
            return
        conn.pinned = (torch, base)
        self._track_cuda = True

    def _disconnect(self):
        conn = self._conn
        if conn is None:
            return
        self._pos = divmod(self._next - (self._ahead is not None), self._spe)
        self._conn = None
        self.last_batch = None
        self._reset_conn_state()
        # The job goes now; the mapping when the last array of it does (_Conn): at once, unless
        # the caller still holds one.
        conn.hang_up()

    def _acquire(self, b: L.ldc_batch) -> bool:
        """Take the next step into @b. False at the end of the job; raises on anything else."""
        conn = self._conn
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        while True:
            ms = _SLICE_MS
            if deadline is not None:
                ms = max(0, min(ms, int((deadline - time.monotonic()) * 1000)))
            rc = conn.lib.ldc_acquire(conn.ptr, ms, ctypes.byref(b))
            if rc == 0:
                if b.step != self._next:
                    raise LoaderdError(_errno.EBADMSG, f"loaderd delivered step {b.step}, "
                                       f"expected {self._next}")
                return True
            if rc == -_errno.ENODATA:
                self._finished = True
                return False
            if rc == -_errno.ETIMEDOUT:
                if deadline is not None and time.monotonic() >= deadline:
                    raise LoaderdTimeout(_errno.ETIMEDOUT, f"no batch for step {self._next} "
                                         f"within {self.timeout} s")
                continue
            if rc == -_errno.EPIPE:
                # The mapping stays until the next attach, so what was yielded stays readable.
                self._dead = True
            raise LoaderdError(-rc, conn.error())

    def _release_step(self, step: int):
        b = L.ldc_batch()
        b.step = step
        rc = self._conn.lib.ldc_release(self._conn.ptr, ctypes.byref(b))
        if rc < 0:
            raise LoaderdError(-rc, self._conn.error())

    def _retire(self, keep=0):
        """The batch yielded last is done with: release it, and those before it. With the ring
        pinned, a release waits for the GPU work queued so far on the current stream (it may
        still be copying from the slot: .to('cuda', non_blocking=True)); up to slots/2 batches
        are left held while their copies run."""
        held = self._held
        if not held:
            return
        if len(held) <= keep:
            return
        if self._track_cuda and held[-1 - keep][1] is None:
            ev = self._torch.cuda.Event()
            ev.record()
            held[-1 - keep][1] = ev
        limit = max(1, self._hdr.slots // 2) if self._track_cuda else 0
        while len(held) > keep:
            step, ev = held[0]
            if ev is not None and not ev.query():
                if len(held) <= limit:
                    break
                ev.synchronize()
            held.popleft()
            self._release_step(step)

    def _views_of(self, data: int):
        v = self._views.get(data)
        if v is None:
            h = self._hdr
            slot = data - h.payload_off
            n = h.batch
            shape = (n,) + tuple(h.shape[i] for i in range(h.ndim))
            off = slot - self._base
            rv = self._ring_view
            pay = off + h.payload_off
            images = rv[pay:pay + n * h.sample_bytes]
            if self._torch is not None:
                t = self._torch
                images = images.view(shape)
                labels = rv[off + h.labels_off:off + h.labels_off + 8 * n].view(t.int64)
                ids = rv[off + h.ids_off:off + h.ids_off + 8 * n].view(t.int64)
            else:
                import numpy as np
                images = images.reshape(shape)
                labels = rv[off + h.labels_off:off + h.labels_off + 8 * n].view(np.int64)
                ids = rv[off + h.ids_off:off + h.ids_off + 8 * n].view(np.uint64)
            flags = rv[off + h.flags_off:off + h.flags_off + n]
            v = self._views[data] = (images, labels, ids, flags)
        return v

    def _take_tokenized(self, end):
        """tokenize=: the batch taken ahead (or one taken now), its tokens waited for; the next
        batch of the epoch taken now and its fields handed to the tokenizer's thread, so that
        they are tokenized while this one trains. The slot of the one ahead stays held."""
        if self._tok_pool is None:
            import concurrent.futures
            self._tok_pool = concurrent.futures.ThreadPoolExecutor(1, "loaderd-tokenize")
        ask = (lambda b: self._tok_pool.submit(
            self.tokenize, b.fields[self.fields] if isinstance(self.fields, str) else b.fields))
        if self._ahead is None:
            b = self._take(meta=True)
            if b is None:
                return None
            cur = (b, ask(b))
        else:
            cur, self._ahead = self._ahead, None
            self._retire(keep=1)   # what was yielded before; not this one
        if self._next < end:
            nb = self._take(meta=True, retire=False)
            if nb is not None:
                self._ahead = (nb, ask(nb))
        b, fut = cur
        b.tokens = fut.result()
        self.last_batch = b
        return b if self.return_meta else (b.images, b.tokens)

    def _take(self, meta=False, retire=True):
        if self.last_batch is not None:
            self.last_batch = None
        if retire:
            self._retire()
        b = L.ldc_batch()
        if self._prof is None:
            if not self._acquire(b):
                return None
        else:
            t = P._now()
            got = self._acquire(b)
            self._wait_ns = P._now() - t
            if not got:
                return None
            if self._prof.st0 is None:
                self._prof.first_batch(self)
        self._next += 1
        self._held.append([b.step, None])
        images, labels, ids, flags = self._views_of(b.data)
        n = b.count
        out = Batch(images[:n], labels[:n], ids[:n], flags[:n], b.step, b.epoch,
                    b.step_in_epoch, n, bool(b.flags & L.SLOT_LAST), self._torch is not None)
        out.global_count, out.global_offset = b.global_count, b.global_offset
        if self._field_names is not None:
            out.fields = self._fields_of(b)
        if self.device is not None and self.device.type != "cpu":
            self._to_device(out)
        elif self._norm is not None:
            # new memory for the images, copies of the rest: the slot goes back now
            g = out.global_count, out.global_offset
            fl = out.fields
            out = Batch(self._normalized(out.images), *[x.clone() if self._torch else x.copy()
                        for x in (out.labels, out.ids, out.flags)], out.step, out.epoch,
                        out.step_in_epoch, out.count, out.last, self._torch)
            out.global_count, out.global_offset = g
            out.fields = fl
            self._held.pop()
            self._release_step(b.step)
        elif self.copy:
            out = out.copy()
            self._held.pop()
            self._release_step(b.step)
        self.last_batch = out
        self._t_yield = time.perf_counter_ns()
        if self.return_meta or meta:
            return out
        if self._field_names is not None:
            f = out.fields
            return out.images, (f[self.fields] if isinstance(self.fields, str) else f)
        return out.images, out.labels

    def _fields_of(self, b):
        """The batch's aux fields asked for, per sample in batch order: read from the slot (the
        offsets and lengths are the C client's checked copies) into Python objects."""
        lib, ptr = self._conn.lib, self._conn.ptr
        nf = b.aux_fields
        if not hasattr(self, "_aux_index"):
            names = [lib.ldc_aux_name(ptr, k).decode() for k in range(nf)]
            missing = [n for n in self._field_names if n not in names]
            if missing:
                raise LoaderdError(_errno.EINVAL, f"dataset {self.dataset} has no aux field "
                                   f"{', '.join(missing)} (it has: {', '.join(names) or 'none'})")
            self._aux_index = [names.index(n) for n in self._field_names]
        base = b.aux - self._base
        rv = self._ring_view
        out = {}
        for name, k in zip(self._field_names, self._aux_index):
            vals = []
            for j in range(b.count):
                o, n = b.field_off[j * nf + k], b.field_len[j * nf + k]
                v = rv[base + o:base + o + n]
                v = v.numpy().tobytes() if self._torch is not None else v.tobytes()
                if not self.fields_bytes:
                    try:
                        v = v.decode("utf-8")
                    except UnicodeDecodeError:
                        pass
                vals.append(v)
            out[name] = vals
        return out

    def report_compute(self, seconds=None):
        """balance=True: tell loaderd how long this rank computed on the batch yielded last
        (forward and backward, without waiting for data or for other ranks; seconds). None: the
        time since that batch was handed out (what loaderd.ddp.register reports when backward
        reaches the last bucket). The latest report goes with each batch given back from then on;
        every few steps loaderd moves each rank's share of the global step towards its speed,
        from the reports that came with defined steps. Returns False when there was
        nothing to report (no batch, not balanced, a time that is not positive)."""
        b = self.last_batch
        if not self.balance or b is None or b.count == 0 or self._conn is None:
            return False
        if seconds is None:
            if self._t_yield is None:
                return False
            seconds = (time.perf_counter_ns() - self._t_yield) / 1e9
        ns = float(seconds) * 1e9 / b.count
        if not ns > 0 or ns == float("inf"):
            return False
        return self._conn.lib.ldc_report(self._conn.ptr, ns) == 0

    def _to_device(self, out: Batch):
        """device=: images and labels onto the device. On CUDA the copy is issued on a side
        stream and the current stream waits for its event, so compute queued later starts only
        when the batch is there, and the host does not block; the slot is released once the
        event has passed. With attribution on, CUDA events around the wait measure how long the
        current stream stalled on the copy (the exposed copy)."""
        torch, dev = self._torch, self.device
        self._copy_ev = None
        if dev.type != "cuda":   # another device: a synchronous copy, the slot as usual
            out.images, out.labels = out.images.to(dev), out.labels.to(dev)
            return
        cur = torch.cuda.current_stream(dev)
        if self._copy_stream is None:
            self._copy_stream = torch.cuda.Stream(dev)
        side = self._copy_stream
        with torch.cuda.stream(side):
            images = out.images.to(dev, non_blocking=True)
            labels = out.labels.to(dev, non_blocking=True)
            if self._norm is not None:   # converted on the copy stream, after the copy
                images = self._normalized(images)
            done = torch.cuda.Event()
            done.record(side)
        if self._prof is not None:
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record(cur)
            cur.wait_event(done)
            e1.record(cur)
            self._copy_ev = (e0, e1)
        else:
            cur.wait_event(done)
        # allocated on the side stream, used on the current one
        images.record_stream(cur)
        labels.record_stream(cur)
        self._held[-1][1] = done
        out.images, out.labels = images, labels

    def _normalized(self, x):
        """uint8 images @x as (x / 255 - mean) / std in the normalize dtype (a new array)."""
        consts = self.__dict__.setdefault("_norm_consts", {})
        return normalized(self._norm, self._torch, x, consts)

    def device_type(self) -> str:
        """Where batches end up: the device= type, else "cuda" when the ring is pinned (the
        script copies), else "cpu"."""
        if self.device is not None:
            return self.device.type
        return "cuda" if self._track_cuda else "cpu"

    def profile_report(self, warmup=None) -> dict:
        """The report (loaderd-trainer-report/1, with loaderd's side and advice) of the steps
        profiled so far, over every rank: under torch.distributed a collective (every rank
        calls it; each gets the report). Needs profile=True (or $LOADERD_PROFILE=1)."""
        if self._prof is None:
            raise ValueError("this Loader does not profile: Loader(..., profile=True) or "
                             "LOADERD_PROFILE=1")
        from . import analysis
        return analysis.analyse(P.gather(self), warmup=warmup)
