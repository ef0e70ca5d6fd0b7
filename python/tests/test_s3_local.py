"""test_s3_local.py - loaderd.s3.local_dataset, the Loader's s3:// hook, without a store: a local
path stays a path; an s3:// URL goes through `dpack fetch` (here a stand-in script named by
LOADERD_DPACK), whose JSON line gives the local copy and whose error sentence becomes the
LoaderdError's message; no dpack is a LoaderdError that says how to name one. The node cache's
offer (through_node_cache over libldc's ldc_s3_offer, stubbed): taken, not taken, a refusal as a
LoaderdError; and a Loader keeps an s3:// URL, fetching nothing, until it attaches. The real
fetch and the node cache, against moto, are tests/it_s3.sh's."""
import os
import stat

import pytest

import loaderd
from loaderd import s3


def fake_dpack(tmp_path, body):
    p = tmp_path / "dpack"
    p.write_text("#!/bin/sh\n" + body)
    p.chmod(p.stat().st_mode | stat.S_IXUSR)
    return str(p)


def test_local_path_is_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert s3.local_dataset("d.dpk") == str(tmp_path / "d.dpk")
    assert s3.local_dataset(tmp_path / "x" / "set.dpks") == str(tmp_path / "x" / "set.dpks")


def test_url_fetched_through_dpack(tmp_path, monkeypatch):
    log = tmp_path / "args"
    monkeypatch.setenv("LOADERD_DPACK", fake_dpack(tmp_path, f'echo "$@" > {log}\n'
                       'echo "dpack: fetching" >&2\n'
                       'echo \'{"path": "/cache/sets/ab/set.dpks", "objects": 3, "fetched": 0}\'\n'))
    assert s3.local_dataset("s3://bkt/p/set.dpks") == "/cache/sets/ab/set.dpks"
    assert log.read_text().split() == ["fetch", "s3://bkt/p/set.dpks"]


def test_store_refusal_is_a_loaderd_error_with_dpacks_sentence(tmp_path, monkeypatch):
    monkeypatch.setenv("LOADERD_DPACK", fake_dpack(
        tmp_path, 'echo "dpack: error: s3://bkt/k: HEAD: HTTP 403 AccessDenied" >&2\nexit 1\n'))
    with pytest.raises(loaderd.LoaderdError,
                       match=r"^s3://bkt/k: HEAD: HTTP 403 AccessDenied \[EACCES\]$") as e:
        s3.local_dataset("s3://bkt/k")
    assert e.value.errno == 13


def test_no_dpack(tmp_path, monkeypatch):
    monkeypatch.delenv("LOADERD_DPACK", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(loaderd.LoaderdError, match="needs dpack .*LOADERD_DPACK"):
        s3.local_dataset("s3://bkt/k")
    assert not s3.is_url("/data/s3://x") and s3.is_url("s3://x")


class FakeLib:
    """ldc_s3_offer's answers without loaderd: @rc, and the URL it was given."""

    def __init__(self, rc, err=b""):
        self.rc, self.err, self.urls = rc, err, []

    def ldc_s3_offer(self, ptr, url):
        self.urls.append(url)
        return self.rc

    def ldc_error(self, ptr):
        return self.err


class FakeConn:
    def __init__(self, lib):
        self.lib, self.ptr = lib, 1

    def error(self):
        return self.lib.ldc_error(self.ptr).decode()


def test_node_cache_taken_or_not():
    taken, none = FakeLib(0), FakeLib(1)
    assert s3.through_node_cache(FakeConn(taken), "s3://bkt/p/set.dpks") is True
    assert taken.urls == [b"s3://bkt/p/set.dpks"]
    assert s3.through_node_cache(FakeConn(none), "s3://bkt/p/set.dpks") is False


def test_node_cache_refusal_is_a_loaderd_error_with_libldcs_sentence():
    lib = FakeLib(-126, b"s3://bkt/k: no S3 credentials: AWS_ACCESS_KEY_ID and ...")
    with pytest.raises(loaderd.LoaderdError, match=r"^s3://bkt/k: no S3 credentials") as e:
        s3.through_node_cache(FakeConn(lib), "s3://bkt/k")
    assert e.value.errno == 126


def test_loader_keeps_the_url_until_it_attaches(tmp_path, monkeypatch):
    # a dpack that would fail: nothing may be fetched when the Loader is made
    monkeypatch.setenv("LOADERD_DPACK", fake_dpack(tmp_path, f"touch {tmp_path}/ran\nexit 1\n"))
    ld = loaderd.Loader(str(tmp_path / "none.sock"), "s3://bkt/p/set.dpks", 4, crop=None,
                        output="numpy")
    assert ld.dataset == "s3://bkt/p/set.dpks" and not (tmp_path / "ran").exists()
    ld.close()
