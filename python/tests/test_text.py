"""test_text.py - image + caption + json shards (tests/wds_text.py: non-UTF-8, empty and
maximum-size captions, one past the maximum, a missing .txt, a duplicated key) packed with
dpack --field and served with their aux fields: every caption byte-exact with its sample across
2 ranks, and again after a resume from state_dict(); the refusals named by dpack."""
import json
import subprocess
import sys

import pytest

np = pytest.importorskip("numpy", reason="the Python client tests need numpy (pip install numpy)")

import loaderd  # noqa: E402
from conftest import BIN, REPO  # noqa: E402


@pytest.fixture(scope="module")
def textset(bins, tmp_path_factory):
    d = tmp_path_factory.mktemp("text")
    subprocess.run([str(BIN / "dsgen"), "imagefolder", str(d / "tree"), "--classes", "2",
                    "--per-class", "8", "--min-side", "40", "--max-side", "90"], check=True,
                   capture_output=True)
    subprocess.run([sys.executable, str(REPO / "tests" / "wds_text.py"), str(d / "tree"), str(d)],
                   check=True)
    p = subprocess.run([str(BIN / "dpack"), "pack", "--no-labels", "--field", "txt=txt",
                        "--field", "json=json", "--field", "url=json:url",
                        str(d / "shard-{000..001}.tar"), str(d / "text.dpk")],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    expect = json.load(open(d / "expect.json"))
    for key, why in expect["refuse"].items():   # each refusal names the sample and why
        assert key.split()[0] in p.stderr and why in p.stderr, (key, why, p.stderr)
    keys = list(expect["keep"])
    caps = [expect["keep"][k].encode("latin-1") for k in keys]
    return d / "text.dpk", keys, caps


def epoch(daemon, path, job, world, rank, n=None, sd=None):
    with loaderd.Loader(daemon.sock, path, 3, crop=32, output="numpy", job=job, epochs=1,
                        seed=7, rank=rank, world_size=world, return_meta=True,
                        fields=["txt", "json", "url"], fields_bytes=True) as it:
        if sd is not None:
            it.load_state_dict(sd)
        out = []
        for b in it:
            out += [(int(b.ids[j]), b.fields["txt"][j], b.fields["json"][j], b.fields["url"][j])
                    for j in range(b.count)]
            if n is not None and len(out) >= n:
                return out, it.state_dict()
    return out, None


def check(rows, keys, caps):
    for sid, txt, js, url in rows:
        assert txt == caps[sid], (sid, keys[sid])   # byte-exact, whatever the bytes
        assert url == ("http://e/" + keys[sid]).encode()
        assert json.loads(js)["url"] == url.decode()


def test_text_two_ranks_and_resume(daemon, textset):
    path, keys, caps = textset
    assert len(caps[0]) == 0 and len(max(caps, key=len)) == 65536
    assert any(c.startswith(b"\xff\xfe") for c in caps)
    seen = []
    for rank in range(2):
        rows, _ = epoch(daemon, path, "text2", 2, rank)
        check(rows, keys, caps)
        seen += [r[0] for r in rows]
        # each rank resumed after its first step: the rest of its epoch, captions included
        head, sd = epoch(daemon, path, "text2h", 2, rank, n=3)
        tail, _ = epoch(daemon, path, "text2t", 2, rank, sd=dict(sd, job=None))
        assert head + tail == rows
    assert set(seen) == set(range(len(keys)))
    # resume: the rest of rank 0's epoch after 1 step equals the uninterrupted run's
    full, _ = epoch(daemon, path, "textf", 1, 0)
    head, sd = epoch(daemon, path, "texth", 1, 0, n=3)
    tail, _ = epoch(daemon, path, "textt", 1, 0, sd=dict(sd, job=None))
    assert head + tail == full
    check(full, keys, caps)


def test_text_yields_texts(daemon, textset):
    path, keys, caps = textset
    with loaderd.Loader(daemon.sock, path, 4, crop=32, output="numpy", job="texty", epochs=1,
                        seed=1, fields="txt") as it:
        images, texts = next(iter(it))
        assert images.shape == (4, 32, 32, 3) and len(texts) == 4
        assert all(isinstance(t, (str, bytes)) for t in texts)
    # copy=True: the fields come with the copy
    with loaderd.Loader(daemon.sock, path, 4, crop=32, output="numpy", job="textc", epochs=1,
                        seed=1, fields="txt", copy=True, sampling="sequential") as it:
        images, texts = next(iter(it))
        assert len(texts) == 4   # sequential: samples 0..3, their captions as str or bytes
        assert texts[0] == "" and isinstance(texts[1], bytes) and texts[1] == caps[1]
    with pytest.raises(loaderd.LoaderdError, match="no aux field nope"):
        with loaderd.Loader(daemon.sock, path, 4, crop=32, output="numpy", job="textn",
                            epochs=1, fields="nope") as it:
            next(iter(it))


def test_text_tokenize_off_thread_and_resume(daemon, textset):
    """tokenize=: run on the tokenizer's thread, one batch ahead, in batch order; the position
    (state_dict) is the batch after the one yielded, not the one taken ahead."""
    import threading
    path, keys, caps = textset
    main = threading.get_ident()
    threads = set()

    def tok(texts):
        threads.add(threading.get_ident())
        return [len(t) for t in texts]

    def run(job, n=None, sd=None):
        with loaderd.Loader(daemon.sock, path, 3, crop=32, output="numpy", job=job, epochs=1,
                            seed=3, return_meta=True, fields="txt", fields_bytes=True,
                            tokenize=tok) as it:
            if sd is not None:
                it.load_state_dict(sd)
            got = []
            for b in it:
                assert b.tokens == [len(t) for t in b.fields["txt"]]
                got += [(int(b.ids[j]), b.tokens[j]) for j in range(b.count)]
                if n is not None and len(got) >= n:
                    return got, it.state_dict()
            return got, None

    full, _ = run("tokf")
    assert [ln for _, ln in full] == [len(caps[i]) for i, _ in full]
    assert threads and main not in threads
    head, sd = run("tokh", n=3)
    assert sd["step_in_epoch"] == 1
    tail, _ = run("tokt", sd=dict(sd, job=None))
    assert head + tail == full
