"""s3_link_mosaic.py - Mosaic Streaming's side of tools/bench/s3_link.sh, run with the
benchmark's venv (mosaicml-streaming beside Debian's python3-torch):

  s3_link_mosaic.py write TREE OUT SHARD_BYTES
      the JPEGs under TREE/CLASS/ (classes numbered 1.. in sorted order, as dpack numbers them
      from 0: the label is the folder's index) as MDS shards in OUT: columns image (the JPEG's
      bytes as they are) and label (int), no compression, shards of at most SHARD_BYTES.
  s3_link_mosaic.py upload OUT s3://BUCKET/PREFIX
      every file of OUT to the store (boto3; AWS_ENDPOINT_URL, the keys from the environment).
  s3_link_mosaic.py read s3://BUCKET/PREFIX LOCAL EPOCHS WORKERS DEV [CACHE_LIMIT [SHUFFLE_BLOCK]]
      EPOCHS epochs of StreamingDataset (shuffled, batch 64) through a DataLoader with WORKERS
      workers, each sample's JPEG decoded with PIL, resized (short side 256, bilinear) and
      centre-cropped to 224 x 224 (loaderd's default transform, ldcat --crop 224), as uint8
      tensors. One JSON line per epoch: samples, seconds, samples/s and the bytes DEV (a network
      interface in this namespace) received during the epoch. CACHE_LIMIT: bytes the local
      cache may hold ("-": no bound); SHUFFLE_BLOCK: StreamingDataset's shuffle_block_size, in
      samples (default: Mosaic's own, 4,000,000 / canonical nodes, i.e. the whole of a small set).

Not part of `make test`.
"""
import io
import json
import os
import sys
import time


def rx(dev):
    with open("/sys/class/net/%s/statistics/rx_bytes" % dev) as f:
        return int(f.read())


def write(tree, out, shard_bytes):
    from streaming import MDSWriter
    classes = sorted(d for d in os.listdir(tree) if os.path.isdir(os.path.join(tree, d)))
    n = 0
    with MDSWriter(out=out, columns={"image": "bytes", "label": "int"}, compression=None,
                   size_limit=shard_bytes) as w:
        for k, c in enumerate(classes):
            d = os.path.join(tree, c)
            for name in sorted(os.listdir(d)):
                with open(os.path.join(d, name), "rb") as f:
                    w.write({"image": f.read(), "label": k})
                n += 1
    print(json.dumps({"samples": n, "classes": len(classes)}))


def upload(out, url):
    import boto3
    bucket, _, prefix = url[len("s3://"):].partition("/")
    s3 = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"])
    total = 0
    for name in sorted(os.listdir(out)):
        p = os.path.join(out, name)
        s3.upload_file(p, bucket, prefix.rstrip("/") + "/" + name)
        total += os.path.getsize(p)
    print(json.dumps({"uploaded_bytes": total}))


def read(remote, local, epochs, workers, dev, cache_limit=None, shuffle_block=None):
    import numpy as np
    import torch
    from PIL import Image
    from streaming import StreamingDataset

    class Photos(StreamingDataset):
        def __getitem__(self, i):
            s = super().__getitem__(i)
            im = Image.open(io.BytesIO(s["image"])).convert("RGB")
            w, h = im.size
            r = 256 / min(w, h)
            im = im.resize((max(256, round(w * r)), max(256, round(h * r))), Image.BILINEAR)
            w, h = im.size
            x, y = (w - 224) // 2, (h - 224) // 2
            a = np.asarray(im.crop((x, y, x + 224, y + 224)))
            return torch.from_numpy(a.copy()), s["label"]

    ds = Photos(remote=remote, local=local, shuffle=True, batch_size=64, shuffle_seed=0,
                cache_limit=None if cache_limit in (None, "-") else int(cache_limit),
                shuffle_block_size=None if shuffle_block is None else int(shuffle_block))
    dl = torch.utils.data.DataLoader(ds, batch_size=64, num_workers=workers,
                                     persistent_workers=False)
    for e in range(epochs):
        b0, t0, n = rx(dev), time.monotonic(), 0
        for img, _ in dl:
            assert img.shape[1:] == (224, 224, 3), img.shape
            n += img.shape[0]
        s = time.monotonic() - t0
        print(json.dumps({"epoch": e + 1, "samples": n, "seconds": round(s, 3),
                          "samples_per_s": round(n / s, 1), "rx_bytes": rx(dev) - b0}),
              flush=True)


def main():
    a = sys.argv[1:]
    if len(a) == 4 and a[0] == "write":
        write(a[1], a[2], int(a[3]))
    elif len(a) == 3 and a[0] == "upload":
        upload(a[1], a[2])
    elif len(a) in (6, 7, 8) and a[0] == "read":
        read(a[1], a[2], int(a[3]), int(a[4]), a[5], *a[6:])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
