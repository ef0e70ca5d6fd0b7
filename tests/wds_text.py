#!/usr/bin/env python3
"""wds_text.py JPEG_DIR OUT_DIR: WebDataset shards of image + caption + json for the image-text
tests (tests/it_text.sh): shard-000.tar and shard-001.tar from the JPEGs under JPEG_DIR (sorted),
KEY.jpg + KEY.txt + KEY.json each, with the edge cases: an empty caption, one that is not UTF-8,
one of exactly 65536 bytes (the bound), one of 65537 (refused by name), a sample without its .txt
and a key found again in the second shard. Writes OUT_DIR/expect.json: key -> caption (latin-1
text of its bytes) for every sample dpack must keep, and the keys it must refuse."""
import io, json, os, sys, tarfile

def add(t, name, data):
    ti = tarfile.TarInfo(name)
    ti.size = len(data)
    t.addfile(ti, io.BytesIO(data))

def main():
    src, out = sys.argv[1], sys.argv[2]
    jpegs = sorted(os.path.join(d, f) for d, _, fs in os.walk(src) for f in fs)
    keep, refuse = {}, {}
    special = {0: b"", 1: b"\xff\xfe not utf-8 \xc3\x28", 2: b"c" * 65536, 3: b"c" * 65537}
    half = len(jpegs) // 2
    for s in range(2):
        with tarfile.open(os.path.join(out, "shard-%03d.tar" % s), "w") as t:
            for i, p in enumerate(jpegs[s * half:(s + 1) * half]):
                k = "s%d_%03d" % (s, i)
                img = open(p, "rb").read()
                cap = special.get(i, ("caption %d %d \u2603" % (s, i)).encode()) if s == 0 else \
                    ("second shard %d" % i).encode()
                add(t, k + ".jpg", img)
                missing = s == 1 and i == 1
                if not missing:
                    add(t, k + ".txt", cap)
                add(t, k + ".json", json.dumps({"url": "http://e/" + k, "n": i}).encode())
                if missing:
                    refuse[k] = "no .txt member"
                elif len(cap) > 65536:
                    refuse[k] = "above the bound of 65536"
                else:
                    keep[k] = cap.decode("latin-1")
            if s == 1:  # a key of the first shard again
                add(t, "s0_004.jpg", img)
                add(t, "s0_004.txt", b"duplicate")
                add(t, "s0_004.json", b"{}")
                refuse["s0_004 (again)"] = "key s0_004 in"
    json.dump({"keep": keep, "refuse": refuse}, open(os.path.join(out, "expect.json"), "w"))

main()
