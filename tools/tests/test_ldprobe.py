"""ldprobe's analysis and advice (tools/ldprobe.py) on constructed inputs: a trainer report as
trainer --report-json writes it, the loader and compute ceilings, and what ldprobe makes of them.
The verdict is the report's (ldprobe decides nothing the report decided); the advice is in
numbers worked out here by hand. Also: the report the real trainer writes loads (when it is
built). Run: /usr/bin/python3 -m pytest tools/tests (tests/it_ldprobe_py.sh does)."""
import copy
import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import ldprobe  # noqa: E402

PHASES = ("data", "copy", "compute", "comm", "opt")


def shares(data=0.0, copy_=0.0, compute=0.8, comm=0.0, opt=0.1, gap=0.0):
    return {"data": data, "copy": copy_, "compute": compute, "comm": comm, "opt": opt,
            "gap": gap}


def report(**over):
    """A 2-rank trainer report, compute-limited unless told otherwise."""
    r = {
        "schema": ldprobe.REPORT_SCHEMA, "verdict": "compute-limited", "device": "cuda",
        "backend": "nccl", "model": "mlp", "synthetic": False, "ranks": 2, "batch": 32,
        "accum": 1, "crop": 64, "classes": 4, "params": 65536, "buckets": 1, "bucket_mb": 25,
        "first_bucket_mb": 1, "steps": 120, "warmup": 20, "steps_compared": 100,
        "wall_s": 1.0, "samples_per_s": 800.0, "rank_samples_per_s": 400.0, "au": 0.4,
        "step_ms": 10.0, "compute_ms": 4.0, "shares": shares(),
        "causes": {"loader": 0.0, "comm": 0.0, "straggler": 0.0},
        "straggler": {"slow_rank": 0, "fast_rank": 1, "imbalance": 1.05, "consistency": 0.5,
                      "wait_for_slow": 0.01},
        "thresholds": {"lost_min": 0.1, "imbalance_min": 1.5, "straggler_steps": 0.75},
        "per_rank": [{"rank": r, "shares": shares(), "step_ms": 10.0, "compute_ms": 4.0,
                      "samples_per_s": 400.0, "au": 0.4} for r in (0, 1)],
    }
    for k, v in over.items():
        r[k] = v
    return r


def compute_report(rate=5000.0, au=0.95, comm=0.0, compute_ms=4.0):
    return report(synthetic=True, samples_per_s=rate, au=au, compute_ms=compute_ms,
                  shares=shares(compute=au, comm=comm))


ARGS = SimpleNamespace(batch=32, ranks=2, prefetch=None, crop=64, dataset="d.dpk", model="mlp",
                       trainer_args="", out="out")
LD = SimpleNamespace(workers=1, private=True, sock="/tmp/s.sock", busy_ranks=0)
LOADER = {"rate": 1000.0, "busy": 0.98, "decode_share": 0.9}


def diagnose(real, compute=None, loader=None, ld=LD, cheaper=None, a=ARGS, info=None):
    return ldprobe.diagnose(a, ld, loader or LOADER, compute or compute_report(), real, cheaper,
                            info, cores=64)


def test_loader_limited_advises_workers_for_the_au_target():
    real = report(verdict="loader-limited", causes={"loader": 0.5, "comm": 0.0, "straggler": 0.0})
    verdict, why, ceilings, advice = diagnose(real)
    assert verdict == "loader-limited"
    assert why == ["the ranks wait for data 50% of each step (worst rank per step)"]
    # AU 0.40 at 800/s: 90% needs 0.9 x 800 / 0.4 = 1800/s; 1 worker makes 1000/s -> 2 workers
    assert advice[0] == ("decode workers: 1 worker delivers 1000 samples/s alone (1000 per "
                         "worker); AU >= 90% needs about 1800 samples/s -> loaderd --workers 2")
    assert ceilings == "the ceilings agree: the loader ceiling is the lower one"


def test_loader_limited_capped_by_the_compute_ceiling():
    real = report(verdict="loader-limited", causes={"loader": 0.5, "comm": 0.0, "straggler": 0.0})
    _, _, _, advice = diagnose(real, compute=compute_report(rate=1500.0, au=0.93),
                               ld=SimpleNamespace(workers=1, private=False, sock="/run/s.sock"))
    assert advice[0].endswith("AU >= 90% would need 1800 samples/s, more than compute alone "
                              "reaches (1500/s, AU 0.93 there): to reach the compute ceiling "
                              "-> loaderd --workers 2 (restart the loaderd on /run/s.sock "
                              "with it)")


def test_loader_limited_cheaper_transform_measured():
    real = report(verdict="loader-limited", causes={"loader": 0.5, "comm": 0.0, "straggler": 0.0})
    _, _, _, advice = diagnose(real, cheaper=(32, 2500.0))
    assert ("cheaper transform: at --crop 32 the same 1 worker delivers 2500 samples/s "
            "(measured, 2.5x): enough for the same target") in advice[1]
    _, _, _, advice = diagnose(real, cheaper=(32, 1050.0),
                               info={"images": {"width": {"mean": 640}, "height": {"mean": 480}}})
    assert "a smaller crop does not help here (--crop 32: 1050 samples/s" in advice[1]
    assert "(640x480 px on average)" in advice[1]


def test_communication_limited_batch_and_buckets():
    real = report(verdict="communication-limited",
                  causes={"loader": 0.0, "comm": 0.3, "straggler": 0.0},
                  shares=shares(compute=0.5, comm=0.3))
    verdict, why, _, advice = diagnose(real)
    assert verdict == "communication-limited"
    assert why == ["exposed allreduce 30% of each step (3.0 ms of 10.0 ms, the least exposed "
                   "rank)"]
    # 3 ms of allreduce over 7 ms of the rest: x4 the batch -> 3 / (28 + 3) = 9.7%
    assert advice[0] == ("larger batch: the allreduce costs the same per step, so --batch 128 "
                         "(or --accum 4) brings its share to about 10%")
    # 0.25 MiB in 3 ms = 83 MiB/s: latency, one bucket
    assert advice[1].startswith("buckets: the gradient is 0.25 MiB in 1 bucket and 3.0 ms of "
                                "allreduce stays exposed: 83 MiB/s")
    assert advice[1].endswith("bucket size will not hide it, fewer allreduces per sample will "
                              "(the batch above)")


def test_communication_advice_uses_the_reports_threshold():
    real = report(verdict="communication-limited",
                  causes={"loader": 0.0, "comm": 0.3, "straggler": 0.0},
                  thresholds={"lost_min": 0.2, "imbalance_min": 1.5, "straggler_steps": 0.75})
    _, _, _, advice = diagnose(real)
    assert "--batch 64 (or --accum 2) brings its share to about 18%" in advice[0]


def test_communication_limited_large_gradient_many_buckets():
    real = report(verdict="communication-limited", params=64 * 2**20, buckets=10,
                  causes={"loader": 0.0, "comm": 0.3, "straggler": 0.0})
    _, _, _, advice = diagnose(real)
    # 256 MiB in 3 ms is far above the latency bound: bucket size advice
    assert advice[1] == ("buckets: 10 buckets of about 25.60 MiB (cap 25 MiB): --bucket-mb "
                         "12.5 starts the allreduce earlier in backward (pass it with "
                         "--trainer-args)")


def test_straggler_names_the_rank_and_the_gain():
    real = report(verdict="straggler-limited",
                  causes={"loader": 0.0, "comm": 0.0, "straggler": 0.5},
                  straggler={"slow_rank": 1, "fast_rank": 0, "imbalance": 3.0,
                             "consistency": 0.98, "wait_for_slow": 0.6})
    real["per_rank"][0]["compute_ms"] = 2.0
    real["per_rank"][1]["compute_ms"] = 6.0
    verdict, why, _, advice = diagnose(real, loader={"rate": 5000.0, "busy": 0.5,
                                                     "decode_share": 0.9})
    assert verdict == "straggler-limited"
    assert why[0].startswith("rank 1 computes 3.00x as long as rank 0 (6.0 ms vs 2.0 ms per "
                             "step, the slowest in 98% of the steps)")
    # half of each step is the straggler: 2x the rate, 1600/s
    assert advice[0].endswith("the job would reach about 1600 samples/s (100% more)")


def test_compute_limited_headroom():
    _, why, _, advice = diagnose(report())
    assert why[0].startswith("compute takes 80% of the step time;")
    assert why[0].endswith("each cost less than 10%")
    # 1000/s against 800/s: less than 30% to spare
    assert advice[0] == ("headroom: the loader ceiling (1000/s) is only 25% above the actual "
                         "rate: a faster model or more ranks will make it the limit")
    _, _, _, advice = diagnose(report(), loader={"rate": 4000.0, "busy": 0.2, "decode_share": 1})
    assert advice[0] == ("the loader has 5.0x headroom (4000/s alone); to go faster, make "
                         "compute faster (device, model) or add ranks")


def test_the_verdict_is_the_reports():
    # large causes, but the report says compute-limited: ldprobe does not overrule it
    real = report(causes={"loader": 0.6, "comm": 0.3, "straggler": 0.2})
    verdict, _, _, _ = diagnose(real)
    assert verdict == "compute-limited"


def test_exposed_copy_and_gap_advice():
    real = report(shares=shares(copy_=0.08, gap=0.15), device="host")
    a = copy.copy(ARGS)
    a.prefetch = 3
    _, _, _, advice = diagnose(real, a=a)
    assert ("copies: exposed H2D copy 8% of the step: raise --prefetch to 5 (now 3) and the ring "
            "depth --slots to at least 7") in advice
    assert any(x.startswith("15% of the step time is in no phase") for x in advice)


def test_compute_slower_beside_the_loader():
    real = report(compute_ms=6.0)
    _, _, _, advice = diagnose(real, compute=compute_report(compute_ms=4.0))
    assert any(x.startswith("compute per step takes 6.0 ms in the real run but 4.0 ms without "
                            "the loader (1.50x)") for x in advice)


def test_render_report_lines():
    real = report()
    diag = diagnose(real)
    text = ldprobe.render_report(ARGS, LD, LOADER, compute_report(), real, {"samples": 200}, diag)
    lines = text.splitlines()
    assert lines[0].startswith("ldprobe: d.dpk (200 samples, 4 classes), model mlp")
    assert any(x.startswith("  rank 1: data 0.0%, copy 0.0%, compute 80.0%") for x in lines)
    assert "verdict: compute-limited" in lines
    assert lines[-1] == ("ldprobe: loader_per_s=1000.0 compute_per_s=5000.0 actual_per_s=800.0 "
                         "au=0.400 verdict=compute-limited")


def test_load_report_refuses_what_is_not_a_report(tmp_path):
    with pytest.raises(ldprobe.Failure):
        ldprobe.load_report(str(tmp_path / "none.json"), "trainer (x)", "log")
    p = tmp_path / "other.json"
    p.write_text(json.dumps({"schema": "something/9"}))
    with pytest.raises(ldprobe.Failure):
        ldprobe.load_report(str(p), "trainer (x)", "log")
    p.write_text("{not json")
    with pytest.raises(ldprobe.Failure):
        ldprobe.load_report(str(p), "trainer (x)", "log")


def test_the_trainers_report_has_what_ldprobe_reads(tmp_path):
    trainer = os.path.join(ROOT, os.environ.get("BUILD", "build"), "bin", "trainer")
    if not os.access(trainer, os.X_OK):
        pytest.skip("trainer not built")
    out = tmp_path / "r.json"
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    subprocess.run([trainer, "--synthetic", "--device", "host", "--crop", "16", "--batch", "4",
                    "--steps", "12", "--log-every", "0", "--report-json", str(out)],
                   check=True, capture_output=True, timeout=120, env=env)
    real = ldprobe.load_report(str(out), "trainer (test)", "log")
    template = report()
    assert set(template) <= set(real)
    for k in ("shares", "causes", "straggler", "thresholds"):
        assert set(template[k]) <= set(real[k]), k
    assert set(template["per_rank"][0]) <= set(real["per_rank"][0])
    # and the whole analysis runs on it
    verdict, _, _, _ = diagnose(real, compute=real)
    assert verdict == real["verdict"]


def test_svg_report_rows_and_bars(tmp_path):
    import xml.etree.ElementTree as ET
    # two ranks, 10 steps of 1 ms: 0.2 data, 0.6 compute, 0.2 allreduce (us)
    ranks = {r: {s: {"start": 1000.0 * s + 3 * r, "data": 200.0, "copy": 0.0,
                     "compute": 600.0, "comm": 200.0, "opt": 0.0} for s in range(2, 12)}
             for r in (0, 1)}
    real = report()
    path = tmp_path / "t.svg"
    ldprobe.svg_report(str(path), ARGS, LD, LOADER, compute_report(), real, ranks,
                       "compute-limited", ["why"])
    root = ET.parse(str(path)).getroot()
    ns = "{http://www.w3.org/2000/svg}"
    gs = list(root.iter(ns + "g"))
    assert [g.get("data-rank") for g in gs if g.get("class") == "rank-row"] == ["0", "1"]
    assert [g.get("data-name") for g in gs if g.get("class") == "rate-bar"] == \
        ["loader ceiling", "compute ceiling", "actual"]
    row = [g for g in gs if g.get("class") == "rank-row"][0]
    assert {r.get("fill") for r in row.iter(ns + "rect")} >= \
        {ldprobe.COLOUR["data"], ldprobe.COLOUR["compute"], ldprobe.COLOUR["comm"]}
    # no trace: the picture says so and still has the bars
    ldprobe.svg_report(str(path), ARGS, LD, LOADER, compute_report(), real, {},
                       "compute-limited", ["why"])
    assert "no step timeline" in path.read_text()
