"""s3.py - s3:// datasets for the Loader (docs/S3.md), with the rule ldcat and the trainer follow.
At each attach the URL is first offered to loaderd's node cache (loaderd --cache-dir): libldc's
ldc_s3_offer reads this user's credentials (AWS_* variables, ~/.aws/credentials and config) with
its rights, sends them to loaderd for this job alone and wipes them; they never pass through
Python. When loaderd takes it, the job opens the URL and loaderd fetches it, with these
credentials, into its cache. When loaderd has no cache, or LOADERD_S3_CLIENT_FETCH=1 is set, the
dataset is made local in this user's cache by `dpack fetch` (with the same credentials, read by
dpack) and opened like any file: loaderd is handed descriptors. dpack is $LOADERD_DPACK, else
`dpack` on PATH.

    through_node_cache(conn, "s3://bucket/prefix/train.dpks")  ->  True (loaderd fetches it)
    local_dataset("s3://bucket/prefix/train.dpks")
        ->  "/home/u/.cache/loaderd/s3/sets/.../train.dpks"
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


def through_node_cache(conn, url):
    """Offer s3:// @url to loaderd's node cache on @conn (a loader._Conn, before its job open):
    True when loaderd took it (open the URL), False when it has no cache or
    LOADERD_S3_CLIENT_FETCH=1 (fetch it: local_dataset). Raises LoaderdError with libldc's
    sentence (no credentials: the variable or file, never a key)."""
    from .loader import LoaderdError
    rc = conn.lib.ldc_s3_offer(conn.ptr, os.fsencode(url))
    if rc < 0:
        raise LoaderdError(-rc, conn.error())
    return rc == 0
