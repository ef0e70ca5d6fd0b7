"""loaderd.diagnose and loaderd.profile on constructed records: ranks' step tables in, the
trainer's report, loaderd's side and advice in numbers out; the exposed allreduce from bucket
timings; and a Loader with profile=True against a real loaderd (numpy output: no torch needed)."""
import json
import xml.dom.minidom

import pytest

from loaderd import diagnose as D
from loaderd import profile as P

MS = 1000000


def record(rank, world=2, steps=40, data=0, compute=10, comm=0, batch=16, ld=None, t0=0,
           buckets=0):
    """A rank's record as profile.Recorder writes it: phases in ms per step."""
    period = (data + compute + comm) * MS
    st = [[s, t0 + s * period, data * MS, 0, compute * MS, comm * MS, 0, batch, comm * MS,
           buckets] for s in range(steps)]
    r = {"version": 1, "rank": rank, "world": world, "pid": 100 + rank, "steps": st,
         "batch": batch, "crop": 224, "device": "cpu", "backend": "gloo" if world > 1 else None,
         "params": 1 << 20, "bucket_mb": 25.0, "ddp": world > 1, "job": "j"}
    if ld:
        r["loaderd"] = ld
    return r


def ld_side(workers=1, fill_ms=5.0, samples=640, wall_s=4.0):
    return {"workers": workers, "fill_ns": int(fill_ms * MS * samples), "io_ns": 0,
            "decode_ns": int(0.9 * fill_ms * MS * samples), "samples": samples,
            "wall_ns": int(wall_s * 1e9), "ranks_attached": 1}


def test_loader_limited_advice_in_workers():
    # 16 samples per 10 ms of compute = 1600/s wanted; one worker at 5 ms per sample = 200/s
    recs = [record(0, world=1, data=70, compute=10, ld=ld_side())]
    rep = D.analyse(recs)
    assert rep["verdict"] == "loader-limited"
    assert rep["schema"] == "loaderd-trainer-report/1"
    assert rep["warmup"] == 4 and rep["steps_compared"] == 36
    assert rep["causes"]["loader"] == pytest.approx(70 / 80)
    ld = rep["loaderd"]
    assert ld["fill_ms_per_sample"] == pytest.approx(5.0)
    assert ld["capacity_per_s"] == pytest.approx(200.0)
    assert ld["busy"] == pytest.approx(640 * 0.005 / 4.0)
    # 1600/s at 90% busy, 200/s per worker: ceil(8.9) = 9
    assert any("loaderd --workers 9" in a for a in rep["advice"]), rep["advice"]


def test_compute_limited_headroom():
    recs = [record(0, world=1, data=0, compute=50, ld=ld_side(workers=2, fill_ms=1.0))]
    rep = D.analyse(recs)
    assert rep["verdict"] == "compute-limited"
    assert rep["loaderd"]["capacity_per_s"] == pytest.approx(2000.0)
    assert any("headroom" in a and "2000 samples/s" in a for a in rep["advice"])


def test_two_ranks_communication_limited_and_named():
    recs = [record(r, comm=6, compute=10, buckets=1) for r in (0, 1)]
    rep = D.analyse(recs)
    assert rep["verdict"] == "communication-limited"
    assert rep["rank_ids"] == [0, 1] and rep["ranks"] == 2
    assert rep["buckets"] == 1 and rep["backend"] == "gloo"
    # 6 ms exposed of 16: batch x4 brings it to 6 / (4 * 10 + 6) = 13%, x8 to 7%
    assert any("batch 128 per rank" in a for a in rep["advice"]), rep["advice"]
    assert any("bucket_cap_mb=1" in a for a in rep["advice"]), rep["advice"]   # 4 MiB / 4


def test_straggler_named_by_rank_id():
    recs = [record(0, compute=10, comm=20), record(1, compute=30, comm=0)]
    rep = D.analyse(recs)
    assert rep["verdict"] == "straggler-limited"
    assert rep["rank_ids"][rep["straggler"]["slow_rank"]] == 1
    assert "rank 1 computes 3.00x" in rep["why"][0]


def test_steps_in_common_and_one_record_per_rank():
    # rank 1 has an extra, shorter evaluation loop's record and started 3 steps late
    a = record(0, steps=40)
    b = record(1, steps=40)
    b["steps"] = b["steps"][3:]
    ev = record(1, steps=5)
    rep = D.analyse([a, b, ev])
    assert rep["steps"] == 37 and rep["steps_compared"] == 37 - D.warmup_for(37)


def test_outputs_and_last_line(tmp_path):
    rep = D.analyse([record(r, data=1, compute=10, ld=ld_side()) for r in (0, 1)])
    text = D.write_outputs(rep, str(tmp_path))
    last = text.rstrip("\n").splitlines()[-1]
    assert last == "loaderd.diagnose: samples_per_s=%.1f data_wait=%.3f verdict=%s" % (
        rep["samples_per_s"], rep["shares"]["data"], rep["verdict"])
    r = json.loads((tmp_path / "report.json").read_text())
    assert r["verdict"] == rep["verdict"] and "_ranks" not in r
    svg = xml.dom.minidom.parse(str(tmp_path / "timeline.svg"))
    rows = [g.getAttribute("data-rank") for g in svg.getElementsByTagName("g")
            if g.getAttribute("class") == "rank-row"]
    assert rows == ["0", "1"]
    assert (tmp_path / "report.txt").read_text() == text


def test_exposed_allreduce_from_bucket_times():
    """Buckets launched during backward; what is left after the last launch is exposed."""
    rec = P.Recorder.__new__(P.Recorder)
    rec.steps, rec.dropped, rec.pending_copy = [], 0, []
    rec.st0, rec.t_snap = None, 0
    t = 1000 * MS
    with P._comm_lock:
        P._comm[:] = [(t + 3 * MS, t + 5 * MS, 0), (t + 6 * MS, t + 9 * MS, 0),
                      (t + 8 * MS, t + 12 * MS, 0)]
    rec.end(7, t, 2 * MS, 16, None, t + 14 * MS)
    step, start, data, copy, compute, comm, opt, n, busy, nb = rec.steps[0]
    assert (step, data, comm, nb) == (7, 2 * MS, 4 * MS, 3)     # 12 - 8
    assert compute == 14 * MS - 2 * MS - 4 * MS and opt == 0 and copy == 0
    assert busy == (2 + 3 + 4) * MS
    assert P._comm == []


def test_loader_profile_records_steps(daemon, imagefolder, tmp_path, monkeypatch):
    import loaderd
    monkeypatch.setenv(P.ENV_DIR, str(tmp_path))
    with loaderd.Loader(daemon.sock, imagefolder.path, 4, crop=16, output="numpy",
                        profile=True, epochs=2) as it:
        n = 0
        for _ in range(2):
            for _b in it:
                n += 1
    files = list(tmp_path.glob("rank-0-*.json"))
    assert len(files) == 1
    r = json.loads(files[0].read_text())
    # each loop's last batch ends at the loop's end: every step is recorded
    assert len(r["steps"]) == n == 2 * 12
    assert [s[0] for s in r["steps"]] == list(range(n))
    assert all(s[2] >= 0 and s[4] >= 0 and s[7] == 4 for s in r["steps"])
    assert r["loaderd"]["workers"] == 2 and r["loaderd"]["samples"] > 0
    assert r["loaderd"]["fill_ns"] > 0
    rep = D.analyse([r])
    assert rep["ranks"] == 1 and rep["batch"] == 4


def test_profile_off_by_default(daemon, imagefolder, monkeypatch):
    import loaderd
    monkeypatch.delenv(P.ENV, raising=False)
    with loaderd.Loader(daemon.sock, imagefolder.path, 4, crop=16, output="numpy") as it:
        assert it._prof is None
    monkeypatch.setenv(P.ENV, "1")
    with loaderd.Loader(daemon.sock, imagefolder.path, 4, crop=16, output="numpy") as it:
        assert it._prof is not None


def test_profile_report_without_distributed(daemon, imagefolder, monkeypatch):
    import loaderd
    monkeypatch.delenv(P.ENV_DIR, raising=False)
    with loaderd.Loader(daemon.sock, imagefolder.path, 4, crop=16, output="numpy",
                        profile=True, epochs=1) as it:
        for _ in it:
            pass
        rep = it.profile_report()
    assert rep["schema"] == "loaderd-trainer-report/1" and rep["ranks"] == 1
    assert rep["verdict"] in ("loader-limited", "compute-limited")
    assert rep["loaderd"]["workers"] == 2
    with loaderd.Loader(daemon.sock, imagefolder.path, 4, crop=16, output="numpy") as it:
        with pytest.raises(ValueError):
            it.profile_report()


def test_device_cpu_keeps_views_and_copy(daemon, imagefolder):
    torch = pytest.importorskip("torch")
    import loaderd
    with loaderd.Loader(daemon.sock, imagefolder.path, 4, crop=16, device="cpu",
                        copy=True) as it:
        images, labels = next(iter(it))
        assert images.device == torch.device("cpu") and images.shape == (4, 16, 16, 3)
        assert not it._held   # copy=True: the slot went back at once


def dl_record(rank=0, steps=40, data=30, compute=10, workers=0, cores=4, persistent=False,
              epoch_starts=None, loop="train", job="dataloader-1", startup=0):
    """A torch DataLoader loop's record as profile.DLRecorder writes it."""
    r = record(rank, world=1, steps=steps, data=data, compute=compute, batch=16)
    for s in (epoch_starts or [])[1:]:
        r["steps"][s][2] += startup * MS
    r.update({"job": job, "loop": loop, "source": "torch.utils.data.DataLoader", "cores": cores,
              "epoch_starts": epoch_starts or [0], "host": "h",
              "dataloader": {"num_workers": workers, "pin_memory": False,
                             "persistent_workers": persistent, "prefetch_factor": 2,
                             "batch_size": 16, "dataset": {"class": "TensorDataset"}}})
    return r


def test_dataloader_num_workers_predicted():
    # num_workers=0: a batch takes 30 ms of one core, the rest 10 ms; 3 free cores: 3 workers
    rep = D.analyse([dl_record(cores=4)])
    assert rep["verdict"] == "loader-limited"
    m = rep["dataloader_model"]
    assert m["load_ms_per_batch"] == pytest.approx(30) and m["rest_ms"] == pytest.approx(10)
    assert m["free_cores_per_rank"] == 3
    assert D.predict_step(m, 0) == pytest.approx(40) and D.predict_step(m, 2) == \
        pytest.approx(15) and D.predict_step(m, 3) == pytest.approx(10)
    assert any("DataLoader(num_workers=3): about 10.0 ms per step, 1600 samples/s (4.00x)" in a
               for a in rep["advice"]), rep["advice"]
    # 2 cores: 1 free, the 3 workers it would take are not there
    rep = D.analyse([dl_record(cores=2)])
    assert any("DataLoader(num_workers=1): about 30.0 ms per step" in a and
               "3 workers would keep up, but the cores are not there" in a
               for a in rep["advice"]), rep["advice"]
    # 1 core: none free, more workers would share the rank's
    rep = D.analyse([dl_record(cores=1)])
    assert rep["dataloader_model"]["free_cores_per_rank"] == 0
    assert any("no faster (about 40.0 ms per step with 1)" in a for a in rep["advice"])


def test_dataloader_workers_startup_and_prefetch():
    # 2 workers, the loop waits 3 ms of a 13 ms step; each epoch's first batch 200 ms more
    rep = D.analyse([dl_record(data=3, compute=10, workers=2, epoch_starts=[0, 10, 20, 30],
                               startup=200)])
    m = rep["dataloader_model"]
    assert m["startup_ms"] == pytest.approx(200) and m["num_workers"] == 2
    assert any(a.startswith("persistent_workers: the workers start again at every epoch, 200 ms")
               for a in rep["advice"]), rep["advice"]
    rep = D.analyse([dl_record(data=3, compute=10, workers=2, persistent=True,
                               epoch_starts=[0, 10, 20, 30], startup=200)])
    assert not any(a.startswith("persistent_workers") for a in rep["advice"])
    # every step waits 3 ms: the workers are the limit, not the queue's depth
    assert not any(a.startswith("prefetch_factor") for a in rep["advice"])
    # one step in 4 waits 20 ms, the others none: bursts, a deeper queue hides them
    r = dl_record(data=0, compute=10, workers=2, persistent=True)
    for s in r["steps"][::4]:
        s[2] = 20 * MS
    rep = D.analyse([r])
    assert rep["verdict"] == "loader-limited"
    assert any(a.startswith("prefetch_factor: the waits come in bursts (median 0.0 ms, mean "
                            "5.0 ms per step)") and "prefetch_factor=4): about 10.0 ms per step"
               in a for a in rep["advice"]), rep["advice"]


def test_training_loop_chosen_evaluation_apart():
    train = dl_record(steps=20, loop="train")
    ev = dl_record(steps=30, loop="eval", job="dataloader-2", data=5, compute=5)
    rep = D.analyse([ev, train])
    assert rep["steps"] == 20 and rep["loop"] == "train"
    assert [(o["job"], o["loop"], o["steps"]) for o in rep["other_loops"]] == \
        [("dataloader-2", "eval", 30)]
    assert rep["other_loops"][0]["data_share"] == pytest.approx(0.5)
    assert "evaluation loop dataloader-2: 30 steps over 1 rank, 10.0 ms per step, data wait " \
        "50%" in D.render_text(rep)


def test_swap_plan_maps_transforms_or_says_why():
    def rep_of(names, files=("a/x.JPEG", "b/y.jpg")):
        tf = [{"name": n, "size": [160, 160]} if "Crop" in n else {"name": n} for n in names]
        if "Normalize" in names:
            tf[names.index("Normalize")].update(mean=[0.5] * 3, std=[0.25] * 3)
        return {"dataloader": {"dataset": {"class": "ImageFolder", "folder": {
            "root": "/d/train", "classes": 2}, "transforms": tf}}, "_folder_files": list(files)}
    p = D.swap_plan(rep_of(["RandomResizedCrop", "RandomHorizontalFlip", "ToTensor",
                            "Normalize"]))
    assert (p["transforms"], p["crop"], p["normalize"]) == ("train", [160, 160],
                                                            ([0.5] * 3, [0.25] * 3))
    p = D.swap_plan(rep_of(["Resize", "CenterCrop", "ToTensor"]))
    assert (p["transforms"], p["normalize"]) == ("eval", None)
    p = D.swap_plan(rep_of(["RandomResizedCrop", "ToTensor"]))
    assert p["transforms"] == ["random_resized_crop"]
    p = D.swap_plan(rep_of(["RandomResizedCrop", "ColorJitter"]))
    assert [x.split("(")[0] for x in p["not_reproduced"]] == ["ColorJitter"]
    assert "not JPEGs" in D.swap_plan(rep_of(["RandomResizedCrop"], files=("a/x.png",)))
    assert "not fixed" in D.swap_plan(rep_of(["Resize", "ToTensor"]))
    r = rep_of(["RandomResizedCrop"])
    r["dataloader"]["dataset"] = {"class": "TensorDataset"}
    why = D.swap_plan(r)
    assert "(a TensorDataset) was not understood: no (image file, label) list" in why
    assert "not an ImageFolder" not in why


def test_predict_swap_cpu_budget():
    """The swap's step: the largest of the rank's own work, the batch's decode over the workers,
    and the host's CPU demand (ranks' own CPU + loaderd's CPU for their batches) over its
    cores; each term the binding one in turn."""
    def rep(rest, cpu, cores=2, ranks=1):
        return {"batch": 10, "ranks": ranks, "dataloader_model": {
            "rest_ms": rest, "rest_cpu_ms": cpu, "cores": cores, "ranks_per_host": ranks}}
    meas = {"batch": 10, "workers": 2, "fill_ms_per_sample": 4.0, "cpu_ms_per_sample": 4.0}
    # CPU: (6 + 1 + 10 x 4) / 2 = 23.5 ms > rest 7, > decode 40 / 2 = 20
    rate, step = D.predict_swap(rep(6.0, 6.0), meas, 1.0)
    assert step == pytest.approx(23.5) and rate == pytest.approx(10 / 0.0235)
    # the rank's own work binds (compute on a device: little CPU)
    _, step = D.predict_swap(rep(60.0, 2.0), meas, 1.0)
    assert step == pytest.approx(61.0)
    # decode over one worker binds on a many-core host
    _, step = D.predict_swap(rep(6.0, 6.0, cores=16), dict(meas, workers=1), 1.0)
    assert step == pytest.approx(40.0)
    # two ranks on the host share its cores: (2 x (6 + 1 + 40)) / 4
    _, step = D.predict_swap(rep(6.0, 6.0, cores=4, ranks=2), dict(meas, workers=4), 1.0)
    assert step == pytest.approx(23.5)
    # no CPU measure: the wall times stand in (worker time per sample, the rest's wall time)
    _, step = D.predict_swap(rep(6.0, None), dict(meas, fill_ms_per_sample=9.0,
                                                  cpu_ms_per_sample=None), 1.0)
    assert step == pytest.approx((7 + 90) / 2)
    # a shared host: loaderd's workers got half a core each (4 ms CPU in 8 ms of filling): the
    # two cores count as one
    _, step = D.predict_swap(rep(6.0, 6.0), dict(meas, fill_ms_per_sample=8.0), 1.0)
    assert step == pytest.approx(47.0)
    # a DataLoader with workers: its shared-memory hand-over (3 ms a batch) leaves the rank's
    # own time and CPU after the swap: (6 - 3 + 1 + 40) / 2; at most half of them
    _, step = D.predict_swap(rep(6.0, 6.0), dict(meas, handover_ms=3.0), 1.0)
    assert step == pytest.approx(22.0)
    _, step = D.predict_swap(rep(60.0, 2.0), dict(meas, handover_ms=50.0), 1.0)
    assert step == pytest.approx(31.0)


def test_swap_keeps_the_augmentations_loaderd_reproduces():
    """A recipe's ColorJitter, RandAugment, RandomErasing and bicubic crop become the swap's
    augment= (and parse as the Loader will); a second policy, a jitter after a policy and
    anything inside RandomApply are still named as not reproduced."""
    from loaderd import augment_map as AM
    tf = [{"name": "RandomResizedCrop", "size": [224, 224],
           "interpolation": "InterpolationMode.BICUBIC"},
          {"name": "RandomHorizontalFlip", "p": 0.5},
          {"name": "ColorJitter", "brightness": [0.6, 1.4], "contrast": [0.6, 1.4],
           "saturation": [0.6, 1.4]},
          {"name": "RandAugment", "num_ops": 2, "magnitude": 9},
          {"name": "AutoAugment", "policy": "AutoAugmentPolicy.IMAGENET"},
          {"name": "ColorJitter", "hue": [-0.1, 0.1]},
          {"name": "GaussianBlur", "within": "RandomApply"},
          {"name": "ToTensor"},
          {"name": "Normalize", "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]},
          {"name": "RandomErasing", "p": 0.25, "scale": [0.02, 0.33], "ratio": [0.3, 3.3],
           "value": 0}]
    f = {"dataset": {"transforms": tf}}
    spec, done = D.augment_spec(f)
    assert spec == ("interp=bicubic,antialias,brightness=0.4,contrast=0.4,saturation=0.4,"
                    "randaugment=2:9:31,erase=0.25:0.02:0.33:0.3:3.3,erase_value=124:116:104")
    AM.parse(spec)  # the Loader takes it
    lost = D.not_reproduced(f)
    assert [x.split("(")[0] for x in lost] == ["AutoAugment", "ColorJitter", "GaussianBlur"]
    assert "inside RandomApply" in lost[2]
    # the swap's Loader line carries it
    plan = {"transforms": "train", "crop": [224, 224], "normalize": None, "augment": spec,
            "root": "/d/train", "kind": "folder"}
    assert spec in repr(plan["augment"])
    # a jitter with no readable ranges is not claimed
    assert D.augment_spec({"dataset": {"transforms": [{"name": "ColorJitter"}]}}) == ("", [])
