#!/usr/bin/env python3
"""committed_stream.py - the committed stream of a trainer run, from its --log-consumed files,
against an uninterrupted reference run's.

usage: committed_stream.py REF_PREFIX RUN_PREFIX WORLD

Each rank r logged to PREFIX.r: "resume S" when a run (a launch) started at step S, then one
"step S N id... ." line per batch it trained on. A run that was killed and resumed has several
segments; segment i began at S_i, and the next one began at S_{i+1}, the step its checkpoint
recorded. The committed stream is what each segment consumed up to the next one's start, and all
of the last segment: the batches a killed run trained on after its last checkpoint were delivered
again to the next segment (at-least-once transport) but are not committed twice.

Checks, per rank: every segment logged each of its committed steps exactly once, in order (none
missing, none twice); the committed stream equals the reference's, step by step and id by id.
A line cut short by a kill (no final ".") is ignored. Prints one summary line; exit 1 on any
difference, with the first few differences.
"""
import sys


def segments(path):
    """[(start, [(step, ids), ...]), ...] of a log file."""
    segs = []
    with open(path) as f:
        for line in f:
            w = line.split()
            if len(w) == 2 and w[0] == "resume":
                segs.append((int(w[1]), []))
            elif len(w) >= 4 and w[0] == "step" and w[-1] == "." and segs:
                n = int(w[2])
                if len(w) == n + 4:
                    segs[-1][1].append((int(w[1]), tuple(int(x) for x in w[3:3 + n])))
    return segs


def committed(segs, errors, rank):
    out, redelivered = [], 0
    for i, (start, batches) in enumerate(segs):
        end = segs[i + 1][0] if i + 1 < len(segs) else None
        steps = [s for s, _ in batches]
        keep = [(s, ids) for s, ids in batches if end is None or s < end]
        redelivered += len(batches) - len(keep)
        want = list(range(start, end)) if end is not None else list(range(start, start + len(keep)))
        if [s for s, _ in keep] != want:
            errors.append(f"rank {rank} segment {i} (from step {start} to {end}): logged steps "
                          f"{steps[:8]}{'...' if len(steps) > 8 else ''}, expected {want[:8]}...")
        if steps != sorted(set(steps)):
            errors.append(f"rank {rank} segment {i}: a step twice or out of order")
        out += keep
    return out, redelivered


def main():
    ref_prefix, run_prefix, world = sys.argv[1], sys.argv[2], int(sys.argv[3])
    errors, total_samples, total_batches, total_segs, total_again = [], 0, 0, 0, 0
    for r in range(world):
        ref = segments(f"{ref_prefix}.{r}")
        if len(ref) != 1:
            errors.append(f"rank {r}: the reference has {len(ref)} segments, not 1")
            continue
        ref_stream = ref[0][1]
        run = segments(f"{run_prefix}.{r}")
        got, again = committed(run, errors, r)
        total_segs += len(run)
        total_again += again
        if got != ref_stream:
            for k, (a, b) in enumerate(zip(got, ref_stream)):
                if a != b:
                    errors.append(f"rank {r}: committed batch {k} is step {a[0]} ids {a[1][:6]}; "
                                  f"the reference's step {b[0]} ids {b[1][:6]}")
                    break
            if len(got) != len(ref_stream):
                errors.append(f"rank {r}: {len(got)} committed batches, the reference "
                              f"{len(ref_stream)}")
        total_batches += len(got)
        total_samples += sum(len(ids) for _, ids in got)
    print(f"committed stream: {world} ranks, {total_segs} segments, {total_batches} batches, "
          f"{total_samples} samples compared, {total_again} batches delivered again after a kill, "
          f"{len(errors)} differences")
    for e in errors[:10]:
        print("  " + e)
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
