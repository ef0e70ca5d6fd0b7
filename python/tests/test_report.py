"""loaderd.report: the trainer's report computed in Python from constructed step tables. The cases
are those of tests/test_trn_report.c (the C report), with the same expected figures and verdicts:
the two must agree. The thresholds and names come from trainer/report_limits.def, the table the
trainer compiles."""
import os
import re

import pytest

from loaderd import report

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
D, C, K, M, O = range(5)   # data, copy, compute, comm, opt


def job(ranks=2, steps=20, period=1000, warmup=0, **phases):
    """Step tables like test_trn_report.c's job: steps every @period ns; phases as
    name=(rank or -1, ns) or a list of them; 10 samples per step."""
    rec = [[[1000000 + s * period, 0, 0, 0, 0, 0] for s in range(steps)] for _ in range(ranks)]
    for key, sets in phases.items():
        p = "DCKMO".index(key)
        for r, ns in (sets if isinstance(sets, list) else [sets]):
            for x in range(ranks):
                if r < 0 or x == r:
                    for st in rec[x]:
                        st[1 + p] = ns
    runs = []
    for x in range(ranks):
        st = rec[x][warmup:]
        runs.append({"steps": st, "samples": 10 * len(st), "wall_ns": len(st) * period})
    return runs


def test_table_is_the_trainers():
    limits, names = report.read_table(os.path.join(REPO, "trainer", "report_limits.def"))
    assert limits == {"lost_min": 0.10, "imbalance_min": 1.5, "straggler_steps": 0.75}
    assert names == ["loader-limited", "communication-limited", "straggler-limited",
                     "compute-limited"]
    # report.c takes its table from the file and nowhere else
    src = open(os.path.join(REPO, "trainer", "report.c")).read()
    assert '#include "trainer/report_limits.def"' in src
    assert not re.search(r"lost_min\s*=\s*0\.", src)


def test_compute_limited():
    r = report.compute(job(K=(-1, 900), O=(-1, 100)))
    assert r["schema"] == "loaderd-trainer-report/1"
    assert r["verdict"] == "compute-limited"
    assert r["au"] == pytest.approx(0.9)
    assert r["shares"]["opt"] == pytest.approx(0.1)
    assert r["rank_samples_per_s"] == pytest.approx(1e7)
    assert r["samples_per_s"] == pytest.approx(2e7)
    assert r["step_ms"] == pytest.approx(1e-3)
    assert r["steps_compared"] == 20


def test_loader_limited():
    r = report.compute(job(K=(-1, 500), D=[(0, 300), (1, 100)], C=(-1, 100),
                           O=[(0, 100), (1, 300)]))
    assert r["verdict"] == "loader-limited"
    assert r["causes"]["loader"] == pytest.approx(0.4)


def test_communication_limited():
    r = report.compute(job(K=(-1, 500), M=[(0, 400), (1, 300)], O=[(0, 100), (1, 200)]))
    assert r["verdict"] == "communication-limited"
    assert r["causes"]["comm"] == pytest.approx(0.3)


def test_straggler_limited():
    r = report.compute(job(K=[(0, 300), (1, 900)], M=(0, 600), O=(-1, 100)))
    assert r["verdict"] == "straggler-limited"
    st = r["straggler"]
    assert (st["slow_rank"], st["fast_rank"]) == (1, 0)
    assert st["imbalance"] == pytest.approx(3.0)
    assert st["consistency"] == pytest.approx(1.0)
    assert r["causes"]["straggler"] == pytest.approx(0.6)
    assert r["causes"]["comm"] == pytest.approx(0.0)
    assert st["wait_for_slow"] == pytest.approx(0.6)


def test_lost_min_boundary():
    assert report.compute(job(K=(-1, 900), D=(-1, 100)))["verdict"] == "loader-limited"
    assert report.compute(job(K=(-1, 901), D=(-1, 99)))["verdict"] == "compute-limited"
    assert report.compute(job(K=(-1, 900), M=(-1, 100)))["verdict"] == "communication-limited"
    assert report.compute(job(K=(-1, 901), M=(-1, 99)))["verdict"] == "compute-limited"


def test_straggler_consistency():
    runs = job(steps=4, K=(0, 200))
    for i, ns in enumerate((800, 800, 800, 100)):
        runs[1]["steps"][i][1 + K] = ns
    r = report.compute(runs)
    assert r["verdict"] == "straggler-limited"
    assert r["straggler"]["consistency"] == pytest.approx(0.75)
    for i, ns in enumerate((800, 800, 100, 100)):
        runs[1]["steps"][i][1 + K] = ns
    r = report.compute(runs)
    assert r["verdict"] == "compute-limited"
    assert r["straggler"]["consistency"] == pytest.approx(0.5)
    assert r["straggler"]["imbalance"] >= 1.5 and r["causes"]["straggler"] >= 0.10
    # the limits are the report's input
    r = report.compute(runs, limits=dict(report.thresholds(), straggler_steps=0.5))
    assert r["verdict"] == "straggler-limited"
    assert r["thresholds"]["straggler_steps"] == 0.5


def test_no_steps_uses_totals():
    runs = [{"steps": [], "sum_ns": [400, 0, 500, 0, 100], "samples": 10, "wall_ns": 1000},
            {"steps": [], "sum_ns": [300, 0, 625, 0, 75], "samples": 10, "wall_ns": 1000}]
    r = report.compute(runs)
    assert r["steps_compared"] == 0
    assert r["verdict"] == "loader-limited"
    assert r["straggler"]["slow_rank"] == 1
    assert r["straggler"]["imbalance"] == pytest.approx(1.25)
    with pytest.raises(ValueError):
        report.compute([])


def test_json_has_the_trainers_fields():
    """Every field the trainer's report has (the README's list), so ldprobe's readers work."""
    r = report.compute(job(K=(-1, 900), O=(-1, 100)), info={"batch": 10, "device": "cpu"})
    for k in ("schema", "verdict", "device", "backend", "model", "synthetic", "ranks", "batch",
              "accum", "crop", "classes", "params", "buckets", "bucket_mb", "steps", "warmup",
              "steps_compared", "wall_s", "samples_per_s", "rank_samples_per_s", "au",
              "step_ms", "compute_ms", "shares", "causes", "straggler", "thresholds",
              "per_rank"):
        assert k in r, k
    assert set(r["shares"]) == {"data", "copy", "compute", "comm", "opt", "gap"}
    assert [x["rank"] for x in r["per_rank"]] == [0, 1]
