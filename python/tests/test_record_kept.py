"""test_record_kept.py - no profile record is lost: a script run with LOADERD_PROFILE=1 (what
loaderd.diagnose sets) writes each Loader's record whichever way it ends. Each case is a short
script in the shape people write (numpy output: no torch import), run as its own process against
the session's loaderd; the record is read back from $LOADERD_PROFILE_DIR. Regression: the
recorder was held weakly, so a Loader made inside main() and never closed was collected with it
before exit and no record was written; SIGTERM (torchrun's) ended the process before atexit."""
import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("numpy", reason="the Python client tests need numpy")

from conftest import REPO  # noqa: E402

HEAD = """
import os, sys, gc, glob, signal
import loaderd
SOCK, DPK, OUT = sys.argv[1], sys.argv[2], sys.argv[3]
def make(job=None):
    return loaderd.Loader(SOCK, DPK, 4, crop=16, output="numpy", epochs=2, job=job)
"""


def run_script(daemon, imagefolder, tmp_path, body, expect_rc=0):
    out = tmp_path / "records"
    script = tmp_path / "train.py"
    script.write_text(HEAD + textwrap.dedent(body))
    env = dict(os.environ, LOADERD_PROFILE="1", LOADERD_PROFILE_DIR=str(out),
               PYTHONPATH=str(REPO / "python"), PYTHONDONTWRITEBYTECODE="1")
    # SIGINT's default disposition in the script, as from a terminal: a test run started in the
    # background of a shell without job control inherits it ignored, and Python then never
    # raises KeyboardInterrupt (the SIGINT case would pass for nothing or fail for nothing)
    p = subprocess.run([sys.executable, str(script), daemon.sock, str(imagefolder.path),
                        str(out)], env=env, capture_output=True, text=True, timeout=60,
                       preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert p.returncode == expect_rc, p.stderr
    recs = [json.loads(f.read_text()) for f in sorted(out.glob("rank-*.json"))]
    return p, recs


def test_loader_in_a_function_never_closed_writes_at_collection(daemon, imagefolder, tmp_path):
    # the record is on disk once the Loader is collected, before exit: not left to atexit
    p, recs = run_script(daemon, imagefolder, tmp_path, """
        def train():
            it = make()
            for _ in it:
                pass
        train()
        gc.collect()
        print("files=%d" % len(glob.glob(OUT + "/rank-*.json")))
    """)
    assert "files=1" in p.stdout
    assert len(recs) == 1 and len(recs[0]["steps"]) == 12
    assert recs[0]["batch"] == 4 and recs[0]["crop"] == 16 and recs[0]["job"]
    # loaderd's counters from its connection at collection: present, the fill time of the run
    assert recs[0]["loaderd"]["samples"] > 0 and recs[0]["loaderd"]["fill_ns"] > 0
    # and the report of it, of all 12 steps (2 of warm-up)
    from loaderd import diagnose as D
    rep = D.analyse(recs)
    assert rep["steps"] == 12 and rep["steps_compared"] == 10
    assert rep["verdict"] in ("loader-limited", "compute-limited")
    assert rep["loaderd"]["workers"] == 2


def test_sys_exit_with_an_open_loader(daemon, imagefolder, tmp_path):
    _, recs = run_script(daemon, imagefolder, tmp_path, """
        it = make()
        for i, _ in enumerate(it):
            if i == 7:
                sys.exit(3)
    """, expect_rc=3)
    assert len(recs) == 1 and len(recs[0]["steps"]) == 7
    assert recs[0]["loaderd"]["workers"] == 2


def test_uncaught_exception(daemon, imagefolder, tmp_path):
    p, recs = run_script(daemon, imagefolder, tmp_path, """
        def main():
            it = make()
            for i, _ in enumerate(it):
                if i == 5:
                    raise RuntimeError("loss is nan")
        main()
    """, expect_rc=1)
    assert "loss is nan" in p.stderr
    assert len(recs) == 1 and len(recs[0]["steps"]) == 5


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_mid_loop(daemon, imagefolder, tmp_path, sig):
    # SIGTERM: our handler writes, then the process dies of the signal as it would have;
    # SIGINT: KeyboardInterrupt through atexit, then Python dies of SIGINT itself
    _, recs = run_script(daemon, imagefolder, tmp_path, """
        it = make()
        for i, _ in enumerate(it):
            if i == 6:
                os.kill(os.getpid(), %d)
    """ % sig, expect_rc=-sig)
    assert len(recs) == 1 and len(recs[0]["steps"]) in (6, 7)


def test_sigterm_handler_of_the_script_is_left_alone(daemon, imagefolder, tmp_path):
    p, recs = run_script(daemon, imagefolder, tmp_path, """
        signal.signal(signal.SIGTERM, lambda s, f: print("script's handler"))
        it = make()
        for i, _ in enumerate(it):
            if i == 3:
                os.kill(os.getpid(), signal.SIGTERM)
        it.close()
    """)
    assert "script's handler" in p.stdout
    assert len(recs) == 1 and len(recs[0]["steps"]) == 12


def test_several_loaders_each_write(daemon, imagefolder, tmp_path):
    # a training Loader closed, an evaluation Loader dropped, a third open at exit
    _, recs = run_script(daemon, imagefolder, tmp_path, """
        with make("train") as a:
            for _ in a:
                pass
        def evaluate():
            b = make("eval")
            for i, _ in enumerate(b):
                if i == 4:
                    break
        evaluate()
        c = make("third")
        for i, _ in enumerate(c):
            if i == 2:
                break
    """)
    jobs = sorted(r["job"] for r in recs)
    assert len(recs) == 3, jobs
    assert sorted(len(r["steps"]) for r in recs) == [2, 4, 12]


def test_forked_child_writes_nothing_of_its_parent(daemon, imagefolder, tmp_path):
    # a forked child (a DataLoader worker, a script's own fork) that exits through atexit or
    # SIGTERM leaves the parent's record to the parent: one record, the parent's pid
    p, recs = run_script(daemon, imagefolder, tmp_path, """
        it = make()
        for i, _ in enumerate(it):
            if i == 3:
                for how in ("exit", "term"):
                    pid = os.fork()
                    if pid == 0:
                        if how == "term":
                            os.kill(os.getpid(), signal.SIGTERM)
                        sys.exit(0)
                    os.waitpid(pid, 0)
        it.close()
        print("parent %d" % os.getpid())
    """)
    assert len(recs) == 1 and len(recs[0]["steps"]) == 12
    assert "parent %d" % recs[0]["pid"] in p.stdout


def test_diagnose_runs_the_scripts_own_sitecustomize(tmp_path):
    # diagnose's sitecustomize comes first on PYTHONPATH; the one the script would have loaded
    # (here a directory of the user's, on Debian the system's) still runs after it
    own = tmp_path / "own"
    own.mkdir()
    (own / "sitecustomize.py").write_text("print('own sitecustomize ran')\n")
    env = dict(os.environ, PYTHONPATH="%s:%s" % (own, REPO / "python"),
               PYTHONDONTWRITEBYTECODE="1")
    p = subprocess.run([sys.executable, "-m", "loaderd.diagnose", "--out", str(tmp_path / "d"),
                        "--", sys.executable, "-c",
                        "import sys; print('hook', type(sys.meta_path[0]).__name__)"],
                       env=env, capture_output=True, text=True, timeout=60)
    assert "own sitecustomize ran" in p.stdout
    assert "hook _LoaderdDataLoaderFinder" in p.stdout
    assert p.returncode == 1 and "left no record" in p.stderr
