"""pack_list.py - pack a list of (image file, label) into a .dpk: what a dataset class of a
script's own keeps (a samples/imgs/filenames list, a parser or reader object, a CSV), as
loaderd.diagnose writes it (FILE<TAB>LABEL per line, files.tsv in its report directory).

    python -m loaderd.pack_list FILES.tsv OUT.dpk

dpack packs an ImageFolder tree, whose labels are the sorted folder names: the files are linked
(symlinks, nothing copied) into a temporary tree with one folder per label, named so that sorted
order is the labels' order, then `dpack pack TREE OUT.dpk`, then the tree goes. The labels of
the .dpk equal the list's when they are 0..K-1 with every one present; otherwise they are the
labels' ranks in sorted order (said, with the mapping). dpack: see _bins.py.
"""
import os
import shutil
import subprocess
import sys
import tempfile

from . import _bins


def read_tsv(path):
    """[(file, label or None)] of a FILE<TAB>LABEL list; ValueError naming the line."""
    out = []
    with open(path) as f:
        for no, ln in enumerate(f, 1):
            ln = ln.rstrip("\n")
            if not ln:
                continue
            p, _, lab = ln.partition("\t")
            if not p:
                raise ValueError("%s:%d: no file name" % (path, no))
            lab = lab.strip()
            try:
                out.append((p, int(lab) if lab else None))
            except ValueError:
                out.append((p, lab))
    return out


def folders(labels):
    """label -> folder name such that sorted folder names follow the labels' order, and whether
    dpack's class index (the rank among the present labels) equals each label."""
    uniq = set(labels)
    if all(isinstance(x, int) and x >= 0 for x in uniq):
        names = {x: "%010d" % x for x in uniq}
        same = uniq == set(range(len(uniq)))
    else:
        order = sorted(uniq, key=lambda x: (x is None, str(type(x)), x if x is not None else 0))
        names = {x: "%010d" % i for i, x in enumerate(order)}
        same = False
    return names, same


def link_tree(pairs, tree):
    """Links to @pairs' files under @tree, one folder per label; returns (files, classes,
    labels kept as they are)."""
    names, same = folders([lab for _, lab in pairs])
    made = set()
    for i, (p, lab) in enumerate(pairs):
        d = os.path.join(tree, names[lab])
        if d not in made:
            os.makedirs(d, exist_ok=True)
            made.add(d)
        os.symlink(os.path.abspath(p), os.path.join(d, "%09d%s" % (i, os.path.splitext(p)[1])))
    return len(pairs), len(names), same


def pack(pairs, out, dpack=None, quiet=False):
    """@pairs into the .dpk @out through a temporary tree of links (beside @out). Returns
    (files, classes, labels kept); RuntimeError naming what failed."""
    dpack = dpack or _bins.find_bin("dpack")
    if not dpack:
        raise RuntimeError(_bins.not_found(["dpack"]))
    tmp = tempfile.mkdtemp(prefix=".pack_list.", dir=os.path.dirname(os.path.abspath(out)))
    try:
        n, k, same = link_tree(pairs, os.path.join(tmp, "tree"))
        p = subprocess.run([dpack, "pack", os.path.join(tmp, "tree"), out], text=True,
                           capture_output=quiet)
        if p.returncode:
            raise RuntimeError("dpack pack: exit %d%s" % (p.returncode, ": " + (
                (p.stderr or "").strip().splitlines() or ["?"])[-1] if quiet else ""))
        return n, k, same
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2 or argv[0].startswith("-"):
        print("usage: python -m loaderd.pack_list FILES.tsv OUT.dpk", file=sys.stderr)
        return 2
    try:
        pairs = read_tsv(argv[0])
        if not pairs:
            raise ValueError("%s: no files" % argv[0])
        n, k, same = pack(pairs, argv[1])
    except (OSError, ValueError, RuntimeError) as e:
        print("loaderd.pack_list: %s" % e, file=sys.stderr)
        return 1
    print("loaderd.pack_list: %d files, %d classes -> %s; %s" % (
        n, k, argv[1], "labels as listed" if same else
        "labels are each listed label's rank in sorted order (0..%d), not the listed values"
        % (k - 1)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
