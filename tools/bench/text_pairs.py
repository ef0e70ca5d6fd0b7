#!/usr/bin/env python3
"""text_pairs.py - one row of tools/bench/text_pairs.sh: image + caption samples per second out of
WebDataset shards, either through loaderd (the Python Loader on the shards packed with dpack
--field) or through webdataset + torch DataLoader on the shards themselves. The same work for
both: RandomResizedCrop to CROP x CROP (scale 0.08..1, ratio 3/4..4/3) and a random horizontal
flip, uint8 HWC images, the caption as a str, BATCH samples a step, WORKERS processes/threads.
Prints one JSON line: {"row", "samples", "seconds", "samples_per_s"}.

usage: text_pairs.py loaderd SOCKET DATASET.dpk BATCH CROP WORKERS EPOCHS
       text_pairs.py webdataset 'SHARDS-{000..NNN}.tar' BATCH CROP WORKERS EPOCHS"""
import json
import sys
import time


def loaderd_row(sock, dpk, batch, crop, workers, epochs):
    sys.path.insert(0, "python")
    import loaderd
    n = 0
    with loaderd.Loader(sock, dpk, batch, crop=crop, transforms="train", fields="txt",
                        output="torch", epochs=epochs, job="text-pairs", tail="drop") as it:
        t0 = None
        for e in range(epochs):
            it.set_epoch(e)
            for images, texts in it:
                if t0 is None:          # from the first batch on: start-up is not counted
                    t0 = time.perf_counter()
                    continue
                assert len(texts) == images.shape[0]
                n += images.shape[0]
    return n, time.perf_counter() - t0


def webdataset_row(urls, batch, crop, workers, epochs):
    import torch
    import torchvision.transforms as T
    import webdataset as wds
    tf = T.Compose([T.RandomResizedCrop(crop), T.RandomHorizontalFlip(), T.PILToTensor()])
    ds = (wds.WebDataset(urls, shardshuffle=False, empty_check=False).shuffle(1000)
          .decode("pil").to_tuple("jpg", "txt").map_tuple(tf, lambda s: s))
    dl = torch.utils.data.DataLoader(ds.batched(batch, partial=False), batch_size=None,
                                     num_workers=workers, persistent_workers=workers > 0)
    n, t0 = 0, None
    for _ in range(epochs):
        for images, texts in dl:
            if t0 is None:
                t0 = time.perf_counter()
                continue
            assert len(texts) == images.shape[0]
            n += images.shape[0]
    return n, time.perf_counter() - t0


def main():
    row = sys.argv[1]
    if row == "loaderd":
        sock, dpk, batch, crop, workers, epochs = sys.argv[2:8]
        n, dt = loaderd_row(sock, dpk, int(batch), int(crop), int(workers), int(epochs))
    else:
        urls, batch, crop, workers, epochs = sys.argv[2:7]
        n, dt = webdataset_row(urls, int(batch), int(crop), int(workers), int(epochs))
    print(json.dumps({"row": row, "samples": n, "seconds": round(dt, 3),
                      "samples_per_s": round(n / dt, 1)}))


main()
