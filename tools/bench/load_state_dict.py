"""load_state_dict.py - time Loader.load_state_dict to a step of a dataset, then the first batch.

usage: python3 tools/bench/load_state_dict.py BUILD PYTHON_DIR DATASET.dpk [STEP...]
BUILD holds bin/loaderd and lib/libldc.so; PYTHON_DIR the loaderd package. Compare two builds on
the same dataset (e.g. dsgen imagefolder --classes 100 --per-class 1000 --min-side 32
--max-side 64, packed): the published and decoded counts show what loaderd filled."""
import os, shutil, sys, time, subprocess, tempfile
build, pkg, ds = sys.argv[1], sys.argv[2], sys.argv[3]
steps = [int(a) for a in sys.argv[4:]] or [10, 781, 1500]
os.environ["LOADERD_LIB"] = f"{build}/lib/libldc.so"
sys.path.insert(0, pkg)
import loaderd
d = tempfile.mkdtemp(prefix="s14b.")
sock = f"{d}/s.sock"
p = subprocess.Popen([f"{build}/bin/loaderd", "--socket", sock, "--workers", "2"],
                     stderr=open(f"{d}/log", "w"))
while not os.path.exists(sock):
    time.sleep(0.05)
try:
    for step in steps:
        with loaderd.Loader(sock, ds, 64, crop=32, seed=1, epochs=2, output="numpy",
                            return_meta=True) as it:
            it.open()
            sd = it.state_dict()
        spe = sd["steps_per_epoch"]
        sd.update(epoch=0, step_in_epoch=step, step=step)
        if "token" in sd:
            with loaderd.Loader(sock, ds, 64, crop=32, seed=1, epochs=2, output="numpy") as it:
                it.open(); it.seek(0, step); sd = it.state_dict()
        with loaderd.Loader(sock, ds, 64, crop=32, seed=1, epochs=2, output="numpy",
                            return_meta=True) as it:
            t0 = time.perf_counter()
            it.load_state_dict(sd)
            it.open()
            tl = time.perf_counter()
            b = next(iter(it))
            t1 = time.perf_counter()
            assert b.step == step, (b.step, step)
            st = it.stats()
            print(f"step {step}/{spe}: load_state_dict+attach {1e3*(tl-t0):.1f} ms, + first batch {1e3*(t1-t0):.1f} ms, "
                  f"published {st['published']}, samples decoded {st['samples']}")
finally:
    p.terminate(); p.wait(); shutil.rmtree(d, ignore_errors=True)
