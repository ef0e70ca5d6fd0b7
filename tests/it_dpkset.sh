#!/bin/sh
# it_dpkset.sh - a dataset as a set of .dpk shards through one manifest (docs/FORMAT.md, "Sets of
# shards"), with the real dpack, loaderd and ldcat:
#   dpack pack --shard-size at the boundary: records of 1024 bytes, no class table, so a shard of
#   k records is align64(4096 + 1024k) + 64k bytes: 6272 for two. --shard-size 6272 holds two
#   records a shard (exactly full), 6271 (one byte less) one; each shard a valid .dpk, the set's
#   samples the single-file pack's, byte for byte (dpack decode) and label for label;
#   --shard-records N: shards of N records (the last fewer), at 1, a divisor, the count and one
#   past it, with --shard-size whichever cuts first, 0 refused;
#   a failed --shard-size run (--strict, a cut image among the last) leaves no shard and no manifest;
#   dpack append adds a shard without repacking (refused, manifest untouched: another shape, a
#   shard outside the manifest's directory, a path already in the set);
#   ldcat over the set: every sample exactly once in an epoch, with its label; two jobs on it
#   share one opening of its shards; --io direct reads each shard through an O_DIRECT fd;
#   dpack verify and inspect over the set; a flipped byte in a shard is found, named by its
#   global sample id and shard;
#   bad manifests (a missing shard, a count or an identity that disagrees, cut short, empty set,
#   a duplicate line, a malformed line): dpack and loaderd refuse them naming the manifest, the
#   line and the shard; loaderd serves the next job;
#   a shard truncated under a running job stops that job, naming the shard.
# The resume token across shards is python/tests/test_dpkset.py's.
set -u
BIN=${BUILD:-build}/bin
T=$(mktemp -d /tmp/it_dpkset.XXXXXX)
. "$(dirname "$0")/lib.sh"
trap 'stop_loaderd; [ -n "${KEEP:-}" ] || rm -rf "$T"' EXIT
trap 'exit 130' INT TERM HUP
need_bins dpack dsgen loaderd ldcat

"$BIN/dsgen" npy "$T/x.npy" "$T/y.npy" --count 10 --height 32 --width 32 --channels 1 >/dev/null
"$BIN/dpack" pack --no-fsync "$T/x.npy" "$T/y.npy" "$T/whole.dpk" >/dev/null 2>&1
mkdir "$T/s2" "$T/s1"
"$BIN/dpack" pack --no-fsync --shard-size 6272 "$T/x.npy" "$T/y.npy" "$T/s2/set.dpks" \
	>"$T/out" 2>&1
check "--shard-size 6272: 5 shards of 2 records, each exactly 6272 bytes" sh -c "
	[ \$(grep -c '^2 ' '$T/s2/set.dpks') -eq 5 ] && [ \$(ls '$T/s2' | grep -c 'set-0000[0-4].dpk') -eq 5 ] &&
	for f in '$T'/s2/set-*.dpk; do [ \$(stat -c %s \$f) -eq 6272 ] || exit 1; done"
"$BIN/dpack" pack --no-fsync --shard-size 6271 "$T/x.npy" "$T/y.npy" "$T/s1/set.dpks" \
	>"$T/out" 2>&1
check "--shard-size 6271 (one byte less): 10 shards of 1 record" \
	sh -c "[ \$(grep -c '^1 ' '$T/s1/set.dpks') -eq 10 ] && grep -q '^end 10$' '$T/s1/set.dpks'"
# --shard-records: a count per shard, alone or with --shard-size (whichever cuts first), at its bounds
counts() { awk 'NR > 1 && $1 ~ /^[0-9]+$/ { printf "%s ", $1 }' "$1"; }
recs() {  # recs DIR N [more options]: the manifest's counts of the 10 samples packed so
	_d=$1 _n=$2
	shift 2
	mkdir -p "$T/$_d"
	"$BIN/dpack" pack --no-fsync --shard-records "$_n" "$@" "$T/x.npy" "$T/y.npy" "$T/$_d/set.dpks" \
		>"$T/$_d.out" 2>&1 && counts "$T/$_d/set.dpks"
}
check "--shard-records 3: shards of 3, 3, 3, 1 records" [ "$(recs r3 3)" = "3 3 3 1 " ]
check "--shard-records 5 (a divisor): 5 5" [ "$(recs r5 5)" = "5 5 " ]
check "--shard-records 10 (all of them): one shard" [ "$(recs r10 10)" = "10 " ]
check "--shard-records 11 (one more): one shard" [ "$(recs r11 11)" = "10 " ]
check "--shard-records 1: 10 shards of 1" [ "$(recs r1 1)" = "1 1 1 1 1 1 1 1 1 1 " ]
check "--shard-records 3 --shard-size 6272: the size cuts first (2 a shard)" \
	[ "$(recs rb 3 --shard-size 6272)" = "2 2 2 2 2 " ]
check "--shard-records 2 --shard-size 1M: the count cuts first" \
	[ "$(recs rc 2 --shard-size 1M)" = "2 2 2 2 2 " ]
check "--shard-records's set: every shard a valid .dpk, the set verifies" sh -c \
	"'$BIN/dpack' verify '$T/r3/set.dpks' | grep -q '4 shards, 10 records OK'"
"$BIN/dpack" pack --no-fsync --shard-records 0 "$T/x.npy" "$T/y.npy" "$T/r0.dpks" >"$T/r0.out" 2>&1
rc=$?
check "--shard-records 0: usage error naming the option, nothing written" sh -c "[ $rc -eq 2 ] &&
	grep -q 'shard-records' '$T/r0.out' && [ ! -e '$T/r0.dpks' ]" || show "$T/r0.out"
check "no whole file left beside the set" sh -c "! ls '$T/s2' | grep -q whole"
check "each shard is a valid .dpk" sh -c "'$BIN/dpack' verify '$T/s2/set-00003.dpk' >/dev/null"
same=1
for i in 0 1 2 3 4 5 6 7 8 9; do
	"$BIN/dpack" decode "$T/whole.dpk" $i >"$T/a" 2>/dev/null
	for s in s1 s2; do
		"$BIN/dpack" decode "$T/$s/set.dpks" $i >"$T/b" 2>/dev/null && cmp -s "$T/a" "$T/b" ||
			same=0
	done
done
check "the sets' samples are the single file's, byte for byte" [ $same -eq 1 ]
"$BIN/dpack" inspect --json "$T/whole.dpk" >"$T/iw" && "$BIN/dpack" inspect --json "$T/s1/set.dpks" >"$T/is"
check "inspect: 10 samples in 10 shards, the same labels, kinds and bytes" python3 -c "
import json
w, s = json.load(open('$T/iw')), json.load(open('$T/is'))
assert s['samples'] == 10 and len(s['shards']) == 10 and s['shards'][9]['first'] == 9
for k in ('labels', 'kinds', 'stored_bytes', 'images', 'classes'):
    assert s[k] == w[k], k"
"$BIN/dpack" append "$T/s1/new.dpks" "$T/s1/set-00004.dpk" >/dev/null 2>&1
check "append to no manifest makes a set of one shard" sh -c "
	'$BIN/dpack' verify '$T/s1/new.dpks' | grep -q '1 shards, 1 records OK' &&
	[ \$(grep -c . '$T/s1/new.dpks') -eq 3 ]"
check "verify: the set" sh -c "'$BIN/dpack' verify '$T/s2/set.dpks' | grep -q '5 shards, 10 records OK'"

# ---- a failed --shard-size run leaves nothing: --strict and a cut JPEG among the last files ----
"$BIN/dsgen" imagefolder "$T/tree" --classes 2 --per-class 6 --min-side 24 --max-side 40 >/dev/null
last=$(find "$T/tree" -type f | sort | tail -1)
head -c 200 "$last" >"$T/cut.jpg" && mv "$T/cut.jpg" "$last"
mkdir "$T/fail"
"$BIN/dpack" pack --no-fsync --strict --shard-size 5K "$T/tree" "$T/fail/set.dpks" >/dev/null 2>"$T/err"
rc=$?
check "a failed --shard-size pack: an error, no manifest, no shard, no temporary file" sh -c "
	[ $rc -eq 1 ] && grep -q 'strict' '$T/err' && [ -z \"\$(ls '$T/fail')\" ]"
"$BIN/dpack" pack --no-fsync --shard-size 5K "$T/tree" "$T/fail/set.dpks" >/dev/null 2>&1
check "without --strict the same tree packs to several shards" sh -c "
	[ \$(grep -c . '$T/fail/set.dpks') -gt 3 ] && '$BIN/dpack' verify '$T/fail/set.dpks' >/dev/null"

# ---- append ----
"$BIN/dsgen" npy "$T/x3.npy" "$T/y3.npy" --count 3 --height 32 --width 32 --channels 1 --seed 7 >/dev/null
"$BIN/dpack" pack --no-fsync "$T/x3.npy" "$T/y3.npy" "$T/s2/more.dpk" >/dev/null 2>&1
"$BIN/dpack" append "$T/s2/set.dpks" "$T/s2/more.dpk" >"$T/out" 2>&1
check "append: a sixth shard, 13 samples" sh -c "grep -q '^3 [0-9a-f]* more.dpk$' '$T/s2/set.dpks' &&
	grep -q '^end 6$' '$T/s2/set.dpks' && grep -q '13 samples in all' '$T/out'"
check "verify after append" sh -c "'$BIN/dpack' verify '$T/s2/set.dpks' | grep -q '6 shards, 13 records OK'"
cp "$T/s2/set.dpks" "$T/keep"
"$BIN/dpack" append "$T/s2/set.dpks" "$T/s2/more.dpk" >/dev/null 2>"$T/err"
check "append the same shard again: refused" grep -q "shard more.dpk is in the set already (line 7)" "$T/err"
"$BIN/dsgen" npy "$T/x8.npy" "$T/y8.npy" --count 2 --height 8 --width 8 --channels 1 >/dev/null
"$BIN/dpack" pack --no-fsync "$T/x8.npy" "$T/y8.npy" "$T/s2/small.dpk" >/dev/null 2>&1
"$BIN/dpack" append "$T/s2/set.dpks" "$T/s2/small.dpk" >/dev/null 2>"$T/err"
check "append another shape: refused" grep -q "small.dpk: sample 0 is a raw record of another shape" "$T/err"
"$BIN/dpack" append "$T/s2/set.dpks" "$T/whole.dpk" >/dev/null 2>"$T/err"
check "append a shard outside the manifest's directory: refused" grep -q "lies outside" "$T/err"
check "refused appends left the manifest as it was" cmp -s "$T/keep" "$T/s2/set.dpks"
check "no temporary manifest left" sh -c "! ls '$T/s2' | grep -q tmp"

# ---- loaderd: an epoch over the set ----
serve_loaderd "$T/s.sock" "$T/l.log"
ldcat() { "$BIN/ldcat" --socket "$T/s.sock" --crop 0 --batch 4 "$@"; }
ldcat --dataset "$T/s2/set.dpks" --job e1 >"$T/ep" 2>"$T/err"
check "ldcat: every sample of the set exactly once" sh -c "
	[ \$(cut -d' ' -f2 '$T/ep' | sort -n | uniq | wc -l) -eq 13 ] && [ \$(wc -l <'$T/ep') -eq 13 ] &&
	[ \$(cut -d' ' -f2 '$T/ep' | sort -n | tail -1) -eq 12 ]"
ldcat --dataset "$T/whole.dpk" --job w1 --sampling sequential >"$T/ew" 2>/dev/null
check "with the single file's labels" sh -c "
	cut -d' ' -f2,3 '$T/ep' | sort -n | head -10 >'$T/l1'; cut -d' ' -f2,3 '$T/ew' | sort -n >'$T/l2';
	cmp -s '$T/l1' '$T/l2'"
check "loaderd names the set's way of reading" grep -q "set.dpks: 0 MiB of records in 6 shards, .*: memory" "$T/l.log"
# two jobs on one set share one dataset (issue 31's struct dset): each shard open once
ldcat --dataset "$T/s2/set.dpks" --job sh1 --epochs 0 --rate 20 >/dev/null 2>&1 &
C1=$!
ldcat --dataset "$T/s2/set.dpks" --job sh2 --epochs 0 --rate 20 >/dev/null 2>&1 &
C2=$!
sleep 0.7
opens=$(for f in /proc/$LPID/fd/*; do readlink "$f"; done | grep -c "/s2/set-00003.dpk$")
kill $C1 $C2; wait $C1 $C2 2>/dev/null
check "two jobs on one set: its shards are open once in loaderd" [ "$opens" -eq 1 ]
stop_loaderd
# --io direct: each record read from its shard's O_DIRECT fd
serve_loaderd "$T/s.sock" "$T/l.log" --io direct
ldcat --dataset "$T/s2/set.dpks" --job d1 >"$T/ep" 2>"$T/err"
check "--io direct: every sample once, none substituted" sh -c "
	[ \$(cut -d' ' -f2 '$T/ep' | sort -n | uniq | wc -l) -eq 13 ] && [ \$(wc -l <'$T/ep') -eq 13 ] &&
	[ \$(cut -d' ' -f4 '$T/ep' | sort -u) = 0 ]"
ldcat --dataset "$T/s2/set.dpks" --job d2 --epochs 0 --rate 20 >/dev/null 2>&1 &
CP=$!
sleep 0.5
"$BIN/loaderctl" --socket "$T/s.sock" --json stats d2 >"$T/st" 2>&1
python3 - "$LPID" "$T/s2" >"$T/odirect" <<'PYEOF'
import os, sys
pid, d = sys.argv[1], sys.argv[2]
seen = set()
for fd in os.listdir(f"/proc/{pid}/fd"):
    try:
        target = os.readlink(f"/proc/{pid}/fd/{fd}")
        flags = int(open(f"/proc/{pid}/fdinfo/{fd}").read().split("flags:")[1].split()[0], 8)
    except OSError:
        continue
    if target.startswith(d + "/") and target.endswith(".dpk") and flags & os.O_DIRECT:
        seen.add(target)
print(len(seen))
PYEOF
kill $CP; wait $CP 2>/dev/null
check "--io direct: the set is read with O_DIRECT" grep -q '"io": *"O_DIRECT (--io direct)"' "$T/st"
check "loaderd holds O_DIRECT fds on the 6 shards while the job runs" \
	sh -c "[ \"\$(cat $T/odirect)\" -eq 6 ] || { cat $T/odirect; false; }"
stop_loaderd
serve_loaderd "$T/s.sock" "$T/l.log"

# ---- bad manifests: dpack and loaderd refuse them by manifest, line and shard ----
id0=$(sed -n 2p "$T/s2/set.dpks" | cut -d' ' -f2)
id1=$(sed -n 3p "$T/s2/set.dpks" | cut -d' ' -f2)
bad() {  # NAME TEXT EXPECT
	printf "$2" >"$T/s2/bad.dpks"
	"$BIN/dpack" verify "$T/s2/bad.dpks" >/dev/null 2>"$T/err"
	check "dpack verify refuses $1" grep -q "$3" "$T/err"
	ldcat --dataset "$T/s2/bad.dpks" --job "bad$n" >/dev/null 2>"$T/err"
	check "loaderd refuses $1" grep -q "$3" "$T/err"
}
bad "a missing shard" "dpkset 1\n2 $id0 set-00000.dpk\n2 $id1 gone.dpk\nend 2\n" \
	"bad.dpks line 3: shard gone.dpk: No such file"
bad "a count that disagrees" "dpkset 1\n3 $id0 set-00000.dpk\nend 1\n" \
	"bad.dpks line 2: shard set-00000.dpk has 2 samples; the manifest says 3"
bad "an identity that disagrees" "dpkset 1\n2 $id1 set-00000.dpk\nend 1\n" \
	"bad.dpks line 2: shard set-00000.dpk has identity"
bad "a manifest cut short" "dpkset 1\n2 $id0 set-00000.dpk\n2 $id1 set-0" \
	"bad.dpks line 3: the last line has no end of line"
bad "a manifest without its end line" "dpkset 1\n2 $id0 set-00000.dpk\n" \
	"bad.dpks line 2: no 'end N' line"
bad "an empty set" "dpkset 1\nend 0\n" "bad.dpks line 2: an empty set"
bad "a duplicate line" "dpkset 1\n2 $id0 set-00000.dpk\n2 $id0 set-00000.dpk\nend 2\n" \
	"bad.dpks line 3: shard set-00000.dpk is named on line 2 already"
bad "a malformed line" "dpkset 1\n2 $id0\nend 1\n" "bad.dpks line 2: expected an identity"
bad "a path out of the directory" "dpkset 1\n2 $id0 ../whole.dpk\nend 1\n" \
	"bad.dpks line 2: shard path '../whole.dpk' has a '..' component"
mkfifo "$T/s2/fifo.dpk"
bad "a FIFO for a shard (no wait for a writer)" "dpkset 1\n2 $id0 set-00000.dpk\n2 $id1 fifo.dpk\nend 2\n" \
	"bad.dpks line 3: shard fifo.dpk: not a regular file"
ldcat --dataset "$T/s2/set.dpks" --job after --steps 1 >/dev/null 2>"$T/err"
check "loaderd serves the next job" [ $? -eq 0 ]

# ---- a shard truncated under a running job: that job stops naming it, loaderd goes on ----
cp -r "$T/s1" "$T/cut"
ldcat --dataset "$T/cut/set.dpks" --job cut --epochs 0 --rate 100 >/dev/null 2>"$T/err" &
CP=$!
sleep 1
truncate -s 5000 "$T/cut/set-00004.dpk"
i=0
while kill -0 $CP 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
kill $CP 2>/dev/null
wait $CP
check "a truncated shard stops its job, named" grep -q "set.dpks: shard set-00004.dpk was truncated while the job ran" "$T/err"
ldcat --dataset "$T/s2/set.dpks" --job after2 --steps 1 >/dev/null 2>&1
check "loaderd serves the next job after it" [ $? -eq 0 ]

# ---- a damaged record in a shard ----
python3 -c "
import sys
p = '$T/s2/set-00002.dpk'
b = bytearray(open(p, 'rb').read())
b[4096 + 1024 + 10] ^= 0xff          # the shard's second record: sample 5 of the set
open(p, 'wb').write(b)"
"$BIN/dpack" verify "$T/s2/set.dpks" >"$T/out" 2>&1
check "verify: a bad record named by global id and shard" sh -c "
	grep -q 'bad sample 5: checksum mismatch .* of shard set-00002.dpk' '$T/out' &&
	grep -q '1 of 13 records bad' '$T/out'"

echo "1..$n"
[ "$fails" -eq 0 ]
