"""test_diagnose_guard.py - loaderd.diagnose never breaks the script it watches: a DataLoader
whose batches are odd (a nested tensor, a dict of lists, None, strings:
scripts/odd_batches.py) runs under it with the same losses and a record; a hook of ours that
fails disables that loader's profiling with one warning, the script's results unchanged; the
Loader's recorder likewise."""
import json
import os
import subprocess
import sys

import pytest

from conftest import REPO

SCRIPT = REPO / "python" / "tests" / "scripts" / "odd_batches.py"


def env():
    return dict(os.environ, PYTHONPATH=str(REPO / "python"), PYTHONDONTWRITEBYTECODE="1",
                OMP_NUM_THREADS="1")


def losses(text):
    return [ln for ln in text.splitlines() if ln.startswith("loss ")]


@pytest.fixture(scope="module")
def plain():
    pytest.importorskip("torch")
    p = subprocess.run([sys.executable, str(SCRIPT), "--steps", "8"], env=env(),
                       capture_output=True, text=True, timeout=120, check=True)
    assert len(losses(p.stdout)) == 8 and p.stdout.strip().endswith("done")
    return p.stdout


def test_odd_batches_under_diagnose(tmp_path, plain):
    out = tmp_path / "diag"
    p = subprocess.run([sys.executable, "-m", "loaderd.diagnose", "--out", str(out), "--",
                        sys.executable, str(SCRIPT), "--steps", "8"], env=env(),
                       capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stderr[-3000:]
    assert losses(p.stdout) == losses(plain)
    assert "Traceback" not in p.stderr and "stopped" not in p.stderr, p.stderr[-2000:]
    rep = json.loads((out / "report.json").read_text())
    # 8 steps, the last without an end (the loop was left by break)
    assert rep["input"] == "torch.utils.data.DataLoader" and rep["steps"] >= 6


# A hook that fails: _batch_len and then the recorder's end() made to raise, in a process that
# hooks DataLoader as diagnose's sitecustomize does.
BROKEN = r"""
import os, runpy, sys
import loaderd.profile as P
import torch.utils.data.dataloader as dlm
P.patch_dataloader(dlm)
what = os.environ["BREAK"]
calls = []
def boom(*a, **kw):
    raise RuntimeError("broken on purpose")
def end_third(self, *a, **kw):   # two steps end, the third raises
    calls.append(1)
    if len(calls) == 3:
        boom()
    return orig_end(self, *a, **kw)
if what == "len":
    P._batch_len = boom
elif what == "end":
    orig_end = P.Recorder.end
    P.DLRecorder.end = P._guarded(end_third)
elif what == "init":
    P.DLRecorder.__init__ = boom
sys.argv = [sys.argv[1], "--steps", "8"]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


@pytest.mark.parametrize("what", ["len", "end", "init"])
def test_a_failing_hook_disables_profiling_once(tmp_path, plain, what):
    p = subprocess.run([sys.executable, "-c", BROKEN, str(SCRIPT)],
                       env=dict(env(), BREAK=what, LOADERD_PROFILE="1",
                                LOADERD_PROFILE_DIR=str(tmp_path)),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    assert losses(p.stdout) == losses(plain) and p.stdout.strip().endswith("done")
    warn = [ln for ln in p.stderr.splitlines() if ln.startswith("loaderd.profile:")]
    assert len(warn) == 1, p.stderr
    assert "broken on purpose" in warn[0] and "runs on unprofiled" in warn[0]
    recs = list(tmp_path.glob("rank-*.json"))
    if what == "end":   # the two steps timed before the failure, and why the record ends
        assert len(recs) == 1, recs
        rec = json.loads(recs[0].read_text())
        assert len(rec["steps"]) == 2 and "broken on purpose" in rec["profile_error"]
        assert "after 2 steps" in warn[0]
    else:               # no step was timed: no record
        assert recs == []


def test_recorder_hooks_never_raise(capsys):
    from loaderd import profile as P
    r = P.Recorder(None)
    try:
        assert r.begin() > 0 and r.off is None
        r.end(0, 0, 0, 4, None, 10)        # a good step
        assert len(r.steps) == 1
        r.end(1, None, 0, 4, None, 20)     # t_req None: the hook body raises
        assert r.off and "TypeError" in r.off
        r.end(2, 20, 0, 4, None, 30)       # off: nothing more recorded, nothing said
        assert r.begin() is None and len(r.steps) == 1
        err = capsys.readouterr().err
        assert err.count("loaderd.profile:") == 1 and "after 1 steps" in err
    finally:
        r.finish(None)
