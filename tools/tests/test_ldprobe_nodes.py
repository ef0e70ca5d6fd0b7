"""ldprobe across nodes (tools/ldprobe.py, --hostfile) on constructed inputs: the hostfile, where
the ranks go, the job's loader ceiling from the nodes' own, the slowest node named when the loader
limits the run (and only then as the limit), the report's lines per node, and the command each
node is asked to run. Run: /usr/bin/python3 -m pytest tools/tests (tests/it_ldprobe_py.sh)."""
import os
import shlex
import sys
import time
from types import SimpleNamespace

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE)))
sys.path.insert(0, HERE)
import ldprobe  # noqa: E402
from test_ldprobe import compute_report, report, shares  # noqa: E402


def node(host, first, count, rate, workers=2):
    return {"host": host, "first": first, "count": count, "rate": rate, "workers": workers,
            "busy": 0.97, "decode_share": 0.9, "seconds": 2.0, "samples": int(2 * rate)}


# two nodes of 2 ranks: node b's loaderd makes half of node a's
NODES = [node("nodea", 0, 2, 2000.0, workers=4), node("nodeb", 2, 2, 1000.0, workers=2)]
ARGS = SimpleNamespace(batch=32, ranks=4, prefetch=None, crop=64, dataset="d.dpk", model="mlp",
                       trainer_args="", out="out", nodes=[("nodea", 2), ("nodeb", 2)])
LD = SimpleNamespace(workers=2, private=False, sock="/run/loaderd/loaderd.sock", busy_ranks=0)


def rank(r, data=0.0):
    return {"rank": r, "shares": shares(data=data, compute=0.8 - data), "step_ms": 10.0,
            "compute_ms": 4.0, "samples_per_s": 400.0, "au": 0.4}


def real4(verdict="compute-limited", data=(0.0, 0.0, 0.0, 0.0), **over):
    return report(verdict=verdict, ranks=4, per_rank=[rank(r, d) for r, d in enumerate(data)],
                  **over)


def loader_of(nodes, world=4):
    rate, slow, _ = ldprobe.nodes_summary(nodes, world)
    return {"rate": rate, "busy": slow["busy"], "decode_share": slow["decode_share"],
            "nodes": nodes}


def test_hostfile_slots_comments_and_rank_placement():
    nodes = ldprobe.parse_hostfile("# the job\n10.0.0.1 slots=2 max_slots=8\n\n"
                                   "10.0.0.2   slots=3  # the other one\n")
    assert nodes == [("10.0.0.1", 2), ("10.0.0.2", 3)]
    # mpirun's by-slot placement: ranks fill the nodes in the hostfile's order
    assert ldprobe.node_ranks(nodes) == [("10.0.0.1", 0, 2), ("10.0.0.2", 2, 3)]


@pytest.mark.parametrize("text, what", [
    ("", "no node in it"),
    ("a slots=2\nb\n", "line 2: give the node's ranks as slots=N (b)"),
    ("a slots=0\n", "line 1: 'slots=0' is not a slot count >= 1"),
    ("a slots=x\n", "line 1: 'slots=x' is not a slot count >= 1"),
    ("a slots=1\na slots=1\n", "line 2: node a again"),
])
def test_hostfile_refused_with_the_reason(text, what):
    with pytest.raises(ValueError) as e:
        ldprobe.parse_hostfile(text)
    assert str(e.value) == what


def test_job_ceiling_is_the_slowest_node_per_rank():
    # node b: 1000/s for 2 ranks = 500 per rank; x 4 ranks = 2000/s for the job, not 3000
    rate, slow, fast = ldprobe.nodes_summary(NODES, 4)
    assert (rate, slow["host"], fast) == (2000.0, "nodeb", 1000.0)
    # per rank, not per node: a node with more ranks needs more
    uneven = [node("a", 0, 1, 600.0), node("b", 1, 3, 1500.0)]
    rate, slow, _ = ldprobe.nodes_summary(uneven, 4)
    assert (rate, slow["host"]) == (2000.0, "b")


def test_loader_limited_names_the_slowest_node():
    real = real4("loader-limited", data=(0.05, 0.05, 0.45, 0.5),
                 causes={"loader": 0.5, "comm": 0.0, "straggler": 0.0})
    verdict, why, _, advice = ldprobe.diagnose(ARGS, LD, loader_of(NODES), compute_report(),
                                               real, None, cores=64)
    assert verdict == "loader-limited"
    assert why[1] == ("node nodeb is the slowest loader: 500 samples/s per rank against 1000 on "
                      "the fastest node; every step waits for it, so the job's loader ceiling is "
                      "2000 samples/s (4 ranks x 500)")
    assert advice[0].startswith("node nodeb: the worker advice below is for its loaderd")
    # the workers advice is about the slowest node's loaderd (ld.workers is its count)
    assert "loaderd --workers" in advice[1]


def test_slowest_node_is_not_blamed_when_the_loader_does_not_limit():
    real = real4("communication-limited", causes={"loader": 0.0, "comm": 0.4, "straggler": 0.0},
                 shares=shares(compute=0.5, comm=0.4))
    _, why, _, advice = ldprobe.diagnose(ARGS, LD, loader_of(NODES), compute_report(), real,
                                         None, cores=64)
    assert not any("slowest loader" in w for w in why)
    assert not any(a.startswith("node nodeb:") for a in advice)
    # 2x apart: said, as a remark, not as the cause
    assert any(a.startswith("nodes: node nodeb's loader (500 samples/s per rank) is 2.0x slower")
               for a in advice)
    # nodes within 1.5x of each other: nothing to say about them
    even = [node("nodea", 0, 2, 1100.0), node("nodeb", 2, 2, 1000.0)]
    _, _, _, advice = ldprobe.diagnose(ARGS, LD, loader_of(even), compute_report(), real, None,
                                       cores=64)
    assert not any(a.startswith("node") for a in advice)


def test_one_node_says_nothing_about_nodes():
    one = [node("nodea", 0, 4, 2000.0)]
    real = real4("loader-limited", causes={"loader": 0.5, "comm": 0.0, "straggler": 0.0})
    assert ldprobe.advise_nodes(one, 4, real) == ([], [])


def test_report_lines_per_node_with_their_ranks_data_wait():
    real = real4("loader-limited", data=(0.05, 0.02, 0.45, 0.5),
                 causes={"loader": 0.5, "comm": 0.0, "straggler": 0.0})
    lines = ldprobe.node_lines(NODES, 4, real)
    assert lines == [
        "  node nodea (ranks 0-1): 2000 samples/s alone, 1000 per rank, 4 decode workers; its "
        "ranks wait for data 5% of the run",
        "  node nodeb (ranks 2-3): 1000 samples/s alone, 500 per rank, 2 decode workers; its "
        "ranks wait for data 50% of the run (the slowest)"]
    diag = ldprobe.diagnose(ARGS, LD, loader_of(NODES), compute_report(), real, None, cores=64)
    text = ldprobe.render_report(ARGS, LD, loader_of(NODES), compute_report(), real,
                                 {"samples": 200}, diag)
    assert "on /run/loaderd/loaderd.sock of each of 2 nodes, the slowest's" in text
    assert ("loader ceiling      2000.0 samples/s  the slowest node's per rank x 4 ranks" in text)
    assert lines[1] in text.splitlines()


def test_each_node_runs_its_own_ceiling_through_the_agent(tmp_path, monkeypatch):
    """measure_nodes asks every node, through the launch agent, for the ceiling of its own ranks
    against the loaderd on --socket (the same path everywhere), and reads the answer back."""
    agent = tmp_path / "agent"
    calls = tmp_path / "calls"
    # a stand-in agent: records HOST and COMMAND, answers as ldprobe --node-ceiling would
    agent.write_text("#!/bin/sh\nprintf '%%s|%%s\\n' \"$1\" \"$2\" >>%s\n"
                     "case $1 in a) r=900.5 ;; *) r=450.0 ;; esac\n"
                     "echo \"ldprobe-node: {\\\"rate\\\": $r, \\\"busy\\\": 0.9, "
                     "\\\"decode_share\\\": 0.8, \\\"workers\\\": 3}\"\n" % calls)
    agent.chmod(0o755)
    a = SimpleNamespace(nodes=[("a", 2), ("b", 1)], ranks=3, launch_agent=str(agent),
                        socket="/run/ld.sock", dataset_abs="/data/d.dpk", batch=8, crop=32,
                        seconds=1.0, seed=1, bin="/opt/bin", slots=None, out=str(tmp_path))
    monkeypatch.setattr(sys, "argv", ["/opt/bin/ldprobe"])
    children = ldprobe.Children()
    nodes = ldprobe.measure_nodes(a, children)
    assert [(n["host"], n["first"], n["count"], n["rate"], n["workers"]) for n in nodes] == \
        [("a", 0, 2, 900.5, 3), ("b", 2, 1, 450.0, 3)]
    seen = sorted(l.split("|", 1) for l in calls.read_text().splitlines())
    assert [h for h, _ in seen] == ["a", "b"]
    words = shlex.split(seen[0][1])
    assert words[:5] == ["/opt/bin/ldprobe", "--node-ceiling", "0:2", "--ranks", "3"]
    assert words[words.index("--socket") + 1] == "/run/ld.sock"
    assert shlex.split(seen[1][1])[2] == "2:1"


def test_mpirun_gets_the_hostfile_and_the_agent():
    a = SimpleNamespace(ranks=4, mpirun=None, mpirun_extra=["--oversubscribe"],
                        nodes=[("a", 2), ("b", 2)], hostfile="/job/hosts", launch_agent="ssh")
    assert ldprobe.mpi_prefix(a) == ["mpirun", "--oversubscribe", "--hostfile", "/job/hosts",
                                     "-np", "4"]
    a.launch_agent = "/usr/local/bin/nsrun"
    assert ldprobe.mpi_prefix(a)[3:7] == ["/job/hosts", "--mca", "plm_rsh_agent",
                                          "/usr/local/bin/nsrun"]


# ---- a slow link: the batch advice from measured compute scaling; volume, not latency ----

def slow_link(**over):
    """4 ranks on a slow link: 958 ms of a 1156 ms step exposed, 8 MiB of gradient in 2 buckets,
    compute 40 ms per step."""
    return real4("communication-limited", causes={"loader": 0.0, "comm": 958.0 / 1156.0,
                                                   "straggler": 0.0},
                 shares=shares(compute=0.03, comm=0.83), step_ms=1156.0, compute_ms=40.0,
                 params=2 * 2**20, buckets=2, bucket_mb=25.0, batch=1, **over)


def one_rank_args(batch=1):
    a = SimpleNamespace(**vars(ARGS))
    a.batch = batch
    return a


def test_batch_advice_from_measured_scaling_when_compute_hardly_grows():
    # one rank: 20 ms at batch 1, 26.2 ms at batch 32: 0.2 ms per sample on top of 19.8 ms
    _, _, _, advice = ldprobe.diagnose(one_rank_args(), LD, loader_of(NODES), compute_report(),
                                       slow_link(), None, cores=64, scaling={1: 20.0, 32: 26.2})
    # rest 198 ms; --accum 32: 958 / (32 x 198 + 958) = 13%
    assert advice[1].startswith("fewer allreduces per sample: even --accum 32 leaves about 13%")
    # --batch 32: compute 40 ms x 1.31 = 52.4 ms, rest 210.4: 958 / 1168.4 = 82%
    assert advice[2].startswith("larger batch: compute per step grows 1.31x from --batch 1 to 32 "
                                "(measured, one rank, synthetic), so even --batch 32 leaves it "
                                "at about 82%: compute grows much less than the batch here")


def test_batch_advice_from_measured_scaling_when_compute_grows_with_the_batch():
    real = report(verdict="communication-limited",
                  causes={"loader": 0.0, "comm": 0.3, "straggler": 0.0},
                  shares=shares(compute=0.5, comm=0.3))
    # compute proportional to the batch: as --accum, plus the optimizer and the rest not growing
    _, _, _, advice = ldprobe.diagnose(ARGS, LD, loader_of(NODES), compute_report(), real, None,
                                       cores=64, scaling={32: 4.0, 1024: 128.0})
    assert advice[1].startswith("fewer allreduces per sample: --accum 4 brings its share to "
                                "about 10%")
    # --batch 128: 4 ms x 4 = 16 ms, rest 7 + 12 = 19 -> 3 / 22 = 14%; --batch 256: 7 + 28 -> 8%
    assert advice[2].startswith("larger batch: compute per step grows 8.00x from --batch 32 to "
                                "256 (measured, one rank, synthetic), so --batch 256 brings its "
                                "share to about 8%")


def test_slow_link_is_volume_not_latency():
    _, _, _, advice = ldprobe.diagnose(one_rank_args(), LD, loader_of(NODES), compute_report(),
                                       slow_link(), None, cores=64)
    buckets = [x for x in advice if x.startswith("buckets:")][0]
    assert buckets.startswith("buckets: the gradient is 8.00 MiB in 2 buckets and 958.0 ms of "
                              "allreduce stays exposed (479 ms per bucket): 8 MiB/s, the rate of "
                              "a slow or shared link, not a per-call cost")
    assert "about 26.7 ms per step here, so bucket size will not hide it" in buckets


def _ceiling_setup(tmp_path, monkeypatch, stats_script):
    """measure_loader against stand-ins: an ldcat that only waits, a loaderctl running
    @stats_script (sh) for `stats` and answering `stop`; short limits."""
    ldcat = tmp_path / "ldcat"
    ldcat.write_text("#!/bin/sh\nexec sleep 60\n")
    ctl = tmp_path / "loaderctl"
    ctl.write_text("#!/bin/sh\nfor w; do last=$w; done\ncase \" $* \" in\n"
                   "*' stats '*) %s ;;\n*) exit 0 ;;\nesac\n" % stats_script)
    for f in (ldcat, ctl):
        f.chmod(0o755)
    monkeypatch.setattr(ldprobe, "WARMUP_LIMIT_S", 1.5)
    monkeypatch.setattr(ldprobe, "STATS_LIMIT_S", 0.6)
    a = SimpleNamespace(node_ranks=range(0, 2), ranks=4, bin_ldcat=str(ldcat),
                        bin_loaderctl=str(ctl), dataset_abs="/data/d.dpk", batch=1, seed=1,
                        slots=None, out=str(tmp_path), nodes=None)
    ld = ldprobe.Loaderd(SimpleNamespace(socket="/run/ld.sock", workers=1, bin_loaderctl=str(ctl),
                                         nodes=None), None, str(tmp_path))
    return a, ld


def test_ceiling_warmup_ends_naming_the_rank_it_waited_for(tmp_path, monkeypatch):
    """Regression (issue 31): a node's ceiling waited for a starved rank and for loaderctl's
    answers without a bound the test could see, and was killed. The warm-up ends within its
    limit, saying what it saw: one of the node's two ranks attached, no steps yet."""
    a, ld = _ceiling_setup(tmp_path, monkeypatch,
                           "echo '{\"job\": \"'$last'\", \"ranks\": [{\"rank\": 0, "
                           "\"samples\": 0, \"published\": 0}]}'")
    children = ldprobe.Children()
    t0 = time.monotonic()
    with pytest.raises(ldprobe.Failure) as e:
        ldprobe.measure_loader(a, ld, children, 32, 1.0, "ceiling", job="j1")
    assert time.monotonic() - t0 < 1.5 + 0.6 + 2 * ldprobe.STOP_TIMEOUT_S
    msg = str(e.value)
    assert "waited 2 s for every rank of job j1 on /run/ld.sock" in msg
    assert "last seen: 1 of its 2 ranks here attached, the fewest steps published 0" in msg
    assert not children.procs  # the ldcats were stopped


def test_ceiling_warmup_ends_with_loaderctls_refusal(tmp_path, monkeypatch):
    """loaderctl refused every time (the admin share spent): waited out within the limits, then
    the failure quotes loaderctl."""
    (tmp_path / "refusal").write_text("loaderctl: uid 0 is past its share of loaderd's control "
                                      "thread (loaderd --admin-share); try again in 300 ms\n")
    a, ld = _ceiling_setup(tmp_path, monkeypatch, "cat %s >&2; exit 1" % (tmp_path / "refusal"))
    children = ldprobe.Children()
    t0 = time.monotonic()
    with pytest.raises(ldprobe.Failure) as e:
        ldprobe.measure_loader(a, ld, children, 32, 1.0, "ceiling", job="j2")
    assert time.monotonic() - t0 < 1.5 + 0.6 + 2 * ldprobe.STOP_TIMEOUT_S
    assert "last seen: loaderctl stats j2 on /run/ld.sock: loaderctl: uid 0 is past its share" \
        in str(e.value)
