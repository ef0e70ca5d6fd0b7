"""test_diagnose_field.py - loaderd.diagnose on scripts shaped like the field's
(scripts/field_train.py: everything inside main(), the model made before the DataLoader, maybe
nn.DataParallel; a preset transform class holding a Compose; a dataset class of the script's own
over a parser object or a CSV list; drop_last), a launcher that dies before any rank starts, and
the programs found the way a pip-installed client finds them. Skipped without torchvision."""
import csv
import importlib.util
import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision", reason="scripts/deps.sh installs python3-torchvision")

from conftest import REPO, dpk_index, run  # noqa: E402
from loaderd import _bins, analysis as A, diagnose as D, profile as P  # noqa: E402

SCRIPT = REPO / "python" / "tests" / "scripts" / "field_train.py"
NFILES = 36      # 4 classes x 9


@pytest.fixture(scope="module")
def tree(bins, workdir):
    d = workdir / "field"
    d.mkdir()
    run(bins / "dsgen", "imagefolder", d / "big", "--classes", 4, "--per-class", 9,
        "--min-side", 640, "--max-side", 800)
    # a CSV list of the same files, paths relative to the tree, labels from the folders
    rows = [(os.path.join(c, f), i) for i, c in enumerate(sorted(os.listdir(d / "big")))
            for f in sorted(os.listdir(d / "big" / c))]
    with open(d / "train.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["image", "label"])
        w.writerows(rows)
    return d


@pytest.fixture(scope="module")
def field():
    spec = importlib.util.spec_from_file_location("field_train", SCRIPT)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def env():
    return dict(os.environ, PYTHONPATH=str(REPO / "python"), PYTHONDONTWRITEBYTECODE="1",
                OMP_NUM_THREADS="1")


def diagnose(out, *cmd):
    return subprocess.run([sys.executable, "-m", "loaderd.diagnose", "--out", str(out),
                           "--swap-seconds", "1", "--"] + [str(c) for c in cmd], env=env(),
                          capture_output=True, text=True, timeout=240)


# ---- the facts read of the script's own objects (in this process) ----

def test_preset_holding_a_compose_is_walked(field):
    tf = field.ClassificationPresetTrain(64, ["ColorJitter", "RandomErasing"], "bicubic")
    unread = []
    got = P._transform_facts(tf, unread)
    assert [t["name"] for t in got] == ["RandomResizedCrop", "RandomHorizontalFlip",
                                        "ColorJitter", "PILToTensor", "ConvertImageDtype",
                                        "Normalize", "RandomErasing"]
    assert got[0]["size"] == [64.0, 64.0] and got[0]["interpolation"] == "bicubic"
    assert unread == []
    # nested wrappers: RandomApply inside a Compose inside a preset
    import torchvision.transforms as T
    tf.transforms = T.Compose([T.RandomApply([T.ColorJitter(0.4)], p=0.8), tf.transforms])
    names = [(t["name"], t.get("within")) for t in P._transform_facts(tf)]
    assert names[0] == ("ColorJitter", "RandomApply") and names[1][0] == "RandomResizedCrop"


def test_an_unreadable_transform_is_named_and_the_rest_kept(field, tree):
    class Broken:
        @property
        def transforms(self):
            raise RuntimeError("no access")
    ds = field.ImageDataset(str(tree / "big"), None)
    import torchvision.transforms as T
    ds.transform = T.Compose([T.RandomResizedCrop(32), Broken(), T.Normalize((0.5,), (0.5,))])
    f = P._dataset_facts(ds)
    assert [t["name"] for t in f["transforms"]] == ["RandomResizedCrop", "Broken", "Normalize"]
    assert "no access" in f["transforms"][1]["unreadable"]
    assert any("Broken" in u and "no access" in u for u in f["unread"])
    # the dataset's facts are all still there
    assert f["folder"]["total"] == NFILES and f["len"] == NFILES
    rep = {"dataloader": {"dataset": f}, "_folder_files": f["folder"]["files"]}
    assert "Broken (RuntimeError: no access)" in D.swap_plan(rep)


def test_file_lists_found_in_the_scripts_dataset_classes(field, tree):
    big = str(tree / "big")
    f = P._dataset_facts(field.ImageDataset(big, None))
    assert f["folder"]["from"] == "ImageDataset.parser.samples"
    assert f["folder"]["kind"] == "list" and f["folder"]["total"] == NFILES
    assert f["folder"]["classes"] == 4 and len(f["folder"]["files"]) == NFILES
    f = P._dataset_facts(field.CsvDataset(str(tree / "train.csv"), big, None))
    assert f["folder"]["from"] == "CsvDataset.rows" and f["folder"]["total"] == NFILES
    assert all(os.path.isabs(x) and os.path.exists(x) for x in f["folder"]["files"])

    class OnlyCsv(torch.utils.data.Dataset):   # the dataset names a CSV file, nothing more
        def __init__(self):
            self.img_dir, self.annotations = big, str(tree / "train.csv")
    f = P._dataset_facts(OnlyCsv())
    assert f["folder"]["from"].startswith("OnlyCsv.annotations (CSV ")
    assert f["folder"]["total"] == NFILES
    class Lazy(torch.utils.data.Dataset):   # a property is never called
        def __init__(self):
            self.items = [(os.path.join(big, "n00000001", f), 1)
                          for f in sorted(os.listdir(os.path.join(big, "n00000001")))]

        def __len__(self):
            return len(self.items)

        @property
        def samples(self):
            raise RuntimeError("would load everything")
    f = P._dataset_facts(Lazy())
    assert f["folder"]["from"] == "Lazy.items" and f["folder"]["total"] == 9
    assert "unread" not in f
    # nothing to find: said plainly, the rest of the facts kept
    f = P._dataset_facts(field.MemoryDataset(8, None))
    assert "folder" not in f and f["len"] == 8
    assert any("no (image file, label) list found in the MemoryDataset" in u
               for u in f["unread"])
    why = D.swap_plan({"dataloader": {"dataset": f}})
    assert "(a MemoryDataset) was not understood: file list: no (image file, label)" in why


def test_every_transform_a_swap_drops_is_named(field, tree):
    """The recipes' augmentations, other interpolation and a mixup collate_fn: what
    Loader(augment=) reproduces goes into the swap's spec (the jitter, the first policy, the
    erasing, the bicubic crop); the rest is named: the second and third policies (loaderd runs
    one) and the collate_fn; the plain preset: nothing."""
    extra = ["ColorJitter", "TrivialAugmentWide", "RandAugment", "AutoAugment",
             "RandomErasing"]
    tf = field.ClassificationPresetTrain(64, extra, "bicubic")
    ds = field.ImageDataset(str(tree / "big"), tf)
    dl = torch.utils.data.DataLoader(ds, batch_size=4, collate_fn=field.mixup_collate)
    facts = P._dataloader_facts(dl)
    lost = D.not_reproduced(facts)
    assert [x.split("(")[0].split(" ")[0] for x in lost] == \
        ["RandAugment", "AutoAugment", "collate_fn"], lost
    assert "num_ops=2" in lost[0] and "magnitude=9" in lost[0]
    assert "field_train.mixup_collate: mixup/cutmix on the batch" in lost[2]
    assert "loaderd.mixup.Mixup" in lost[2]
    spec, _ = D.augment_spec(facts)
    assert spec.startswith("interp=bicubic,antialias,brightness=0.4,contrast=0.4,"
                           "saturation=0.4"), spec
    assert "trivialaugment=31" in spec and "erase=0.25:" in spec
    import torchvision.transforms as T
    tf.transforms = T.Compose([T.RandomResizedCrop(64, scale=(0.35, 1)),
                               T.RandomHorizontalFlip(p=1.0), T.ToTensor()])
    lost = D.not_reproduced(P._dataloader_facts(torch.utils.data.DataLoader(ds)))
    assert lost == ["RandomResizedCrop scale=(0.35, 1) (loaderd's: (0.08, 1))",
                    "RandomHorizontalFlip p=1 (loaderd's: 0.5)"]
    plain = field.ClassificationPresetTrain(64)
    dl = torch.utils.data.DataLoader(field.ImageDataset(str(tree / "big"), plain))
    assert D.not_reproduced(P._dataloader_facts(dl)) == []


def test_no_dangling_below():
    rep = {"verdict": "loader-limited", "thresholds": {"lost_min": 0.05}, "batch": 8,
           "ranks": 1, "dataloader": {"dataset": {"class": "MemoryDataset"}},
           "dataloader_model": {"num_workers": 1, "free_cores_per_rank": 1, "load_ms_per_batch":
                                100.0, "rest_ms": 2.0, "step_ms": 100.0, "cores": 2,
                                "ranks_per_host": 1, "wait_ms": 50.0, "wait_median_ms": 50.0,
                                "startup_ms": None}}
    adv = A.dataloader_advice(rep)
    assert adv and not any("(below)" in a for a in adv)
    lines = D.swap_advice(rep, None)
    assert lines == ["loaderd: the swap to loaderd.Loader was not measured: the dataset (a "
                     "MemoryDataset) was not understood: no (image file, label) list found in "
                     "it"]


# ---- the scripts under python -m loaderd.diagnose ----

def test_parser_dataset_preset_dataparallel_drop_last(tmp_path, tree, bins):
    out = tmp_path / "diag"
    p = diagnose(out, sys.executable, SCRIPT, tree / "big", "--dataparallel", "--drop-last",
                 "--epochs", 2)
    assert p.returncode == 0, p.stderr[-3000:]
    rep = json.loads((out / "report.json").read_text())
    assert rep["verdict"] == "loader-limited", p.stdout
    # DataParallel, made before the DataLoader inside main() and gone before its record
    assert rep["dataparallel"]["module"] == "Sequential"
    assert rep["dataparallel"]["params"] == 48 * 4 + 4
    ds = rep["dataloader"]["dataset"]
    assert [t["name"] for t in ds["transforms"]] == ["RandomResizedCrop", "RandomHorizontalFlip",
                                                     "PILToTensor", "ConvertImageDtype",
                                                     "Normalize"]
    assert "unread" not in ds and ds["folder"]["from"] == "ImageDataset.parser.samples"
    # the swap measured on the listed files; the lines: pack the list, Loader with drop_last
    sw = rep["swap"]
    assert sw["measured"] and sw["files"] == NFILES, sw
    assert sw["lines"][0].startswith("once: python -m loaderd.pack_list %s " %
                                     (out / "files.tsv"))
    assert any('tail="drop_last"' in x for x in sw["lines"])
    assert "(below)" not in p.stdout
    # the list packs, with the script's labels, and a Loader over it steps as the DataLoader
    dpk = tmp_path / "field.dpk"
    q = subprocess.run([sys.executable, "-m", "loaderd.pack_list", str(out / "files.tsv"),
                        str(dpk)], env=dict(env(), LOADERD_BIN_DIR=str(bins)),
                       capture_output=True, text=True, timeout=120)
    assert q.returncode == 0 and "labels as listed" in q.stdout, q.stderr
    idx, _ = dpk_index(dpk)
    assert sorted(lab for _, _, lab in idx) == sorted([i // 9 for i in range(NFILES)])
    steps = [ln for ln in p.stdout.splitlines() if ln.startswith("loss ")]
    assert len(steps) == 2 * (NFILES // 8)


def test_csv_dataset_swap_measured(tmp_path, tree):
    out = tmp_path / "diag"
    p = diagnose(out, sys.executable, SCRIPT, tree / "big", "--dataset", "csv", "--csv",
                 tree / "train.csv")
    assert p.returncode == 0, p.stderr[-3000:]
    rep = json.loads((out / "report.json").read_text())
    assert rep["dataloader"]["dataset"]["folder"]["from"] == "CsvDataset.rows"
    assert rep["swap"]["measured"] and rep["swap"]["files"] == NFILES
    lines = (out / "files.tsv").read_text().splitlines()
    assert len(lines) == NFILES and lines[0].endswith("\t0") and lines[-1].endswith("\t3")


# ---- a launcher that dies first; a command that fails ----

def test_launcher_dying_before_any_rank(tmp_path):
    p = diagnose(tmp_path / "d", sys.executable, "-m", "torch.distributed.run",
                 "--nproc_per_node", 1, "--no-such-option", SCRIPT, "x")
    assert p.returncode == 2, p.stderr[-2000:]
    assert "the command (torch.distributed.run) exited with status 2 before any rank " \
           "started" in p.stderr
    assert "does it iterate" not in p.stderr
    assert "  | " in p.stderr and "unrecognized arguments: --no-such-option" in \
        p.stderr.split("before any rank started")[1]


def test_command_failing_without_a_record(tmp_path):
    p = diagnose(tmp_path / "d", sys.executable, "-c",
                 "import sys; print('boom: no such file', file=sys.stderr); sys.exit(3)")
    assert p.returncode == 3
    msg = p.stderr.split("loaderd.diagnose: ")[-1]
    assert "exited with status 3 and left no record" in msg and "  | boom: no such file" in msg


# ---- the programs of an installed loaderd ----

def test_find_bin_installed_and_the_service(tmp_path, monkeypatch):
    monkeypatch.delenv(_bins.ENV, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("BUILD", "no-such-build")     # not the checkout's build/bin
    pre, sbin = tmp_path / "prefix", tmp_path / "svc" / "sbin"
    for d in (pre / "bin", sbin):
        d.mkdir(parents=True)
    unit = tmp_path / "loaderd.service"
    unit.write_text("[Service]\n#ExecStart=/nowhere/loaderd\nExecStart=%s/loaderd --socket "
                    "/run/loaderd/loaderd.sock\n" % sbin)
    for p in (pre / "bin" / "dpack", sbin / "loaderd", sbin / "dpack"):
        p.write_text("#!/bin/sh\n")
        p.chmod(0o755)
    # make install's PREFIX/bin first, then the service's directory
    assert _bins.find_bin("dpack", (str(pre),), (str(unit),)) == str(pre / "bin" / "dpack")
    assert _bins.find_bin("loaderd", (str(pre),), (str(unit),)) == str(sbin / "loaderd")
    assert _bins.find_bin("loaderd", (str(pre),), ()) is None
    monkeypatch.setenv(_bins.ENV, str(sbin))
    assert _bins.find_bin("dpack", (str(pre),), ()) == str(sbin / "dpack")
    monkeypatch.delenv(_bins.ENV)
    msg = _bins.not_found(["dpack", "loaderd"])
    assert msg.startswith("dpack/loaderd not found") and "$LOADERD_BIN_DIR (unset)" in msg
    assert "make install" in msg and "LOADERD_BIN_DIR=$HOME/loaderd/build/bin" in msg
