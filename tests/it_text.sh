#!/bin/sh
# it_text.sh - image + caption + json shards end to end (tests/wds_text.py): dpack pack --field
# keeps every caption byte for byte (non-UTF-8, empty, 65536 bytes) and refuses one of 65537, a
# missing .txt and a duplicated key by name (--missing empty keeps the sample with an empty
# field); inspect and verify show the fields; ldcat --fields over 2 ranks prints each sample's
# caption and url, the two ranks covering the dataset once; a blob whose checksum fails is
# reported by verify and served as a substitute (flagged), never as garbage; a hand-edited aux
# entry refuses the job naming the sample, and loaderd goes on serving. A set of shards with
# aux fields delivers the one file's captions; a shard without them cannot be appended. An
# ImageFolder tree's side files (cls/x.txt) become the field, with the folder's label. The C
# trainer logs the fields with its samples and refuses a dataset without labels.
set -u
BIN=${BUILD:-build}/bin
. "$(dirname "$0")/lib.sh"
need_bins loaderd dsgen dpack ldcat trainer
T=$(mktemp -d /tmp/it_text.XXXXXX)
LPID=""
trap 'stop_loaderd; [ -n "${KEEP:-}" ] || rm -rf "$T"' EXIT
n=0 fails=0
PY=/usr/bin/python3

"$BIN/dsgen" imagefolder "$T/tree" --classes 2 --per-class 8 --min-side 40 --max-side 90 >/dev/null
$PY "$(dirname "$0")/wds_text.py" "$T/tree" "$T" || exit 1
F="--no-labels --field txt=txt --field json=json --field url=json:url"
"$BIN/dpack" pack $F "$T/shard-{000..001}.tar" "$T/t.dpk" >"$T/pack.out" 2>"$T/pack.err"
check "dpack pack --field succeeds" [ $? -eq 0 ]
check "65537-byte caption refused by name" grep -q "s0_003: field txt (.txt): 65537 bytes, above the bound of 65536" "$T/pack.err"
check "missing .txt named" grep -q "s1_001: no .txt member (field txt" "$T/pack.err"
check "duplicated key named" grep -q "key s0_004 in .*shard-000.tar and again in .*shard-001.tar" "$T/pack.err"
"$BIN/dpack" pack --missing empty $F "$T/shard-{000..001}.tar" "$T/e.dpk" 2>"$T/e.err"
check "--missing empty keeps the sample without .txt" [ "$(grep -c 's1_001' "$T/e.err")" -eq 0 ]
"$BIN/dpack" inspect --json "$T/t.dpk" >"$T/insp.json"
check "inspect lists the aux fields" $PY -c "
import json, sys; d = json.load(open('$T/insp.json'))
sys.exit(not (d['aux_fields'] == ['txt', 'json', 'url'] and d['labels_present'] is False and d['version'] == 2))"
check "verify passes" "$BIN/dpack" verify "$T/t.dpk"

SOCK="$T/s.sock"
serve_loaderd "$SOCK" "$T/ld.log"
for r in 0 1; do
	"$BIN/ldcat" --socket "$SOCK" --dataset "$T/t.dpk" --job two --world 2 --rank $r --batch 3 \
		--crop 32 --fields >"$T/r$r.out" 2>"$T/r$r.err" &
	eval "p$r=\$!"
done
wait "$p0"; r0=$?
wait "$p1"; r1=$?
check "two ranks with --fields" [ "$r0" -eq 0 -a "$r1" -eq 0 ]
# every caption byte-exact with its sample: the key comes from the url, the caption must be
# that key's (escaped as ldcat escapes it)
check "each caption is its sample's, ranks cover the dataset once" $PY - "$T" <<'PYEOF'
import json, re, sys
T = sys.argv[1]
keep = json.load(open(T + "/expect.json"))["keep"]
keys = list(keep)
def esc(b):
    return "".join(chr(c) if 32 < c < 127 and c not in (92, 61) else "\\x%02x" % c for c in b)
seen = []
for r in (0, 1):
    for line in open("%s/r%d.out" % (T, r)):
        step, sid, label, flags, *f = line.split(" ")
        f = dict(x.split("=", 1) for x in f)
        sid = int(sid)
        if int(flags) & 6:      # tail padding repeats a sample
            continue
        seen.append(sid)
        want = keep[keys[sid]].encode("latin-1")
        assert f["txt"].rstrip("\n") == esc(want), (sid, keys[sid])
        assert f["url"].rstrip("\n") == esc(("http://e/" + keys[sid]).encode()), sid
assert sorted(seen) == list(range(len(keys))), seen
PYEOF

# a blob's byte flipped: verify names it; loaderd substitutes it
cp "$T/t.dpk" "$T/bad.dpk"
$PY - "$T/bad.dpk" <<'PYEOF'
import struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
count, = struct.unpack_from("<Q", b, 16)
ao, asz = struct.unpack_from("<QQ", b, 112)
ents = ao + asz - 24 * count
off, = struct.unpack_from("<Q", b, ents + 24 * 2)
b[off + 9] ^= 1
open(sys.argv[1], "wb").write(b)
PYEOF
"$BIN/dpack" verify "$T/bad.dpk" >"$T/v.out"
check "verify names the bad aux fields" grep -q "bad sample 2: aux fields checksum mismatch" "$T/v.out"
"$BIN/ldcat" --socket "$SOCK" --dataset "$T/bad.dpk" --job bad --batch 5 --crop 32 --fields \
	--sampling sequential >"$T/bad.out" 2>"$T/bad.err"
check "bad aux fields: the sample substituted" awk '$2 == 3 && $4 == 1 { f = 1 } END { exit !f }' "$T/bad.out"
check "bad aux fields: sample 2 never delivered" awk '$2 == 2 { exit 1 }' "$T/bad.out"
# the substitute carries its own fields: sample 3's, as the intact file delivers them
sub_f=$(awk '$2 == 3 && $4 == 1 { $1 = $3 = $4 = ""; print; exit }' "$T/bad.out")
one_f=$(cat "$T/r0.out" "$T/r1.out" | awk '$2 == 3 { $1 = $3 = $4 = ""; print; exit }')
check "bad aux fields: the substitute carries its own fields" [ -n "$sub_f" -a "$sub_f" = "$one_f" ]
check "loaderd logged the bad sample" grep -q "sample 2 is bad (sample 2: aux fields checksum mismatch)" "$T/ld.log"

# an aux entry's offset edited (and the section's checksum made right): the job is refused or
# the sample substituted, named; loaderd lives on
cp "$T/t.dpk" "$T/off.dpk"
$PY - "$T/off.dpk" <<'PYEOF'
import struct, sys, subprocess
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
count, = struct.unpack_from("<Q", b, 16)
ao, asz = struct.unpack_from("<QQ", b, 112)
ents = ao + asz - 24 * count
off, = struct.unpack_from("<Q", b, ents + 24 * 4)
struct.pack_into("<Q", b, ents + 24 * 4, off + 1)
open(p, "wb").write(b)
PYEOF
"$BIN/ldcat" --socket "$SOCK" --dataset "$T/off.dpk" --job off --batch 5 --crop 32 --fields \
	--sampling sequential >"$T/off.out" 2>"$T/off.err"
check "edited aux offset: named" grep -q "sample 4: aux fields at .*not right after the record" "$T/ld.log"
check "edited aux offset: sample 4 never delivered" awk '$2 == 4 { exit 1 }' "$T/off.out"
check "loaderd still serves" "$BIN/ldcat" --socket "$SOCK" --dataset "$T/t.dpk" --job after --batch 4 --crop 32 --steps 1
# a set of shards with aux fields: the same samples and captions as one file; a shard without
# them cannot join it
"$BIN/dpack" pack --shard-size 40K $F "$T/shard-{000..001}.tar" "$T/set.dpks" 2>/dev/null >/dev/null
check "a set of several shards" [ "$(grep -c '\.dpk$' "$T/set.dpks")" -ge 2 ]
"$BIN/ldcat" --socket "$SOCK" --dataset "$T/set.dpks" --job set --batch 3 --crop 32 --fields \
	--sampling sequential >"$T/set.out" 2>/dev/null
"$BIN/ldcat" --socket "$SOCK" --dataset "$T/t.dpk" --job one --batch 3 --crop 32 --fields \
	--sampling sequential >"$T/one.out" 2>/dev/null
check "the set delivers the file's captions" cmp -s "$T/set.out" "$T/one.out"
"$BIN/dpack" pack --no-labels "$T/shard-001.tar" "$T/plain.dpk" 2>/dev/null >/dev/null
"$BIN/dpack" append "$T/set.dpks" "$T/plain.dpk" 2>"$T/app.err" >/dev/null
check "a shard without the aux fields refused by append" grep -q "aux fields or labels differ" "$T/app.err"

# an ImageFolder tree with side files: cls/x.txt beside cls/x.JPEG (one not UTF-8, some absent)
cp -r "$T/tree" "$T/side"
$PY - "$T/side" <<'PYEOF'
import os, sys
imgs = sorted(os.path.join(d, f) for d, _, fs in os.walk(sys.argv[1]) for f in fs)
for i, p in enumerate(imgs[:-3]):
    open(p.rsplit(".", 1)[0] + ".txt", "wb").write(b"\xff side" if i == 1 else ("side %d" % i).encode())
PYEOF
"$BIN/dpack" pack --field txt=txt "$T/side" "$T/side.dpk" 2>"$T/side.err" >/dev/null
check "tree: samples without a side file skipped by name" [ "$(grep -c 'no .*\.txt (field txt' "$T/side.err")" -eq 3 ]
"$BIN/dpack" pack --missing empty --field txt=txt "$T/side" "$T/side2.dpk" 2>/dev/null >/dev/null
"$BIN/ldcat" --socket "$SOCK" --dataset "$T/side2.dpk" --job side --batch 4 --crop 32 --fields \
	--sampling sequential >"$T/side.out" 2>/dev/null
check "tree: each side file with its image and its folder's label" $PY - "$T" <<'PYEOF'
import os, sys
T = sys.argv[1]
imgs = sorted(os.path.join(d, f) for d, _, fs in os.walk(T + "/side") for f in fs if f.endswith(".JPEG"))
classes = sorted(os.listdir(T + "/side"))
def esc(b):
    return "".join(chr(c) if 32 < c < 127 and c not in (92, 61) else "\\x%02x" % c for c in b)
got = 0
for line in open(T + "/side.out"):
    step, sid, label, flags, txt = line.rstrip("\n").split(" ")
    p = imgs[int(sid)]
    side = p.rsplit(".", 1)[0] + ".txt"
    want = open(side, "rb").read() if os.path.exists(side) else b""
    assert txt == "txt=" + esc(want), (sid, txt, want)
    assert int(label) == classes.index(os.path.basename(os.path.dirname(p)))
    got += 1
assert got == len(imgs), got
PYEOF
# the C trainer logs the fields with its samples (--log-samples, as ldcat --fields), and refuses a
# dataset without labels by name (its models are classifiers)
timeout 120 "$BIN/trainer" --socket "$SOCK" --dataset "$T/side2.dpk" --device host --crop 32 \
	--batch 4 --steps 4 --log-every 0 --log-samples "$T/trn" >"$T/trn.out" 2>&1
check "trainer --log-samples: the fields as ldcat prints them" $PY - "$T" <<'PYEOF'
import sys
T = sys.argv[1]
want = {}
for line in open(T + "/side.out"):     # ldcat --fields, sequential: id -> label and fields
    w = line.split(" ")
    want[w[1]] = (w[2], w[4:])
n = 0
for line in open(T + "/trn.0"):
    w = line.split(" ")
    assert (w[2], w[4:]) == want[w[1]], (line, want[w[1]])
    n += 1
assert n >= 16, n   # 4 steps of 4, and what the prefetch took ahead
PYEOF
timeout 60 "$BIN/trainer" --socket "$SOCK" --dataset "$T/t.dpk" --device host --crop 32 \
	--batch 4 --steps 1 --log-every 0 >"$T/trn2.out" 2>&1
check "trainer: a dataset without labels refused by name" grep -q "has no labels (dpack pack --no-labels)" "$T/trn2.out"
echo "1..$n"
[ "$fails" -eq 0 ]
