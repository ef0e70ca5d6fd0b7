#!/usr/bin/env python3
"""npy_vs_dpk.py IMAGES.npy LABELS.npy D.dpk [labels] - every record of D.dpk is the C-order slice
IMAGES[i] (a raw record of its shape) labelled LABELS[i]; exit 1 naming the first that is not.
With "labels", only the labels are compared (records compressed with zstd).
Standard library only: reads the .npy header and the .dpk index (docs/FORMAT.md) itself."""
import ast, struct, sys


def npy(path):
    f = open(path, "rb")
    pre = f.read(10)
    assert pre[:6] == b"\x93NUMPY", path
    hl = struct.unpack("<H" if pre[6] == 1 else "<I", pre[8:10] if pre[6] == 1 else pre[8:12])[0]
    off = 10 if pre[6] == 1 else 12
    f.seek(off)
    hdr = ast.literal_eval(f.read(hl).decode("latin1"))
    f.seek(off + hl)
    return hdr, f.read()


def main():
    (ih, img), (lh, lab) = npy(sys.argv[1]), npy(sys.argv[2])
    n = ih["shape"][0]
    sb = len(img) // n
    ls = int(lh["descr"][2:])
    only_labels = sys.argv[4:] == ["labels"]
    d = open(sys.argv[3], "rb").read()
    count, index_off = struct.unpack_from("<Q", d, 16)[0], struct.unpack_from("<Q", d, 56)[0]
    if count != n:
        sys.exit(f"{count} records for {n} images")
    for i in range(n):
        off, length, label = struct.unpack_from("<QQq", d, index_off + 64 * i)
        want = int.from_bytes(lab[i * ls:(i + 1) * ls], "little", signed=lh["descr"][1] == "i")
        if label != want or (not only_labels and
                             (length != sb or d[off:off + length] != img[i * sb:(i + 1) * sb])):
            sys.exit(f"sample {i}: record or label differs from the arrays")


main()
