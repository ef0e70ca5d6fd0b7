"""s3.py - s3:// datasets for the Loader (docs/S3.md): the dataset is made local in this user's
cache, with this user's credentials (AWS_* variables, ~/.aws/credentials), by `dpack fetch`, and
the Loader opens the local copy like any file, so loaderd is handed descriptors, never a URL or a
credential. dpack is $LOADERD_DPACK, else `dpack` on PATH.

    local_dataset("s3://bucket/prefix/train.dpks")  ->  "/home/u/.cache/loaderd/s3/sets/.../train.dpks"
"""
import errno
import json
import os
import shutil
import subprocess


def is_url(dataset):
    return isinstance(dataset, str) and dataset.startswith("s3://")


def local_dataset(dataset):
    """@dataset's local path: an absolute path as given, or an s3:// URL's copy in the cache.
    Raises LoaderdError with dpack's sentence (the object and the store's words) when the store
    refuses (errno EACCES for 401/403, ENOENT for 404) or cannot be reached (EIO)."""
    path = os.fspath(dataset)
    if not is_url(path):
        return os.path.abspath(path)
    from .loader import LoaderdError
    exe = os.environ.get("LOADERD_DPACK") or shutil.which("dpack")
    if not exe:
        raise LoaderdError(errno.ENOENT, f"{path}: an s3:// dataset needs dpack (set "
                           "LOADERD_DPACK or put it on PATH)")
    p = subprocess.run([exe, "fetch", path], capture_output=True, text=True)
    if p.returncode != 0:
        why = (p.stderr.strip().splitlines() or [f"dpack fetch exited {p.returncode}"])[-1]
        why = why.removeprefix("dpack: error: ")
        err = (errno.EACCES if " 403 " in why or " 401 " in why else
               errno.ENOENT if " 404 " in why else errno.EIO)
        raise LoaderdError(err, why)
    return json.loads(p.stdout.strip().splitlines()[-1])["path"]
