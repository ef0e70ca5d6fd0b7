"""test_diagnose_dataloader.py - python -m loaderd.diagnose around an unchanged script that
iterates torch.utils.data.DataLoader (scripts/train_dataloader.py: torchvision ImageFolder of
JPEGs made by dsgen, RandomResizedCrop, an evaluation loop under no_grad): the verdict for a
loader-limited loop (num_workers=0, 640-800 px JPEGs, a tiny model) and a compute-limited one
(small images, three convolutions), the evaluation loop reported apart, the DataLoader's knobs
read, two ranks under torchrun with DDP over gloo, nn.DataParallel on a host without GPUs, a
script that dies of an exception, and the script's losses unchanged by the hook. Skipped
without torchvision (scripts/deps.sh installs python3-torchvision)."""
import json
import os
import re
import subprocess
import sys
import xml.dom.minidom

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision", reason="scripts/deps.sh installs python3-torchvision")

from conftest import REPO, run  # noqa: E402

SCRIPT = REPO / "python" / "tests" / "scripts" / "train_dataloader.py"
LAST = re.compile(r"^loaderd\.diagnose: samples_per_s=[0-9.]+ data_wait=[0-9.]+ verdict=(\S+)"
                  r"( with_loaderd=[0-9.]+)?$")


@pytest.fixture(scope="module")
def trees(bins, workdir):
    d = workdir / "dl"
    d.mkdir()
    run(bins / "dsgen", "imagefolder", d / "big", "--classes", 4, "--per-class", 8,
        "--min-side", 640, "--max-side", 800)
    run(bins / "dsgen", "imagefolder", d / "small", "--classes", 4, "--per-class", 24,
        "--min-side", 40, "--max-side", 64)
    return d


def env():
    return dict(os.environ, PYTHONPATH=str(REPO / "python"), PYTHONDONTWRITEBYTECODE="1",
                OMP_NUM_THREADS="1")


def diagnose(tmp_path, *cmd, rc=0):
    out = tmp_path / "diag"
    for _ in range(2):
        p = subprocess.run([sys.executable, "-m", "loaderd.diagnose", "--out", str(out),
                        "--swap-seconds", "1", "--"] +
                           [str(c) for c in cmd], env=env(), capture_output=True, text=True,
                           timeout=240)
        # torchrun's own rendezvous store can drop its connection on a loaded host: once more
        if p.returncode == 0 or "RendezvousConnectionError" not in p.stderr:
            break
    assert p.returncode == rc, p.stderr[-3000:]
    m = LAST.match(p.stdout.strip().splitlines()[-1])
    assert m, p.stdout[-2000:]
    rep = json.loads((out / "report.json").read_text())
    xml.dom.minidom.parse(str(out / "timeline.svg"))
    assert rep["schema"] == "loaderd-trainer-report/1" and rep["verdict"] == m.group(1)
    return rep, p.stdout


def train(*args):
    return [sys.executable, SCRIPT] + list(args)


def test_loader_limited_dataloader_with_an_evaluation_loop(tmp_path, trees):
    rep, text = diagnose(tmp_path, *train(trees / "big", "--epochs", 2, "--eval"))
    assert rep["verdict"] == "loader-limited", text
    assert rep["input"] == "torch.utils.data.DataLoader" and rep["loop"] == "train"
    f = rep["dataloader"]
    assert f["num_workers"] == 0 and f["batch_size"] == 8 and f["pin_memory"] is False
    assert f["dataset"]["class"] == "ImageFolder" and f["dataset"]["len"] == 32
    assert [t["name"] for t in f["dataset"]["transforms"]][:2] == \
        ["RandomResizedCrop", "RandomHorizontalFlip"]
    # the training loop's 8 steps; the evaluation loop (no backward) apart
    assert rep["steps"] == 8 and rep["ranks"] == 1 and rep["loaderd"] is None
    ev = rep["other_loops"]
    assert len(ev) == 1 and ev[0]["loop"] == "eval" and ev[0]["steps"] == 8
    assert "evaluation loop dataloader-2: 8 steps" in text
    m = rep["dataloader_model"]
    assert m["load_ms_per_batch"] > m["rest_ms"] > 0
    assert any(a.startswith("num_workers: 0 now") for a in rep["advice"]), rep["advice"]
    # the swap: loaderd measured on the script's own files, the prediction on the last line
    sw = rep["swap"]
    assert sw["measured"] and sw["files"] == 32 and sw["workers"] >= 1
    assert sw["transforms"] == "train" and sw["crop"] == [224, 224]
    assert sw["fill_ms_per_sample"] > 0 and rep["with_loaderd"] == sw["predicted_samples_per_s"]
    assert text.strip().endswith("with_loaderd=%.1f" % rep["with_loaderd"])
    at = [i for i, ln in enumerate(SCRIPT.read_text().splitlines(), 1)
          if "train = torch.utils.data.DataLoader(" in ln]
    line = [x for x in sw["lines"] if x.startswith("train_dataloader.py:")]
    assert line[0] == "train_dataloader.py:%d: train = torch.utils.data.DataLoader(" % at[0]
    assert "train = loaderd.Loader(None, " in sw["lines"][2] and "crop=224" in sw["lines"][2]


def test_compute_limited_dataloader(tmp_path, trees):
    # one worker loads a batch in about a fifth of the step's compute: it keeps ahead even on
    # a shared core
    rep, text = diagnose(tmp_path, *train(trees / "small", "--model", "conv", "--crop", 32,
                                          "--batch", 16, "--steps", 8, "--workers", 1))
    assert rep["verdict"] == "compute-limited", text
    assert rep["shares"]["data"] < 0.1 and rep["other_loops"] == []
    assert any("the loader keeps up" in a for a in rep["advice"])


def test_workers_pin_memory_persistent_read(tmp_path, trees):
    rep, _ = diagnose(tmp_path, *train(trees / "small", "--workers", 2, "--pin-memory",
                                       "--persistent-workers", "--epochs", 2, "--crop", 32))
    f = rep["dataloader"]
    assert (f["num_workers"], f["pin_memory"], f["persistent_workers"]) == (2, True, True)
    assert rep["steps"] == 24 and rep["dataloader_model"]["num_workers"] == 2


def test_losses_unchanged_by_the_hook(tmp_path, trees):
    args = train(trees / "small", "--crop", 32, "--steps", 6, "--seed", 5)
    plain = subprocess.run([str(a) for a in args], env=env(), capture_output=True, text=True,
                           timeout=120, check=True).stdout
    _, text = diagnose(tmp_path, *args)
    losses = [ln for ln in plain.splitlines() if ln.startswith("loss ")]
    assert len(losses) == 6
    assert [ln for ln in text.splitlines() if ln.startswith("loss ")] == losses


def test_ddp_two_ranks_torchrun_gloo(tmp_path, trees):
    rep, text = diagnose(tmp_path, sys.executable, "-m", "torch.distributed.run", "--standalone",
                         "--nproc_per_node", 2, "--redirects", 1, "--tee", 1,
                         "--log_dir", tmp_path / "logs", SCRIPT, trees / "small", "--ddp",
                         "--model", "conv", "--crop", 16, "--steps", 10)
    assert rep["ranks"] == 2 and rep["rank_ids"] == [0, 1] and rep["backend"] == "gloo"
    assert (rep["buckets"] or 0) >= 1 and rep["params"] > 0
    assert "  rank 1: " in text


def test_dataparallel_on_a_host_without_gpus(tmp_path, trees):
    rep, text = diagnose(tmp_path, *train(trees / "small", "--dataparallel", "--crop", 32,
                                          "--steps", 6))
    dp = rep["dataparallel"]
    assert dp["module"] == "Sequential" and dp["active"] is False and dp["device_ids"] == []
    assert dp["params"] == 3 * 4 * 4 * 4 + 4
    assert "nn.DataParallel(Sequential)" in text
    assert any("DistributedDataParallel(model.to(rank)" in a for a in rep["advice"])


def test_script_exiting_by_exception(tmp_path, trees):
    rep, text = diagnose(tmp_path, *train(trees / "big", "--epochs", 3, "--exit-by-exception"),
                         rc=1)
    assert "with_loaderd" in text
    # 12 steps ran; the 12th raised inside its step: 11 have an end
    assert rep["steps"] == 11 and rep["verdict"] == "loader-limited"
