"""profile.py - per-step attribution inside a PyTorch (or numpy) training loop, for loaderd.diagnose.

Off unless ``Loader(..., profile=True)`` or the environment variable LOADERD_PROFILE=1 (what
``python -m loaderd.diagnose -- CMD`` sets). A step is the time between two batch requests of
one ``for`` loop over the Loader (the step period); of it:

  data     the time the request was blocked waiting for loaderd's batch (ldc_acquire);
  copy     with ``device=``: the time the compute stream waited for the batch's host-to-device
           copy (CUDA events on both streams, read a few steps later);
  comm     with DistributedDataParallel: from the launch of the step's last gradient bucket
           (backward has produced every gradient by then) to the end of the last bucket's
           allreduce: the allreduce that compute did not hide. Timed by a communication hook
           (register_comm_hook) that wraps the default allreduce, or the script's own hook;
  compute  the rest: forward, backward, optimizer, the script's own work (a copy the script
           makes itself, logging) - Python sees no boundary between them;
  opt      0: not told apart from compute (the trainer's report has it; here it is in compute).

Plus loaderd's side, from its stats request at the first batch and at the end: the fill time
of this rank's batches (per sample, and split into reading and decoding) and the daemon's worker
count, hence the share of loaderd's workers this job kept busy.

Cost when on: three clock reads and a list append per step, one more per bucket; two stats
round trips per run. Off: one attribute test per step.

Each rank's record is written as JSON into $LOADERD_PROFILE_DIR when the Loader closes, when it
is collected without close() (a Loader made inside main() and dropped), at exit (sys.exit, an
uncaught exception, KeyboardInterrupt) and on SIGTERM (a handler of ours, only where the script
left the default: it writes the records, then dies of the signal as before); loaderd.diagnose
reads them. The recorders are held strongly until their record is written: the Loader only
weakly (its end is seen by weakref.finalize). loaderd's counters at the end are those of close()
or exit; when the Loader is gone first, the last of the snapshots taken every STATS_EVERY_NS. Under torch.distributed, ``Loader.profile_report()`` gathers
the ranks' records itself (a collective: every rank calls it) and returns the report.
"""
import atexit
import json
import os
import socket
import sys
import threading
import time
import weakref

ENV = "LOADERD_PROFILE"          # 1: attribution on in every Loader
ENV_DIR = "LOADERD_PROFILE_DIR"  # where each rank writes its record
RECORD_VERSION = 1
STEPS_MAX = 200000               # steps kept per Loader (totals go on)
STATS_EVERY_NS = 2 * 10**9       # loaderd's counters re-read at most this often during a run

_now = time.monotonic_ns         # CLOCK_MONOTONIC: one clock for every process of the host


def enabled_by_env():
    return os.environ.get(ENV, "") not in ("", "0")


# ---- DistributedDataParallel: the timed allreduce ----

_comm = []              # (launch_ns, end_ns, bytes) of every bucket, appended by the hook
_comm_lock = threading.Lock()
_ddp = weakref.WeakSet()    # DDP modules seen (constructed while the patch was on)
_ddp_hooked = weakref.WeakSet()
_patched = False


def _timed(hook):
    """A comm hook that runs @hook and records when each bucket's allreduce started and
    ended (the future's completion)."""
    def timed_hook(state, bucket):
        t0 = _now()
        try:
            nbytes = bucket.buffer().numel() * bucket.buffer().element_size()
        except Exception:
            nbytes = 0
        fut = hook(state, bucket)

        def done(f):
            try:
                with _comm_lock:
                    _comm.append((t0, _now(), nbytes))
            except Exception:
                pass
            return f.value()
        return fut.then(done)
    timed_hook.__name__ = getattr(hook, "__name__", "hook")
    return timed_hook


class _Waiter:
    """A thread of ours that waits for gloo's allreduce works and completes the hook's futures.
    A Python callback chained on gloo's own future (fut.then) would run, and be freed, on gloo's
    threads, which need the GIL for it; when the process group is destroyed (the model freed
    after destroy_process_group) the main thread joins those threads holding the GIL: a
    deadlock at exit, seen with torch 1.13. Here gloo's threads never touch a Python object."""

    def __init__(self):
        import queue
        self.q = queue.SimpleQueue()
        threading.Thread(target=self._run, name="loaderd-allreduce", daemon=True).start()

    def _run(self):
        while True:
            t0, work, buf, fut, nbytes = self.q.get()
            try:
                work.wait()
                with _comm_lock:
                    _comm.append((t0, _now(), nbytes))
                fut.set_result(buf)
            except Exception as e:   # the collective failed: DDP raises it in backward
                fut.set_exception(e)


_waiter = None


def _gloo_allreduce_hook(state, bucket):
    """DDP's default allreduce (average of the bucket over the group), completed by _Waiter,
    which notes when it ended."""
    global _waiter
    import torch
    import torch.distributed as dist
    t0 = _now()
    group = state if state is not None else dist.group.WORLD
    buf = bucket.buffer()
    buf.div_(dist.get_world_size(group))
    work = dist.all_reduce(buf, group=group, async_op=True)
    fut = torch.futures.Future()
    if _waiter is None:
        _waiter = _Waiter()
    _waiter.q.put((t0, work, buf, fut, buf.numel() * buf.element_size()))
    return fut


def _register(ddp):
    """Register the timed default allreduce on @ddp, unless the script registered its own (then
    that one is timed already: see install_ddp_patch)."""
    if ddp in _ddp_hooked:
        return
    try:
        import torch.distributed as dist
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        pg = getattr(ddp, "process_group", None)
        if dist.get_backend(pg) == "gloo":
            hook = _gloo_allreduce_hook
        else:   # NCCL: its futures complete from CUDA callbacks, no thread join at exit
            hook = _timed(default_hooks.allreduce_hook)
        _orig_register(ddp, None, hook)
        _ddp_hooked.add(ddp)
    except Exception as e:   # a hook registered by other means, or an older torch
        _ddp_hooked.add(ddp)
        print("loaderd.profile: cannot time this DistributedDataParallel's allreduce (%s): it "
              "counts as compute" % e, file=sys.stderr)


_orig_register = None


def install_ddp_patch():
    """With attribution on: DistributedDataParallel modules made from now on are noted (their
    allreduce gets the timed hook at the next batch request, so that a hook the script registers
    right after construction is seen first), and a hook the script registers is timed as it is.
    Nothing of the script changes. Idempotent; a no-op without torch.distributed."""
    global _patched, _orig_register
    if _patched:
        return
    try:
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP
        if not dist.is_available():
            return
    except Exception:
        return
    _patched = True
    orig_init = DDP.__init__
    _orig_register = DDP.register_comm_hook

    def __init__(self, *a, **kw):
        orig_init(self, *a, **kw)
        try:
            _note(self)
        except Exception:
            pass

    def register_comm_hook(self, state, hook):
        _orig_register(self, state, _timed(hook))
        _ddp_hooked.add(self)

    DDP.__init__ = __init__
    DDP.register_comm_hook = register_comm_hook
    # modules made before loaderd was imported
    try:
        import gc
        for o in gc.get_objects():
            if issubclass(type(o), DDP):   # type(): no __getattribute__ (reduce_op warns)
                _note(o)
    except Exception:
        pass


def _note(ddp):
    """A DDP module to time; the first one's size for the advice."""
    global _model
    _ddp.add(ddp)
    if _model == (None, None):
        try:
            params = sum(p.numel() for p in ddp.module.parameters() if p.requires_grad)
            _model = (params, getattr(ddp, "bucket_bytes_cap", 25 * 2**20) / 2**20)
        except Exception:
            pass


_model = (None, None)   # gradient floats, bucket cap (MiB) of the first DDP module


def _hook_pending():
    for m in list(_ddp):
        if m not in _ddp_hooked:
            _register(m)


# ---- one Loader's steps ----

def _guarded(fn):
    """A hook body run inside the script's own loop: any exception it raises disables that
    loader's profiling (one warning, Recorder.disable) instead of reaching the script."""
    def g(self, *a, **kw):
        if self.off:
            return None
        try:
            return fn(self, *a, **kw)
        except Exception as e:
            self.disable(e)
            return None
    g.__name__ = fn.__name__
    g.__doc__ = fn.__doc__
    return g


class Recorder:
    """The steps of one Loader: [step, start_ns, data_ns, copy_ns, compute_ns, comm_ns, opt_ns,
    samples, comm_busy_ns, buckets] each; see the top of the file."""

    off = None     # why profiling stopped (a hook failed: disable()), else None

    def __init__(self, loader):
        self.loader = weakref.ref(loader) if loader is not None else (lambda: None)
        self.steps = []
        self.dropped = 0
        self.pending_copy = []     # [index in steps, event before wait, event after wait]
        self.st0 = self.st1 = None
        self.t_first = None
        self.written = False
        self.where = None          # (rank, world, backend) seen while the run was on
        self.device = None
        self.meta = {}             # the Loader's facts for the record, kept past its collection
        self.t_last = None
        self.t_snap = 0
        self.conn_ref = None       # the Loader's connection, weakly: stats at its collection
        self.pid = os.getpid()     # a forked child (a DataLoader worker) writes nothing of ours
        _live.add(self)            # strongly: the record outlives a Loader never closed
        if loader is not None:
            weakref.finalize(loader, self._loader_gone)
        _install_signal_handlers()
        if "torch" in sys.modules:  # no DDP without torch; $LOADERD_PROFILE patches at import
            install_ddp_patch()

    def _loader_gone(self):
        """The Loader was collected (never closed, or closed: then this is a no-op). Freed by
        its reference count, the Loader's weak references are called before its attributes go:
        its connection is still there for loaderd's counters (not so when a cycle collector
        frees it: then the last snapshot)."""
        try:
            conn = self.conn_ref() if self.conn_ref is not None and not self.written else None
            if conn is not None and self.st0 is not None:
                st = _conn_stats(conn)
                if st is not None:
                    self.st1, self.t_last = st, _now()
            self.finish(None)
        except Exception as e:
            print("loaderd.profile: cannot write the record: %s" % e, file=sys.stderr)

    def disable(self, e):
        """A hook failed with @e: no more steps of this loader are timed (the script goes on
        exactly as without diagnose); said once. The steps timed before stay in the record,
        which says why it ends."""
        if self.off:
            return
        self.off = "%s: %s" % (type(e).__name__, e)
        self.pending_copy = []
        try:
            job = self.meta.get("job") or "a Loader"
        except Exception:
            job = "a loader"
        print("loaderd.profile: profiling of %s stopped after %d steps (%s); the script runs on "
              "unprofiled" % (job, len(self.steps), self.off), file=sys.stderr)

    # called by the Loader
    @_guarded
    def first_batch(self, loader):
        self.t_first = _now()
        self.st0 = _stats(loader)
        self.t_snap = self.t_first
        self.conn_ref = weakref.ref(loader._conn) if loader._conn is not None else None
        self.where = _dist_rank_world(loader)
        self.device = loader.device_type()   # while the ring is mapped (and maybe pinned)
        self.meta = {"job": loader.job_name, "dataset": loader.dataset,
                     "batch": loader.batch_size,
                     "crop": loader.crop[0] if loader.crop else None,
                     "device": self.device, "socket": loader.socket}

    @_guarded
    def begin(self):
        """A batch is requested."""
        if _ddp:
            _hook_pending()
        return _now()

    @_guarded
    def end(self, step, t_req, wait_ns, samples, copy_events, t_end):
        """The batch of @step, requested at @t_req, is done with (the next request, or the end
        of the loop) at @t_end."""
        period = t_end - t_req
        comm = busy = nb = 0
        if _comm:
            with _comm_lock:
                ev = [e for e in _comm if t_req <= e[0] <= t_end]
                _comm[:] = [e for e in _comm if e[0] > t_end]
            if ev:
                last_launch = max(e[0] for e in ev)
                comm = max(0, min(t_end, max(e[1] for e in ev)) - last_launch)
                busy = sum(e[1] - e[0] for e in ev)
                nb = len(ev)
        rec = [step, t_req, wait_ns, 0, max(0, period - wait_ns - comm), comm, 0, samples, busy,
               nb]
        if len(self.steps) >= STEPS_MAX:
            self.dropped += 1
            return
        self.steps.append(rec)
        if t_end - self.t_snap >= STATS_EVERY_NS and self.st0 is not None:
            self._snapshot()
        if copy_events is not None:
            self.pending_copy.append([len(self.steps) - 1] + list(copy_events))
        if self.pending_copy:
            self._read_copies(False)

    def _read_copies(self, wait):
        """Exposed copy of earlier steps, from their CUDA events once complete."""
        keep = []
        for i, e0, e1 in self.pending_copy:
            if not wait and not e1.query():
                keep.append([i, e0, e1])
                continue
            try:
                e1.synchronize()
                ns = int(e0.elapsed_time(e1) * 1e6)
            except Exception:
                ns = 0
            rec = self.steps[i]
            ns = min(ns, rec[4])
            rec[3] += ns
            rec[4] -= ns
        self.pending_copy = keep

    def _snapshot(self):
        """loaderd's counters now, the end of the run should the Loader vanish unclosed."""
        lo = self.loader()
        self.t_snap = _now()
        if lo is not None and lo._conn is not None:
            st = _stats(lo)
            if st is not None:
                self.st1, self.t_last = st, self.t_snap

    def finish(self, loader, final=True):
        """The Loader detaches (or is gone: @loader None): loaderd's counters, then the record
        (once). Never raises into the script: a failure is said and the record is lost."""
        try:
            self._finish(loader)
        except Exception as e:
            print("loaderd.profile: cannot write the record: %s: %s" % (type(e).__name__, e),
                  file=sys.stderr)
        if final:
            _live.discard(self)

    def _finish(self, loader):
        if self.pending_copy:
            self._read_copies(True)
        if loader is not None and self.st0 is not None and not self.off:
            st = _stats(loader)
            if st is not None:
                self.st1, self.t_last = st, _now()
        if not self.written and os.environ.get(ENV_DIR) and self.steps and \
                self.pid == os.getpid():
            self.written = True
            try:
                write_record(os.environ[ENV_DIR], self.record())
            except OSError as e:
                print("loaderd.profile: cannot write the record: %s" % e, file=sys.stderr)

    def record(self):
        """This rank's record (JSON-able)."""
        lo = self.loader()
        rank, world, backend = _dist_rank_world(lo)
        if backend is None and self.where is not None:   # torch.distributed ended already
            rank, world, backend = self.where
        params, cap = _model
        d = {"version": RECORD_VERSION, "rank": rank, "world": world, "pid": os.getpid(),
             "host": socket.gethostname(), "backend": backend,
             "steps": self.steps, "steps_dropped": self.dropped, "profile_error": self.off,
             "fields": ["step", "start_ns", "data_ns", "copy_ns", "compute_ns", "comm_ns",
                        "opt_ns", "samples", "comm_busy_ns", "buckets"],
             "params": params, "bucket_mb": cap, "ddp": bool(_ddp)}
        d.update(self.meta)
        if lo is not None and not self.meta:
            d.update({"job": lo.job_name, "dataset": lo.dataset, "batch": lo.batch_size,
                      "crop": lo.crop[0] if lo.crop else None,
                      "device": self.device or lo.device_type(),
                      "socket": lo.socket})
        b, t_last = self.st1, self.t_last
        if self.st0 is not None and lo is not None and lo._conn is not None and not self.written:
            st = _stats(lo)                   # a report of the run so far
            if st is not None:
                b, t_last = st, _now()
        if self.st0 is not None and b is not None:
            a = self.st0
            d["loaderd"] = {"workers": b.get("workers", 0),
                            "fill_ns": b["fill_ns"] - a["fill_ns"],
                            "io_ns": b.get("io_ns", 0) - a.get("io_ns", 0),
                            "decode_ns": b.get("decode_ns", 0) - a.get("decode_ns", 0),
                            "samples": b["samples"] - a["samples"],
                            "wall_ns": t_last - self.t_first,
                            "ranks_attached": b.get("ranks_attached", 0)}
        return d


def _stats(loader):
    try:
        return loader.stats()
    except Exception:
        return None


def _conn_stats(conn):
    """Loader.stats() from the connection alone (its Loader being freed)."""
    import ctypes
    from . import _lib as L
    if not conn.ptr:
        return None
    st = L.ctl_stats()
    if conn.lib.ldc_stats(conn.ptr, ctypes.byref(st)) < 0:
        return None
    out = {}
    for f, _ in L.ctl_stats._fields_:
        if f == "phase_ns":
            out.update(zip(L.PHASES, st.phase_ns))
        elif not f.startswith("reserved"):
            out[f] = getattr(st, f)
    return out


def _dist_rank_world(loader):
    try:
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size(), dist.get_backend()
    except Exception:
        pass
    if loader is not None and hasattr(loader, "rank"):
        return loader.rank, loader.world_size, None
    try:   # torchrun's environment
        return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)), None
    except ValueError:
        return 0, 1, None


def write_record(d, rec):
    os.makedirs(d, exist_ok=True)
    name = "rank-%d-%d-%s.json" % (rec["rank"], rec["pid"], rec.get("job") or "job")
    path = os.path.join(d, name)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(rec, f, separators=(",", ":"))
    os.replace(tmp, path)
    return path


_live = set()     # recorders whose record is not written yet (strong: see the top)


@atexit.register
def _at_exit():
    """Loaders still open at exit: their records (loaderd's counters are read when the
    connection is still there)."""
    for r in list(_live):
        lo = r.loader()
        try:
            r.finish(lo if getattr(lo, "_conn", None) is not None else None)
        except Exception as e:
            print("loaderd.profile: cannot write the record: %s" % e, file=sys.stderr)


_signals_done = False


def _install_signal_handlers():
    """SIGTERM (torchrun's, a scheduler's, kill) would end the process without atexit: where
    the script left the default action, write the records first, then die of the signal as
    before (the default action again, the signal raised anew). SIGINT is KeyboardInterrupt,
    which reaches atexit by itself. Main thread only (Python's rule for signal.signal)."""
    global _signals_done
    import signal
    if _signals_done or threading.current_thread() is not threading.main_thread():
        return
    _signals_done = True
    for sig in (signal.SIGTERM, signal.SIGHUP):
        try:
            if signal.getsignal(sig) == signal.SIG_DFL:
                signal.signal(sig, _on_signal)
        except (ValueError, OSError):
            pass


def _on_signal(signum, frame):
    import signal
    _at_exit()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def gather(loader):
    """Every rank's record, through torch.distributed when it is initialised (a collective),
    else this rank's alone."""
    rec = loader._prof.record()
    try:
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            out = [None] * dist.get_world_size()
            dist.all_gather_object(out, rec)
            return out
    except ImportError:
        pass
    return [rec]


# ---- torch.utils.data.DataLoader, unchanged scripts ----
#
# loaderd.diagnose puts a sitecustomize of its own (SITECUSTOMIZE below) first on the child's
# PYTHONPATH: it waits for torch.utils.data.dataloader to be imported and wraps
# DataLoader.__iter__; the first iteration imports this module and calls patch_dataloader(),
# which wraps _BaseDataLoaderIter.__next__. A step of a loop over a DataLoader is, as for a
# Loader, the time between two batch requests of one iterator: data is the time __next__ was
# blocked (fetching in the main process with num_workers=0, waiting for the workers' queue
# otherwise; pin_memory's thread included); comm the exposed allreduce of the DDP hook above;
# compute the rest. Each DataLoader has its own record (job "dataloader-N"); a step during
# which autograd ran backward is a training step, and a DataLoader whose steps mostly are is a
# training loop: evaluation loops get records of their own, reported apart from the verdict.

_backwards = 0           # calls of torch.autograd.backward so far (Tensor.backward goes there)
_dl_count = 0
_dl_patched = False
_dp_seen = weakref.WeakSet()     # nn.DataParallel modules noted (not noted twice)
_dp_facts = []                   # their facts, read when each was seen: a model made before
                                 # the DataLoader inside main() is freed before the record


def _batch_len(b, default):
    """The samples in batch @b: the first dimension of its first tensor (nested lists, tuples
    and dicts looked into), else @default. Never raises: a nested tensor has no .shape, a
    string, None or an object of the script's may be anything."""
    try:
        return _batch_len1(b, default)
    except Exception:
        return default or 0


def _batch_len1(b, default):
    for _ in range(4):
        if isinstance(b, (list, tuple)) and b:
            b = b[0]
        elif isinstance(b, dict) and b:
            b = next(iter(b.values()))
        else:
            break
    if getattr(b, "is_nested", False) is True:   # torch.nested: .shape raises, size(0) works
        return int(b.size(0))
    shape = getattr(b, "shape", None)
    if shape is not None and len(shape):
        return int(shape[0])
    return default or 0


IMAGE_EXT = (".jpg", ".jpeg", ".png", ".webp", ".bmp", ".ppm", ".pgm", ".pnm", ".tif", ".tiff")
FILES_KEPT = 1000       # files of the dataset's list kept in the record (spread over it)
# where datasets keep their (image file, label) list, and their parser/reader objects
_LIST_ATTRS = ("samples", "imgs", "filenames", "image_files", "img_files", "files", "file_list",
               "img_list", "image_paths", "img_paths", "paths", "items", "entries", "data")
_LABEL_ATTRS = ("targets", "labels", "label_list", "target_list")
_HOLDER_ATTRS = ("parser", "reader", "_parser", "_reader", "source", "index")
_ROOT_ATTRS = ("root", "img_dir", "image_dir", "images_dir", "data_dir", "img_root",
               "image_root", "data_root", "directory", "prefix", "base_dir")
_PATH_KEYS = ("path", "file", "filename", "image", "img", "image_path", "img_path", "file_name",
              "filepath")
_LABEL_KEYS = ("label", "target", "class", "class_id", "label_id", "y", "cls")


def _attr(obj, name):
    """@obj's attribute @name without running any code of the script's: the instance's own,
    else a plain class attribute; a property or other descriptor is never called (it could load
    a file or raise). None when absent."""
    import inspect
    try:
        d = vars(obj)
        if name in d:
            return d[name]
    except TypeError:
        pass
    try:
        v = inspect.getattr_static(obj, name)
    except AttributeError:
        return None
    if hasattr(type(v), "__get__") and not callable(v) or isinstance(v, property):
        return None
    return v


def _is_image(x):
    return isinstance(x, (str, os.PathLike)) and str(x).lower().endswith(IMAGE_EXT)


def _label_of(x):
    """An int label, or a str class name, or None."""
    if isinstance(x, bool):
        return None
    if isinstance(x, int):
        return x
    if isinstance(x, str):
        try:
            return int(x)
        except ValueError:
            return x
    try:   # numpy and torch scalars
        if hasattr(x, "item") and float(x.item()) == int(x.item()):
            return int(x.item())
    except Exception:
        pass
    return None


def _pairs_of(v, owner):
    """(file, label) accessor of a sequence @v of the dataset @owner: a function i -> (file,
    label) and the length, or None. Pairs (file, label, ...), dicts with a path and a label key,
    or file names with a parallel label list on @owner (labels None without one)."""
    try:
        n = len(v)
        if n == 0 or isinstance(v, (str, bytes, dict)):
            return None
        first = v[0]
    except Exception:
        return None
    if isinstance(first, (tuple, list)) and len(first) >= 2 and _is_image(first[0]) and \
            _label_of(first[1]) is not None:
        return (lambda i: (str(v[i][0]), _label_of(v[i][1]))), n
    if isinstance(first, dict):
        pk = next((k for k in _PATH_KEYS if _is_image(first.get(k))), None)
        lk = next((k for k in _LABEL_KEYS if _label_of(first.get(k)) is not None), None)
        if pk:
            return (lambda i: (str(v[i][pk]), _label_of(v[i][lk]) if lk else None)), n
    if _is_image(first):
        for a in _LABEL_ATTRS:
            lab = getattr(owner, a, None)
            try:
                if lab is not None and len(lab) == n and _label_of(lab[0]) is not None:
                    return (lambda i: (str(v[i]), _label_of(lab[i]))), n
            except Exception:
                continue
        return (lambda i: (str(v[i]), None)), n
    return None


def _csv_pairs(path):
    """(file, label) rows of a CSV/TSV file: the column of image file names, the label column
    (by header name, else the first other column of labels). Returns (rows, how) or None."""
    import csv
    with open(path, newline="") as f:
        head = f.read(4096)
        f.seek(0)
        delim = "\t" if head.count("\t") > head.count(",") else ","
        rows = list(csv.reader(f, delimiter=delim))
    if not rows:
        return None
    header = None
    if not any(_is_image(c) for c in rows[0]):
        header, rows = [c.strip().lower() for c in rows[0]], rows[1:]
    if not rows:
        return None
    pc = next((i for i, c in enumerate(rows[0]) if _is_image(c)), None)
    if pc is None:
        return None
    lc = None
    if header:
        lc = next((header.index(k) for k in _LABEL_KEYS if k in header and
                   header.index(k) != pc), None)
    if lc is None:
        lc = next((i for i, c in enumerate(rows[0]) if i != pc and c.strip()), None)
    out = [(r[pc], _label_of(r[lc].strip()) if lc is not None and lc < len(r) else None)
           for r in rows if len(r) > pc]
    return out


def _find_list(obj, depth=0, name=None):
    """Where @obj (a dataset, or a parser/reader object it holds) keeps its (image file, label)
    list: (get, n, where) or None; @where names it (e.g. "MyDataset.parser.samples")."""
    name = name or type(obj).__name__
    try:
        attrs = vars(obj)
    except TypeError:
        attrs = {}
    # the instance's own attributes only: a property could do anything (load a file, open a
    # connection) and is never called
    order = [a for a in _LIST_ATTRS if a in attrs] + [a for a in attrs if a not in _LIST_ATTRS]
    for a in order:
        v = attrs[a]
        if isinstance(v, (list, tuple)) or (a in _LIST_ATTRS and hasattr(v, "__getitem__")
                                             and not isinstance(v, (str, bytes, dict))):
            got = _pairs_of(v, obj)
            if got:
                return got[0], got[1], "%s.%s" % (name, a)
    # a CSV (or TSV) file the dataset names
    for a, v in attrs.items():
        if isinstance(v, (str, os.PathLike)) and str(v).lower().endswith((".csv", ".tsv")) \
                and os.path.isfile(v):
            rows = _csv_pairs(v)
            if rows:
                return (lambda i: rows[i]), len(rows), "%s.%s (CSV %s)" % (name, a, v)
    if depth < 2:   # a parser, reader or index object holding the list
        hold = [a for a in _HOLDER_ATTRS if a in attrs] + \
            [a for a in attrs if a not in _HOLDER_ATTRS]
        for a in hold:
            v = attrs.get(a)
            if v is None or isinstance(v, (str, bytes, int, float, list, tuple, dict, set)) or \
                    callable(v) and not hasattr(v, "__dict__") or not hasattr(v, "__dict__"):
                continue
            if type(v).__module__.split(".")[0] in ("torch", "torchvision", "numpy", "PIL"):
                continue
            got = _find_list(v, depth + 1, "%s.%s" % (name, a))
            if got:
                return got
    return None


def _resolve(path, owners):
    """@path as a file that exists: as it is, or under a root directory named by one of the
    @owners (dataset, parser); None when neither."""
    if os.path.isabs(path) and os.path.exists(path):
        return path
    for o in owners:
        for a in _ROOT_ATTRS:
            r = getattr(o, a, None)
            if isinstance(r, (str, os.PathLike)) and os.path.isdir(r):
                c = os.path.join(r, path)
                if os.path.exists(c):
                    return os.path.abspath(c)
    return os.path.abspath(path) if os.path.exists(path) else None


def _file_list_facts(inner, unread):
    """The dataset's (image file, label) list: an ImageFolder's samples, or a list found by
    _find_list; a sample of its files (absolute) for the swap's measurement. None (the reason
    in @unread) when there is none or its files are not found."""
    found = _find_list(inner)
    if found is None:
        unread.append("file list: no (image file, label) list found in the %s (looked for "
                      "samples, imgs, filenames, a list of pairs or dicts, labels/targets, a "
                      "parser or reader object holding one, a CSV file it names)" %
                      type(inner).__name__)
        return None
    get, n, where = found
    owners = [inner] + [_attr(inner, a) for a in _HOLDER_ATTRS if _attr(inner, a) is not None]
    step = max(1, -(-n // FILES_KEPT))
    files, missing, labels = [], [], set()
    for i in range(0, n, step):
        p, lab = get(i)
        r = _resolve(p, owners)
        if r is None:
            missing.append(p)
            if len(missing) >= 3 and not files:
                break
            continue
        files.append(r)
        labels.add(lab)
    if not files:
        unread.append("file list: %s lists %d files, but they are not found (e.g. %r, relative "
                      "to %s)" % (where, n, missing[0] if missing else "?", os.getcwd()))
        return None
    folder = _attr(inner, "samples") is not None and _attr(inner, "root") is not None and \
        where == "%s.samples" % type(inner).__name__
    root = str(inner.root) if folder else os.path.commonpath([os.path.dirname(f)
                                                              for f in files])
    _list_access[id(inner)] = (get, n, owners)
    d = {"class": type(inner).__name__, "root": root, "from": where, "total": n,
         "kind": "folder" if folder else "list", "files": files,
         "classes": len(_attr(inner, "classes") or []) if folder else
         len([x for x in labels if x is not None]),
         "labels": "none" if labels == {None} else "known"}
    if missing:
        d["missing"] = len(missing)
    return d


_list_access = {}     # id(dataset) -> its list's accessor, taken by DLRecorder at once
LIST_MAX = 20000000   # entries written to the record's file list (files-*.tsv)


def _dataset_facts(ds):
    """What the advice needs of a DataLoader's dataset: its class, its (image file, label)
    list (an ImageFolder's, or one found in a dataset class of the script's: _find_list), its
    transforms (names and their sizes, nested containers walked). A part that cannot be read
    is named in "unread" and never drops the others."""
    f = {"class": type(ds).__name__, "module": type(ds).__module__}
    unread = []
    try:
        f["len"] = len(ds)
    except Exception as e:
        unread.append("len: %s: %s" % (type(e).__name__, e))
    inner = ds
    for _ in range(8):     # Subset, wrappers
        if _attr(inner, "samples") is not None or _attr(inner, "dataset") is None:
            break
        inner = _attr(inner, "dataset")
    if inner is not ds:
        f["inner"] = type(inner).__name__
    try:
        folder = _file_list_facts(inner, unread)
        if folder:
            f["folder"] = folder
    except Exception as e:
        unread.append("file list: %s: %s" % (type(e).__name__, e))
    try:
        tf = _attr(inner, "transform")
        if tf is None:
            tf = _attr(inner, "transforms")
            if tf is not None and type(tf).__name__ == "StandardTransform":
                tf = getattr(tf, "transform", None)
        if tf is not None:
            f["transforms"] = _transform_facts(tf, unread)
    except Exception as e:
        unread.append("transforms: %s: %s" % (type(e).__name__, e))
    try:
        tt = _attr(inner, "target_transform")
        if tt is not None:
            f["target_transform"] = getattr(tt, "__qualname__", type(tt).__name__)
    except Exception:
        pass
    if unread:
        f["unread"] = unread
    return f


_TF_KEYS = ("size", "scale", "ratio", "p", "mean", "std", "interpolation", "antialias",
            "brightness", "contrast", "saturation", "hue", "num_ops", "magnitude", "policy",
            "degrees", "num_magnitude_bins", "value")


def _transform_facts(tf, unread=None, depth=0, within=None):
    """The leaf transforms of @tf in order, each {"name", its size-like fields, "within": the
    wrapper (RandomApply, RandomChoice, ...) when not a plain sequence}; containers walked:
    Compose, a preset object whose .transforms is a Compose or a list, nn.Sequential,
    RandomApply/RandomChoice/RandomOrder. A part that cannot be read is a leaf named
    {"name", "unreadable"}, and the walk goes on."""
    unread = [] if unread is None else unread
    out = []
    name = type(tf).__name__
    try:
        inner = None
        if depth < 8:
            inner = getattr(tf, "transforms", None)
            if inner is None and type(tf).__module__.startswith("torch.nn") and \
                    hasattr(tf, "children"):
                inner = list(tf.children())
            elif inner is None and name == "Sequential" and hasattr(tf, "children"):
                inner = list(tf.children())
        if inner is not None and not isinstance(inner, (str, bytes)):
            wrap = within
            if name not in ("Compose", "Sequential") and isinstance(inner, (list, tuple)) and \
                    name.startswith("Random"):
                wrap = name
            if isinstance(inner, (list, tuple)):
                for t in inner:
                    out += _transform_facts(t, unread, depth + 1, wrap)
            else:    # a preset holding a Compose (or another container)
                out += _transform_facts(inner, unread, depth + 1, wrap)
            if out or isinstance(inner, (list, tuple)):
                return out
        d = {"name": name}
        if within:
            d["within"] = within
        for k in _TF_KEYS:
            try:
                v = getattr(tf, k, None)
            except Exception:
                continue
            if v is None or callable(v) and not hasattr(v, "value"):
                continue
            try:
                if hasattr(v, "value") and not isinstance(v, (int, float)):   # an Enum
                    d[k] = str(getattr(v, "value"))
                elif isinstance(v, (int, float, bool)):
                    d[k] = float(v) if not isinstance(v, bool) else v
                elif hasattr(v, "__iter__") and not isinstance(v, str):
                    d[k] = [float(x) for x in v]
                else:
                    d[k] = repr(v)[:80]
            except (TypeError, ValueError):
                d[k] = repr(v)[:80]
        out.append(d)
    except Exception as e:
        unread.append("transform %s: %s: %s" % (name, type(e).__name__, e))
        out.append({"name": name, "unreadable": "%s: %s" % (type(e).__name__, e)})
    return out


def _dataloader_facts(dl):
    """A DataLoader's knobs, its collate_fn when the script's own, and its dataset's facts."""
    facts = {"num_workers": dl.num_workers, "pin_memory": bool(dl.pin_memory),
             "persistent_workers": bool(getattr(dl, "persistent_workers", False)),
             "prefetch_factor": getattr(dl, "prefetch_factor", None),
             "batch_size": dl.batch_size, "drop_last": bool(dl.drop_last),
             "sampler": type(getattr(dl, "sampler", None)).__name__,
             "where": dl.__dict__.get("_loaderd_where")}
    try:   # a collate_fn of the script's (mixup, cutmix, ...): the swap would drop it
        fn = dl.collate_fn
        mod = getattr(fn, "__module__", None) or type(fn).__module__
        if not str(mod).startswith("torch.utils.data"):
            facts["collate_fn"] = "%s.%s" % (mod, getattr(fn, "__qualname__",
                                                           type(fn).__name__))
    except Exception:
        pass
    try:
        facts["dataset"] = _dataset_facts(dl.dataset)
    except Exception as e:
        facts["dataset"] = {"class": type(dl.dataset).__name__,
                            "unread": ["dataset: %s: %s" % (type(e).__name__, e)]}
    return facts


class DLRecorder(Recorder):
    """The steps of one torch DataLoader (see above). Its facts are read when it is first
    iterated; its record is written when it is collected, or at exit."""

    def __init__(self, dl):
        global _dl_count
        _dl_count += 1
        self.index = _dl_count
        super().__init__(None)
        self.loader = weakref.ref(dl)
        weakref.finalize(dl, self._loader_gone)
        self.step_no = 0
        self.train_steps = 0
        self.epoch_starts = []     # step_no of each loop's first step (worker start-up cost)
        self.rest_cpu_ns = 0       # this process's CPU outside the batch requests (the script's
        self.rest_cpu_steps = 0    # own work per step: the swap's CPU budget), over these steps
        self.t_first = _now()
        self._list = None          # (get, n, owners) of a list that is not an ImageFolder's
        facts = _dataloader_facts(dl)
        acc = [_list_access.pop(k) for k in list(_list_access)]
        if facts["dataset"].get("folder", {}).get("kind") == "list" and acc:
            self._list = acc[-1]
        self.meta = {"job": "dataloader-%d" % self.index, "dataset": facts["dataset"].get(
                     "folder", {}).get("root") or facts["dataset"]["class"],
                     "batch": dl.batch_size, "crop": None, "device": None,
                     "source": "torch.utils.data.DataLoader", "dataloader": facts}

    @_guarded
    def step_begin(self):
        if self.step_no == 0:     # torch.distributed is up by the first batch
            self.where = _dist_rank_world(None)
        if _ddp:
            _hook_pending()
        return _backwards

    def record(self):
        d = super().record()
        n = len(self.steps)
        d["loop"] = "train" if n and self.train_steps * 2 >= n else "eval"
        d["train_steps"] = self.train_steps
        d["epoch_starts"] = self.epoch_starts
        d["cores"] = _cores()
        if self.rest_cpu_steps:
            d["rest_cpu_ms"] = self.rest_cpu_ns / self.rest_cpu_steps / 1e6
        try:
            import torch
            d["device"] = "cuda" if torch.cuda.is_initialized() else "cpu"
        except Exception:
            d["device"] = "cpu"
        d["dataparallel"] = _dataparallel_facts()
        if self._list is not None and os.environ.get(ENV_DIR):
            try:
                name = self._write_list(os.environ[ENV_DIR])
                d["dataloader"]["dataset"]["folder"]["tsv"] = name
            except Exception as e:   # the advice then says the list was not written
                d["dataloader"]["dataset"].setdefault("unread", []).append(
                    "file list: not written: %s: %s" % (type(e).__name__, e))
            self._list = None
        return d

    def _write_list(self, d):
        """The dataset's whole (image file, label) list as FILE<TAB>LABEL lines into @d (for
        python -m loaderd.pack_list); returns the file's name."""
        get, n, owners = self._list
        name = "files-%d-%d.tsv" % (os.getpid(), self.index)
        os.makedirs(d, exist_ok=True)
        tmp = os.path.join(d, name + ".tmp")
        p0 = get(0)[0]
        r0 = _resolve(p0, owners) or os.path.abspath(p0)
        base = r0[:len(r0) - len(p0)] if r0.endswith(p0) else ""   # the root found, once
        with open(tmp, "w") as f:
            for i in range(min(n, LIST_MAX)):
                p, lab = get(i)
                p = p if os.path.isabs(p) else os.path.join(base, p) if base else \
                    os.path.abspath(p)
                f.write("%s\t%s\n" % (p, "" if lab is None else lab))
        os.replace(tmp, os.path.join(d, name))
        return name


_cpu = time.process_time_ns     # this process's CPU, every thread


def _cores():
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _dp_note(m):
    """nn.DataParallel module @m seen (made, or found alive at the patch): its static facts,
    read now (on a host without GPUs DataParallel is a plain wrapper: its scatter, replicate,
    apply and gather happen only on CUDA)."""
    try:
        if m in _dp_seen or len(_dp_facts) >= 16:
            return
        _dp_seen.add(m)
        params = sum(p.numel() for p in m.module.parameters())
        _dp_facts.append({"module": type(m.module).__name__, "params": params,
                          "device_ids": list(getattr(m, "device_ids", None) or []),
                          "output_device": getattr(m, "output_device", None),
                          "dim": getattr(m, "dim", 0),
                          "active": bool(getattr(m, "device_ids", None))})
    except Exception:
        pass


def _dataparallel_facts():
    """The nn.DataParallel modules seen during the run (alive or not)."""
    return list(_dp_facts)


def patch_dataloader(dl_module=None):
    """Wrap DataLoader.__iter__ and _BaseDataLoaderIter.__next__ (see above); autograd's
    backward counted; DDP's allreduce timed; DataParallel noted. Idempotent."""
    global _dl_patched
    if _dl_patched:
        return
    _dl_patched = True
    import torch
    import torch.autograd
    if dl_module is None:
        import torch.utils.data.dataloader as dl_module
    DL, It = dl_module.DataLoader, dl_module._BaseDataLoaderIter
    recs = weakref.WeakKeyDictionary()
    orig_iter = DL.__dict__.get("__iter__")
    orig_next = It.__next__
    orig_backward = torch.autograd.backward

    def backward(*a, **kw):
        global _backwards
        _backwards += 1
        return orig_backward(*a, **kw)
    torch.autograd.backward = backward

    def __iter__(self):
        it = orig_iter(self)
        try:
            rec = recs.get(self)
            if rec is None:
                try:
                    rec = recs[self] = DLRecorder(self)
                except Exception as e:   # said once; this DataLoader is never profiled
                    recs[self] = False
                    print("loaderd.profile: cannot profile this DataLoader (%s: %s); the script "
                          "runs on unprofiled" % (type(e).__name__, e), file=sys.stderr)
            if rec and not rec.off:
                it._loaderd_rec = rec
                if len(rec.epoch_starts) < 10000:
                    rec.epoch_starts.append(rec.step_no)
                it._loaderd_pending = None      # a loop left by break: its last step has no end
        except Exception as e:
            if rec:
                rec.disable(e)
        return it

    def __next__(self):
        # Every hook body is guarded: an exception of ours (an odd batch, a broken attribute)
        # disables this DataLoader's profiling (one warning) and never reaches the script; what
        # the script gets is orig_next's batch, or orig_next's own exception, as without us.
        rec = self.__dict__.get("_loaderd_rec")
        if rec is None or rec.off:
            return orig_next(self)
        try:
            t = _now()
            p = self._loaderd_pending
            if p is not None:
                self._loaderd_pending = None
                rec.train_steps += _backwards != p[3]
                rec.end(p[0], p[1], p[2], p[4], None, t)
                if p[0] > 0:    # the first step's rest has the set-up in it
                    rec.rest_cpu_ns += _cpu() - p[5]
                    rec.rest_cpu_steps += 1
            bw = rec.step_begin()
        except Exception as e:
            rec.disable(e)
            return orig_next(self)
        out = orig_next(self)     # StopIteration: the loop's last step ended above
        try:
            t1 = _now()
            self._loaderd_pending = (rec.step_no, t, t1 - t, bw,
                                     _batch_len(out, rec.meta["batch"]), _cpu())
            rec.step_no += 1
        except Exception as e:
            rec.disable(e)
        return out

    if orig_iter is not None:
        DL.__iter__ = __iter__
    It.__next__ = __next__
    # DataParallel: from now on, and those made already
    try:
        from torch.nn import DataParallel
        orig_dp = DataParallel.__init__

        def dp_init(self, *a, **kw):
            orig_dp(self, *a, **kw)
            _dp_note(self)
        DataParallel.__init__ = dp_init
        import gc
        for o in gc.get_objects():
            if issubclass(type(o), DataParallel):
                _dp_note(o)
    except Exception:
        pass
    try:
        import torch.distributed as dist
        if dist.is_available():
            install_ddp_patch()
    except Exception:
        pass


# The child's sitecustomize (written by loaderd.diagnose into its own directory, first on
# PYTHONPATH): Debian's own sitecustomize (or any further on the path) still runs, then a finder
# that waits for torch.utils.data.dataloader; nothing is imported before the script imports
# torch. {pkg}: the directory holding the loaderd package, appended to sys.path when needed.
SITECUSTOMIZE = r'''"""loaderd.diagnose's hook (written by it; see loaderd/profile.py)."""
import importlib, importlib.util, os, sys
_here = os.path.dirname(os.path.abspath(__file__))


def _chain():
    saved = sys.path[:]
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]
    me = sys.modules.pop("sitecustomize", None)
    try:
        importlib.import_module("sitecustomize")
    except ImportError:
        pass
    except Exception as e:
        print("sitecustomize: %s" % e, file=sys.stderr)
    finally:
        sys.path[:] = saved
        sys.modules["sitecustomize"] = me


_chain()


class _LoaderdDataLoaderFinder:
    NAME = "torch.utils.data.dataloader"

    def find_spec(self, name, path=None, target=None):
        if name != self.NAME:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        orig = spec.loader.exec_module

        def exec_module(module):
            orig(module)
            _wrap(module)
        spec.loader.exec_module = exec_module
        return spec


def _wrap(module):
    DL = module.DataLoader
    orig_iter = DL.__iter__
    orig_init = DL.__init__

    def __init__(self, *a, **kw):
        # where the script makes it: the line the advice rewrites
        try:
            f = sys._getframe(1)
            self.__dict__["_loaderd_where"] = (f.f_code.co_filename, f.f_lineno)
        except Exception:
            pass
        orig_init(self, *a, **kw)
    DL.__init__ = __init__

    def __iter__(self):
        # the first iteration: torch is whole now; loaderd's hook replaces this one
        DL.__iter__ = orig_iter
        try:
            try:
                import loaderd.profile as P
            except ImportError:
                sys.path.append({pkg!r})
                import loaderd.profile as P
            P.patch_dataloader(module)
        except Exception as e:
            print("loaderd.diagnose: cannot hook DataLoader: %s" % e, file=sys.stderr)
        return DL.__iter__(self)
    DL.__iter__ = __iter__


if os.environ.get("LOADERD_PROFILE", "") not in ("", "0"):
    sys.meta_path.insert(0, _LoaderdDataLoaderFinder())
    # a rank a launcher started (torchrun sets RANK): noted, so that loaderd.diagnose can tell
    # a launcher that died before any rank from ranks that left no record
    if os.environ.get("RANK") is not None and os.environ.get("LOADERD_PROFILE_DIR"):
        try:
            with open(os.path.join(os.environ["LOADERD_PROFILE_DIR"],
                                   "started-%d.rank" % os.getpid()), "w") as _f:
                _f.write(os.environ["RANK"])
        except OSError:
            pass
'''


def write_sitecustomize(d):
    """The child's hook into directory @d (created); returns @d."""
    os.makedirs(d, exist_ok=True)
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(d, "sitecustomize.py"), "w") as f:
        f.write(SITECUSTOMIZE.replace("{pkg!r}", repr(pkg)))
    return d
