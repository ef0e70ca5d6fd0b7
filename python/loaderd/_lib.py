"""_lib.py - ctypes mirror of the loaderd client C API (shm/ldc.h, shm/ring.h, shm/ctl.h) and the
loading of libldc.so.

The Structures below copy the C structs field for field. They are checked twice: abi_check()
compares sizes and offsets with the values the C headers pin down (the _Static_asserts in ring.h
and ctl.h, and the LP64 layout of the ldc_* structs), and the ring header of every ring that is
mapped is checked for its magic, version and header size before anything in it is trusted.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import threading
from pathlib import Path

c_u8, c_u32, c_u64, c_i32, c_i64 = (ctypes.c_uint8, ctypes.c_uint32, ctypes.c_uint64,
                                    ctypes.c_int32, ctypes.c_int64)

# ---- constants (shm/ring.h, shm/ctl.h) ----
RING_MAGIC = b"LDRING\0\1"
RING_VERSION = 1
RING_HEADER_SIZE = 4096

RING_DTYPE_U8 = 1
RING_LAYOUT_RAW, RING_LAYOUT_NHWC, RING_LAYOUT_NCHW = 0, 1, 2

SAMPLE_SUBSTITUTED = 0x01  # the record was bad; another sample took its place
SAMPLE_PADDING = 0x02      # tail padding with weight 0 (tail "mask")
SAMPLE_REPEATED = 0x04     # tail padding that repeats a sample (tail "pad")
SLOT_LAST = 0x01           # the last step of the job

TF_RANDOM_RESIZED_CROP = 0x01
TF_CENTER_CROP = 0x02
TF_HFLIP = 0x04
TF_NCHW = 0x08
TF_ALL = 0x0F

SAMPLING = {"shuffle": 0, "sequential": 1, "block": 2}
TAIL = {"pad": 0, "drop": 1, "mask": 2, "drop_last": 3}
ON_BAD = {"substitute": 0, "fail": 1}

JOB_NAME_MAX = 64   # bytes including the NUL
PATH_MAX = 1024


class ldc_job(ctypes.Structure):
    _fields_ = [
        ("job", ctypes.c_char_p),
        ("dataset", ctypes.c_char_p),
        ("batch", c_u32),
        ("crop_h", c_u32),
        ("crop_w", c_u32),
        ("transforms", c_u32),
        ("seed", c_u64),
        ("rank", c_u32),
        ("world", c_u32),
        ("sampling", c_u32),
        ("tail", c_u32),
        ("on_bad", c_u32),
        ("slots", c_u32),
        ("epochs", c_u32),
        ("weight", c_u32),
        ("start_epoch", c_u64),
        ("start_at", ctypes.c_int),
        ("at_epoch", c_u64),
        ("at_step", c_u64),
        ("token", ctypes.c_void_p),
        ("token_len", ctypes.c_size_t),
        ("share_group", ctypes.c_char_p),
        ("owner", ctypes.c_char_p),
        ("balance", ctypes.c_int),
        ("block", c_u32),
        ("window", c_u32),
        ("window_shards", c_u32),
    ]


TOKEN_SIZE = 112    # shm/token.h LDC_TOKEN_SIZE (version 2; version 1 tokens, 104 bytes, parse)
TOKEN_ID_SIZE = 16


class ldc_token(ctypes.Structure):
    _fields_ = [
        ("magic", c_u32),
        ("version", ctypes.c_uint16),
        ("length", ctypes.c_uint16),
        ("seed", c_u64),
        ("epoch", c_u64),
        ("step", c_u64),
        ("dataset", c_u8 * TOKEN_ID_SIZE),
        ("samples", c_u64),
        ("steps_per_epoch", c_u64),
        ("world", c_u32),
        ("batch", c_u32),
        ("sampling", c_u32),
        ("tail", c_u32),
        ("transforms", c_u32),
        ("crop_h", c_u32),
        ("crop_w", c_u32),
        ("augment", c_u32),
        ("block", c_u32),
        ("window", c_u32),
        ("check", c_u64),
    ]


class ctl_augment(ctypes.Structure):
    """shm/ctl.h: a job's augmentations (CTL_AUGMENT), fractions in millionths."""
    _fields_ = [
        ("jitter", c_u32),
        ("jitter_lo", c_i32 * 4),
        ("jitter_hi", c_i32 * 4),
        ("autoaug", c_u32),
        ("num_ops", c_u32),
        ("magnitude", c_u32),
        ("bins", c_u32),
        ("erase_p", c_u32),
        ("erase_scale", c_u32 * 2),
        ("erase_ratio", c_u32 * 2),
        ("erase_fill", c_u32),
        ("erase_rgb", c_u8 * 4),
        ("erase_mean", c_u32 * 3),
        ("erase_std", c_u32 * 3),
        ("interp", c_u32),
        ("antialias", c_u32),
        ("reserved", c_u32 * 4),
    ]


class ring_hdr(ctypes.Structure):
    _fields_ = [
        ("magic", ctypes.c_char * 8),
        ("version", c_u32),
        ("header_size", c_u32),
        ("total_size", c_u64),
        ("states_offset", c_u64),
        ("slots_offset", c_u64),
        ("slot_size", c_u64),
        ("slots", c_u32),
        ("batch", c_u32),
        ("sample_bytes", c_u64),
        ("shape", c_u32 * 4),
        ("ndim", c_u8),
        ("dtype", c_u8),
        ("layout", c_u8),
        ("huge", c_u8),
        ("flags_off", c_u32),
        ("labels_off", c_u32),
        ("ids_off", c_u32),
        ("payload_off", c_u32),
        ("rank", c_u32),
        ("world", c_u32),
        ("reserved0", c_u32),
        ("job_id", c_u64),
        ("first_step", c_u64),
        ("steps_total", c_u64),
        ("steps_per_epoch", c_u64),
        ("aux_off", c_u32),
        ("aux_fields", c_u32),
        ("aux_stride", c_u32),
        ("reserved1", c_u32),
        ("reserved", c_u64 * 2),
    ]


class ring_slot_hdr(ctypes.Structure):
    _fields_ = [
        ("step", c_u64),
        ("epoch", c_u64),
        ("step_in_epoch", c_u64),
        ("count", c_u32),
        ("flags", c_u32),
        ("fill_ns", c_u64),
        ("latency_ns", c_u64),
        ("global_count", c_u32),
        ("global_offset", c_u32),
        ("cons_report", c_u64),
    ]


class ldc_info(ctypes.Structure):
    _fields_ = [
        ("job_id", c_u64),
        ("first_step", c_u64),
        ("steps_total", c_u64),
        ("steps_per_epoch", c_u64),
        ("samples", c_u64),
        ("ring", ctypes.POINTER(ring_hdr)),
        ("dataset_id", c_u8 * TOKEN_ID_SIZE),
    ]


class ldc_batch(ctypes.Structure):
    _fields_ = [
        ("step", c_u64),
        ("epoch", c_u64),
        ("step_in_epoch", c_u64),
        ("count", c_u32),
        ("flags", c_u32),
        ("sample_flags", ctypes.c_void_p),
        ("labels", ctypes.c_void_p),
        ("ids", ctypes.c_void_p),
        ("data", ctypes.c_void_p),
        ("sample_bytes", c_u64),
        ("global_count", c_u32),
        ("global_offset", c_u32),
        ("aux_fields", c_u32),
        ("aux_stride", c_u32),
        ("aux", ctypes.c_void_p),
        ("field_off", ctypes.POINTER(c_u32)),
        ("field_len", ctypes.POINTER(c_u32)),
    ]


class ctl_stats(ctypes.Structure):
    _fields_ = [
        ("job_id", c_u64),
        ("published", c_u64),
        ("released", c_u64),
        ("samples", c_u64),
        ("bad_records", c_u64),
        ("fill_ns", c_u64),
        ("phase_ns", c_u64 * 2),  # CTL_PHASES_MAX; what each measures: PHASES
        ("attaches", c_u32),
        ("ranks_attached", c_u32),
        ("slots", c_u32),
        ("occupancy", c_u32),
        ("workers", c_u32),
        ("reserved0", c_u32),
        ("latency_ns", c_u64),
        ("reserved", c_u64 * 2),
    ]


# The phases of loaderd's fill in ctl_stats.phase_ns order (loader/job.h, enum ldr_phase), by the
# keys Loader.stats() gives their times under.
PHASES = ("io_ns", "decode_ns")


# Sizes and offsets the C side has (ring.h and ctl.h assert theirs; the ldc_* structs are the
# x86-64/aarch64 LP64 layout of shm/ldc.h). A field added on either side without the other shows
# up here, before any byte crosses.
ABI = {
    ldc_job: (152, {"batch": 16, "seed": 32, "rank": 40, "slots": 60, "epochs": 64, "weight": 68,
                    "start_epoch": 72, "start_at": 80, "at_epoch": 88, "token": 104,
                    "token_len": 112, "share_group": 120, "owner": 128, "balance": 136,
                    "block": 140, "window": 144, "window_shards": 148}),
    ldc_info: (64, {"samples": 32, "ring": 40, "dataset_id": 48}),
    ldc_token: (TOKEN_SIZE, {"dataset": 32, "world": 64, "augment": 92, "block": 96,
                             "check": 104}),
    ctl_augment: (128, {"autoaug": 36, "erase_rgb": 76, "interp": 104, "reserved": 112}),
    ldc_batch: (112, {"count": 24, "flags": 28, "sample_flags": 32, "labels": 40, "ids": 48,
                      "data": 56, "sample_bytes": 64, "global_count": 72, "global_offset": 76,
                      "aux_fields": 80, "aux": 88, "field_off": 96, "field_len": 104}),
    ring_hdr: (176, {"total_size": 16, "slot_size": 40, "sample_bytes": 56, "shape": 64,
                     "ndim": 80, "flags_off": 84, "payload_off": 96, "job_id": 112,
                     "first_step": 120, "steps_per_epoch": 136, "aux_off": 144,
                     "aux_stride": 152}),
    ring_slot_hdr: (64, {"count": 24, "fill_ns": 32, "latency_ns": 40, "global_count": 48,
                         "global_offset": 52, "cons_report": 56}),
    ctl_stats: (112, {"phase_ns": 48, "attaches": 64, "occupancy": 76, "workers": 80,
                      "latency_ns": 88, "reserved": 96}),
}


def abi_check() -> None:
    """Raise RuntimeError if a ctypes mirror disagrees with the C layout it copies."""
    if ctypes.sizeof(ctypes.c_void_p) != 8:
        raise RuntimeError("loaderd's Python client needs a 64-bit platform (LP64)")
    bad = []
    for st, (size, offs) in ABI.items():
        if ctypes.sizeof(st) != size:
            bad.append(f"sizeof(struct {st.__name__}) is {ctypes.sizeof(st)}, C has {size}")
        for f, off in offs.items():
            got = getattr(st, f).offset
            if got != off:
                bad.append(f"offsetof(struct {st.__name__}, {f}) is {got}, C has {off}")
    if bad:
        raise RuntimeError("loaderd ctypes ABI mismatch: " + "; ".join(bad))


def check_ring_header(h: ring_hdr) -> None:
    """Raise RuntimeError unless @h is a ring header this module understands."""
    magic = ctypes.string_at(ctypes.addressof(h), 8)  # all 8 bytes: c_char arrays stop at NUL
    if magic != RING_MAGIC:
        raise RuntimeError(f"ring header has magic {magic!r}, expected {RING_MAGIC!r}")
    if h.version != RING_VERSION or h.header_size != RING_HEADER_SIZE:
        raise RuntimeError(f"ring header version {h.version} size {h.header_size}; this client "
                           f"reads version {RING_VERSION} size {RING_HEADER_SIZE}")
    if h.dtype != RING_DTYPE_U8 or h.ndim > 4 or h.layout > RING_LAYOUT_NCHW:
        raise RuntimeError(f"ring header: dtype {h.dtype}, ndim {h.ndim}, layout {h.layout} "
                           "not understood")


# ---- library ----

_lib = None
_lib_lock = threading.Lock()


def _candidates():
    env = os.environ.get("LOADERD_LIB")
    if env:
        return [Path(env)], True
    here = Path(__file__).resolve().parent
    repo = here.parent.parent  # python/loaderd -> the repository, when run or installed -e there
    out = [repo / "build" / "lib" / "libldc.so"] if (repo / "shm" / "ldc.h").exists() else []
    return out + [here / "libldc.so"], False


def _declare(lib):
    P, I, S, V = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t, None
    sigs = {
        "ldc_connect": (I, [ctypes.c_char_p, ctypes.POINTER(P), ctypes.c_char_p, S]),
        "ldc_open": (I, [P, ctypes.POINTER(ldc_job), ctypes.POINTER(ldc_info)]),
        "ldc_acquire": (I, [P, I, ctypes.POINTER(ldc_batch)]),
        "ldc_release": (I, [P, ctypes.POINTER(ldc_batch)]),
        "ldc_stats": (I, [P, ctypes.POINTER(ctl_stats)]),
        "ldc_detach": (V, [P]),
        "ldc_close": (V, [P]),
        "ldc_error": (ctypes.c_char_p, [P]),
        "ldc_aux_name": (ctypes.c_char_p, [P, ctypes.c_uint32]),
        "ldc_ring_base": (P, [P]),
        "ldc_ring_size": (S, [P]),
        "ldc_token": (I, [P, ctypes.c_uint64, P, S]),
        "ldc_report": (I, [P, ctypes.c_double]),
        "ldc_token_parse": (I, [P, S, ctypes.POINTER(ldc_token), ctypes.c_char_p, S]),
        "ldc_token_seal": (V, [ctypes.POINTER(ldc_token)]),
        "ldc_augment": (I, [P, ctypes.POINTER(ctl_augment)]),
        "ldc_s3_offer": (I, [P, ctypes.c_char_p]),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args
    return lib


def lib():
    """libldc.so, loaded once: $LOADERD_LIB, else the repository's build/lib/ (a checkout), else
    the package directory (where pip's build put it, python/setup.py), else the dynamic linker's
    search path (a `make install`)."""
    global _lib
    with _lib_lock:
        if _lib is not None:
            return _lib
        abi_check()
        paths, explicit = _candidates()
        tried = []
        for p in paths:
            if not p.exists():
                tried.append(f"{p} (missing)")
                continue
            try:
                _lib = _declare(ctypes.CDLL(str(p)))
                return _lib
            except OSError as e:
                tried.append(f"{p} ({e})")
        if not explicit:
            name = ctypes.util.find_library("ldc")
            if name:
                try:
                    _lib = _declare(ctypes.CDLL(name))
                    return _lib
                except OSError as e:
                    tried.append(f"{name} ({e})")
            else:
                tried.append("libldc.so on the linker path (not found)")
        raise OSError(errno.ENOENT, "cannot load loaderd's client library libldc.so; tried: " +
                      "; ".join(tried) + ". `pip install ./python` (from the loaderd "
                      "repository) builds it into the package; or set "
                      "LOADERD_LIB=/path/to/build/lib/libldc.so")
