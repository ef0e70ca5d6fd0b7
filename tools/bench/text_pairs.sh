#!/bin/sh
# text_pairs.sh - image + caption samples/s: loaderd (dpack --field, the Python Loader with
# fields="txt") against webdataset + torch DataLoader, on the same WebDataset shards (KEY.jpg +
# KEY.txt + KEY.json), the same crop (RandomResizedCrop + flip to CROP), the same batch and the
# same number of workers. Not part of `make test`. Prints a Markdown table row per loader and
# round, and the ratio of the medians.
#
# usage: tools/bench/text_pairs.sh [--images N] [--workdir DIR] [--batch B] [--crop C]
#                                  [--workers W] [--epochs E] [--repeat R]
#   defaults: 2000 images (dsgen, 300..900 px), /tmp/loaderd-text, batch 64, crop 224, all
#   cores, 2 epochs (the first batch of each run not timed), 3 rounds alternating the loaders.
# The venv (DIR/venv) is made from Debian's python3 with --system-site-packages (Debian's torch,
# torchvision and PIL) and gets webdataset pinned (with tools/bench/constraints.txt's bounds).
set -eu
cd "$(dirname "$0")/../.."
N=2000 W=/tmp/loaderd-text B=64 C=224 J=$(nproc) E=2 R=3
while [ $# -gt 0 ]; do
	case $1 in
	--images) N=$2; shift 2 ;;
	--workdir) W=$2; shift 2 ;;
	--batch) B=$2; shift 2 ;;
	--crop) C=$2; shift 2 ;;
	--workers) J=$2; shift 2 ;;
	--epochs) E=$2; shift 2 ;;
	--repeat) R=$2; shift 2 ;;
	-h|--help) sed -n '2,14p' "$0"; exit 0 ;;
	*) echo "text_pairs.sh: unknown option $1" >&2; exit 2 ;;
	esac
done
WDS_VERSION=1.0.2
mkdir -p "$W"
W=$(cd "$W" && pwd)
BIN=build/bin
make -j"$(nproc)" >/dev/null
PY=$W/venv/bin/python
if [ ! -x "$PY" ]; then
	/usr/bin/python3 -m venv --system-site-packages "$W/venv"
fi
"$PY" -c "import webdataset" 2>/dev/null ||
	"$W/venv/bin/pip" install -q "webdataset==$WDS_VERSION" -c tools/bench/constraints.txt
if [ ! -e "$W/shards/done" ]; then
	rm -rf "$W/tree" "$W/shards"
	mkdir -p "$W/shards"
	$BIN/dsgen imagefolder "$W/tree" --classes 20 --per-class $((N / 20)) >/dev/null
	/usr/bin/python3 - "$W/tree" "$W/shards" <<'PYEOF'
import io, json, os, sys, tarfile
src, out = sys.argv[1], sys.argv[2]
imgs = sorted(os.path.join(d, f) for d, _, fs in os.walk(src) for f in fs)
per = (len(imgs) + 7) // 8
def add(t, name, data):
    ti = tarfile.TarInfo(name); ti.size = len(data); t.addfile(ti, io.BytesIO(data))
for s in range(8):
    with tarfile.open(os.path.join(out, "pairs-%03d.tar" % s), "w") as t:
        for i, p in enumerate(imgs[s * per:(s + 1) * per]):
            k = "%06d" % (s * per + i)
            add(t, k + ".jpg", open(p, "rb").read())
            add(t, k + ".txt", ("a photo of a %s, number %d, seen from afar" %
                                (os.path.basename(os.path.dirname(p)), i)).encode())
            add(t, k + ".json", json.dumps({"key": k, "width": 0}).encode())
PYEOF
	$BIN/dpack pack --no-labels --field txt=txt --field json=json \
		"$W/shards/pairs-{000..007}.tar" "$W/pairs.dpk" >/dev/null
	touch "$W/shards/done"
fi
SOCK=$W/ld.sock
$BIN/loaderd --socket "$SOCK" --workers "$J" 2>"$W/loaderd.log" &
LD=$!
trap 'kill $LD 2>/dev/null; wait $LD 2>/dev/null' EXIT
for i in 1 2 3 4 5 6 7 8 9 10; do [ -S "$SOCK" ] && break; sleep 0.2; done
: >"$W/rows.jsonl"
for r in $(seq "$R"); do
	LOADERD_LIB=$(pwd)/build/lib/libldc.so "$PY" tools/bench/text_pairs.py loaderd "$SOCK" \
		"$W/pairs.dpk" "$B" "$C" "$J" "$E" >>"$W/rows.jsonl"
	"$PY" tools/bench/text_pairs.py webdataset "$W/shards/pairs-{000..007}.tar" "$B" "$C" \
		"$J" "$E" >>"$W/rows.jsonl" 2>>"$W/wds.log"
done
echo "| loader | samples/s, rounds in order | median |"
echo "|---|---|---|"
/usr/bin/python3 - "$W/rows.jsonl" <<'PYEOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
med = {}
for name in ("loaderd", "webdataset"):
    r = [x["samples_per_s"] for x in rows if x["row"] == name]
    med[name] = statistics.median(r)
    label = "loaderd (Loader, fields=\"txt\")" if name == "loaderd" else \
        "webdataset 1.0.2 + DataLoader"
    print("| %s | %s | %.0f |" % (label, " ".join("%.0f" % v for v in r), med[name]))
print("\nratio of medians: %.2fx" % (med["loaderd"] / med["webdataset"]))
PYEOF
