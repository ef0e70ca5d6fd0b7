"""loaderd.ddp - the even split's gradient when ranks take balanced shares (Loader(balance=True)).

With balanced shares a fast rank's batch is larger than a slow rank's. DistributedDataParallel
averages the ranks' gradients with equal weight, which would weigh a sample of a small batch
more than one of a large batch. The update of an even split is the mean over the GLOBAL batch:

    g = sum over ranks r of n_r * g_r / sum of n_r       (g_r: rank r's mean gradient)

Two ways to get it:

1. A communication hook (register): each bucket is allreduced as (n_r * bucket, n_r) in ONE
   allreduce (the count rides at the end of the bucket) and divided by the summed count. The
   loss stays a mean over the rank's own batch, as always. n_r is the batch's sum of sample
   weights (tail="mask" padding weighs 0). The hook also reports the rank's compute time to
   loaderd (the time from the batch being handed out to backward reaching the last bucket), so
   that the shares follow the ranks' speeds.

       loader = loaderd.Loader(sock, "train.dpk", 64, balance=True)
       model = DDP(net); loaderd.ddp.register(model, loader)
       loss = F.cross_entropy(model(x), y)          # a mean over this rank's batch, as before

2. Without a hook: scale the loss by loss_scale(loader) (n_r x world / global count); DDP's
   plain average then gives the same g. Exact when no sample is padding (tail "pad" or "drop");
   with tail "mask" use the hook. Report the compute time yourself with
   loader.report_compute(seconds): a time that leaves out DDP's wait for the other ranks, which
   backward() includes (e.g. the forward pass's time x 3).

The speed the hook reports is host time from the batch's hand-out to backward reaching the
last bucket. On a GPU that is when the kernels were queued, not run: there, pass a time measured
with CUDA events to report_compute and register(report=False).

What still differs from an even split: statistics computed per rank over the rank's own batch.
Batch normalisation normalises each rank's batch with its own mean and variance (unless it is
SyncBatchNorm), and a batch of 12 has other statistics than one of 4; so do its running
estimates. The gradient identity above holds for models without such layers (or with
SyncBatchNorm); with BatchNorm the update is close, not equal.

Teardown with gloo: a Python communication hook (this one, or any other) could deadlock a
process at exit with the torch tested here (1.13): the DDP Reducer's destructor, holding the
GIL, joins gloo's work thread while that thread waits for the GIL to let go of the hook's last
future. tests/balance_ddp.py passes a barrier and leaves with os._exit(0) once its results are
saved.
"""
from __future__ import annotations


__all__ = ["register", "weighted_hook", "loss_scale"]


class _State:
    def __init__(self, loader, group, report):
        self.loader = loader
        self.group = group
        self.report = report


def _weight(loader) -> float:
    b = loader.last_batch
    if b is None:
        return 0.0
    return float(b.weights.sum())


def weighted_hook(state: _State, bucket):
    """The DDP communication hook: sum of (weight x gradient) and of the weights, one allreduce
    per bucket, then the quotient. A count of 0 (every sample padding, on every rank) gives a
    zero gradient."""
    import torch
    import torch.distributed as dist

    buf = bucket.buffer()
    n = _weight(state.loader)
    packed = torch.cat([buf * n, buf.new_tensor([n])])
    fut = dist.all_reduce(packed, group=state.group, async_op=True).get_future()
    if state.report and bucket.is_last():
        state.loader.report_compute()   # backward reached the last bucket: compute is done

    def done(f):
        out = f.value()[0]
        count = out[-1]
        if float(count) > 0:
            buf.copy_(out[:-1] / count)
        else:
            buf.zero_()
        return buf

    return fut.then(done)


def register(model, loader, *, group=None, report=True):
    """Install the weighted hook on DistributedDataParallel @model for the batches of @loader
    (a Loader with balance=True, iterated by this rank); with @report, each step's compute
    time goes to loaderd. Returns @model."""
    if not getattr(loader, "balance", False):
        raise ValueError("loaderd.ddp.register: the Loader was not made with balance=True")
    model.register_comm_hook(_State(loader, group, report), weighted_hook)
    return model


def loss_scale(loader) -> float:
    """The factor for this rank's mean loss (n_r x world / global count) that makes DDP's plain
    average equal the global mean's gradient; 1.0 before the first batch. Exact without padding
    (see the module's text)."""
    b = loader.last_batch
    if b is None or not b.global_count:
        return 1.0
    return b.count * loader.world_size / b.global_count


