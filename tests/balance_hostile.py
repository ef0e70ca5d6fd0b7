"""balance_hostile.py SOCKET DATASET - part of it_balance.sh: rank 1 of a balanced job writes
nonsense into the report word of each slot it releases (NaN, negative, zero, infinite, 1e300,
1e-300, raw garbage bits), as a hostile consumer could, while rank 0 reports honestly through ldc_report. Every step
must still hold the whole global step (16 samples), neither rank below the floor (16 / 8 = 2),
and the job must end. Then both ranks open the job again from step 0 (as a job resumed from a
checkpoint does, while loaderd still holds it) and report other speeds: every step must come with
the split it had the first time (the splits are recorded, not recomputed). Uses libldc through
the package's ctypes mirror only. Exit 0 or 1."""
import ctypes
import math
import os
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from loaderd import _lib as L  # noqa: E402

REPORT_OFF = L.ring_slot_hdr.cons_report.offset
BAD = [float("nan"), -1.0, 0.0, float("inf"), -float("inf"), 1e300, 1e-300, 1e9, None]


def open_ranks(lib, sock, dpk, again):
    conns = []
    for rank in (0, 1):
        c, err = ctypes.c_void_p(), ctypes.create_string_buffer(512)
        if lib.ldc_connect(sock, ctypes.byref(c), err, 512) < 0:
            sys.exit(f"connect: {err.value.decode()}")
        j = L.ldc_job(job=b"hostile-reports", dataset=dpk, batch=8, rank=rank, world=2,
                      epochs=8, seed=3, balance=1, crop_h=8, crop_w=8, transforms=2,
                      start_at=1 if again else 0)
        info = L.ldc_info()
        if lib.ldc_open(c, ctypes.byref(j), ctypes.byref(info)) < 0:
            sys.exit(f"open: {lib.ldc_error(c).decode()}")
        conns.append(c)
    return conns


def run(lib, conns, report):
    """Every step of the job: [(count 0, offset 0, count 1, offset 1)]; report(step, batches)
    before the release of each."""
    splits = []
    while True:
        got = []
        for rank, c in enumerate(conns):
            b = L.ldc_batch()
            rc = lib.ldc_acquire(c, 10000, ctypes.byref(b))
            if rc == -61:  # ENODATA: the end
                break
            if rc < 0:
                sys.exit(f"rank {rank} step {len(splits)}: {lib.ldc_error(c).decode()}")
            got.append(b)
        if len(got) < 2:
            break
        if got[0].global_count != 16 or got[0].count + got[1].count != 16:
            sys.exit(f"step {len(splits)}: counts {got[0].count} + {got[1].count}, global "
                     f"{got[0].global_count}")
        splits.append((got[0].count, got[0].global_offset, got[1].count, got[1].global_offset))
        report(len(splits) - 1, got)
        for c, b in zip(conns, got):
            lib.ldc_release(c, ctypes.byref(b))
    for c in conns:
        lib.ldc_close(c)
    return splits


def main():
    sock, dpk = sys.argv[1].encode(), sys.argv[2].encode()
    lib = L.lib()
    conns = open_ranks(lib, sock, dpk, False)
    base = lib.ldc_ring_base(conns[1])
    h = L.ring_hdr.from_address(base)
    if lib.ldc_report(conns[1], float("nan")) != -22:
        sys.exit("ldc_report took a NaN")

    def hostile(step, got):
        lib.ldc_report(conns[0], 1000.0)
        bad = BAD[step % len(BAD)]
        slot = (got[1].step - h.first_step) % h.slots
        word = ctypes.c_uint64.from_address(base + h.slots_offset + h.slot_size * slot +
                                            REPORT_OFF)
        word.value = 0xFFF8DEADBEEF0001 if bad is None else struct.unpack(
            "<Q", struct.pack("<d", bad))[0]
    first = run(lib, conns, hostile)
    low = [min(x[0], x[2]) for x in first]
    print(f"# {len(first)} steps with rank 1 reporting nonsense; the smaller share was "
          f"{min(low)}..{max(low)} of 16")
    again = open_ranks(lib, sock, dpk, True)
    replay = run(lib, again, lambda step, got: [lib.ldc_report(c, 50.0 + 4000 * r)
                                               for r, c in enumerate(again)])
    same = sum(a == b for a, b in zip(first, replay))
    print(f"# reopened from step 0 with other speeds: {same} of {len(first)} steps split as before")
    ok = len(first) == 48 and min(low) >= 2 and not math.isnan(min(low))
    sys.exit(0 if ok and replay == first else 1)


if __name__ == "__main__":
    main()
