"""balance_ddp.py SOCKET DATASET - the Python half of it_balance.sh: two processes on the host,
DistributedDataParallel over gloo, a small linear model (no batch norm) trained for 24 steps on
the same global batches three ways: even splits; balanced shares (Loader(balance=True)) with rank
1 reporting three times rank 0's compute time per sample, through loaderd.ddp.register's weighted
hook; and balanced shares with DDP's plain average (no hook). The reports are fixed (the script's
report_compute after backward overrides the time the hook measured), so the shares each run gets
do not depend on the machine's load. The first two must end with the same parameters within float
tolerance, the third must not (so the comparison can fail), and the shares must have moved.
Prints one line per run and exits 0 or 1."""
import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

STEPS, BATCH, CROP = 24, 8, 8


def rank_main(rank, mode, sock, dpk, initf, out, tag):
    import loaderd
    import loaderd.ddp
    dist.init_process_group("gloo", init_method="file://" + initf, rank=rank, world_size=2)
    torch.manual_seed(0)
    net = torch.nn.Linear(CROP * CROP * 3, 4)
    model = torch.nn.parallel.DistributedDataParallel(net)
    bal = mode != "even"
    it = loaderd.Loader(sock, dpk, BATCH, crop=CROP, rank=rank, world_size=2, seed=11,
                        transforms="eval", epochs=6, job=f"bddp-{mode}-{tag}", balance=bal,
                        return_meta=True, output="torch", slots=2)
    if mode == "hook":
        loaderd.ddp.register(model, it)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    counts, step = [], 0
    for epoch in range(6):
        for b in it:
            x = b.images.reshape(b.count, -1).float() / 255
            loss = torch.nn.functional.cross_entropy(model(x), b.labels)
            opt.zero_grad()
            loss.backward()
            if bal:  # fixed speeds: 1 ms per sample on rank 0, 3 ms on rank 1
                it.report_compute(1e-3 * (1 + 2 * rank) * b.count)
            opt.step()
            counts.append(b.count)
            step += 1
    it.close()
    if rank == 0:
        flat = torch.cat([p.detach().reshape(-1) for p in net.parameters()])
        torch.save({"params": flat, "counts": counts}, out)
    # No teardown: with a Python communication hook, ~ProcessGroupGloo (run by the DDP
    # Reducer's destructor, the GIL held) joins gloo's work thread while that thread waits for
    # the GIL to finish the hook's last future: a deadlock in torch 1.13, 3 hangs in 6 runs
    # under load. Both ranks pass the barrier, so every allreduce is done; then they leave.
    dist.barrier()
    sys.stdout.flush()
    os._exit(0)


def run(mode, sock, dpk, d):
    initf = os.path.join(d, mode + ".init")
    out = os.path.join(d, mode + ".pt")
    mp.spawn(rank_main, args=(mode, sock, dpk, initf, out, os.getpid()), nprocs=2, join=True)
    return torch.load(out)


def main():
    sock, dpk = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as d:
        r = {m: run(m, sock, dpk, d) for m in ("even", "hook", "plain")}
    ref = r["even"]["params"]

    def rel(m):
        return float((r[m]["params"] - ref).norm() / ref.norm())
    late = r["hook"]["counts"][-8:] + r["plain"]["counts"][-8:]
    print(f"# even vs balanced with loaderd.ddp: relative L2 difference {rel('hook'):.3g}")
    print(f"# even vs balanced with DDP's plain average: {rel('plain'):.3g}")
    print(f"# rank 0's batch in the last 8 steps of each balanced run: {late} (even: {BATCH})")
    ok = rel("hook") <= 1e-5 and rel("plain") > 1e-3 and min(late) > BATCH
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
