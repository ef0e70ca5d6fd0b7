#!/bin/sh
# it_loaderd.sh - loaderd end to end: pack a generated ImageFolder tree, serve it to a 2-rank job
# (two ldcat processes at once) and check that one epoch delivers every sample id exactly once
# with its class as label; tail policies pad, mask and drop; a corrupted record is substituted,
# flagged and logged with its id (or, with --on-bad fail, stops the job naming it); the same epoch
# with the pread path forced; a missing dataset is refused by path; SIGTERM stops loaderd cleanly
# (clients told, socket removed); after kill -9 a new loaderd takes over the socket path at once.
set -u
BIN=${BUILD:-build}/bin
T=$(mktemp -d /tmp/it_loaderd.XXXXXX)
. "$(dirname "$0")/lib.sh"
trap 'stop_loaderd; rm -rf "$T"' EXIT
trap 'exit 130' INT TERM HUP

# serve NAME [OPTION...]: loaderd on $T/s.sock, its log in $T/NAME.log; waits until it serves.
serve() {
	name=$1
	shift
	start_loaderd "$T/$name.log" --socket "$T/s.sock" --workers 2 --linger 5 "$@"
}

# Run ranks 0 and 1 of job $1 on dataset $2 at once (extra ldcat options after): output in
# $T/$1.r0 / .r1, stderr in .e0 / .e1, exit status in .rc0 / .rc1.
epoch() {
	job=$1 ds=$2
	shift 2
	for r in 0 1; do
		( "$BIN/ldcat" --socket "$T/s.sock" --dataset "$ds" --job "$job" --world 2 --rank $r \
			--batch 8 --crop 32 --seed 7 --timeout-ms 10000 "$@" >"$T/$job.r$r" 2>"$T/$job.e$r"
		  echo $? >"$T/$job.rc$r" ) &
	done
	wait_ranks
}
# Wait for the two ldcat subshells only (loaderd is a child too: a bare `wait` would hang).
wait_ranks() {
	i=0
	while { [ ! -s "$T/$job.rc0" ] || [ ! -s "$T/$job.rc1" ]; } && [ $i -lt 400 ]; do
		sleep 0.05; i=$((i + 1))
	done
}
rc() { cat "$T/$1.rc$2" 2>/dev/null || echo none; }
lines() { wc -l <"$1" | tr -d ' '; }
steps() { awk '{print $1}' "$1" | sort -u | wc -l | tr -d ' '; }
# Sample ids 0..N-1 except $2 (or none), one per line.
expect_ids() { awk -v n="$1" -v x="${2:--1}" 'BEGIN { for (i = 0; i < n; i++) if (i != x) print i }'; }
# Lines whose label is not their id's class (id / M), in both ranks' output.
bad_labels() { cat "$T/$1.r0" "$T/$1.r1" | awk -v m=$M '$3 != int($2 / m)' | wc -l | tr -d ' '; }
# Lines whose flags have bit $2, in both ranks.
with_flag() { cat "$T/$1.r0" "$T/$1.r1" | awk -v b="$2" 'int($4 / b) % 2 == 1' | wc -l | tr -d ' '; }
# Ids of the plain samples (flags 0: neither padding nor substituted), both ranks, sorted.
real_ids() { cat "$T/$1.r0" "$T/$1.r1" | awk '$4 == 0 { print $2 }' | sort -n; }

# ---- dataset: K classes x M images, N odd so that the tail policies matter ----
K=7 M=13 N=91
"$BIN/dsgen" imagefolder "$T/tree" --classes $K --per-class $M --min-side 64 --max-side 200 \
	>/dev/null 2>&1
"$BIN/dpack" pack --no-fsync "$T/tree" "$T/a.dpk" >/dev/null 2>"$T/pack.err"
check "dpack packs $N samples" [ $? -eq 0 ]
"$BIN/dpack" inspect --json "$T/a.dpk" >"$T/a.json"
check "layout: $K classes of $M (class = id / $M)" [ "$(python3 -c "
import json; d = json.load(open('$T/a.json'))
print(d['samples'], [c['samples'] for c in d['classes']])")" = "$N $(python3 -c "print([$M] * $K)")" ]

serve d1 || { echo "0 passed, 1 failed"; exit 1; }

# ---- one epoch, 2 ranks, tail pad ----
epoch pad "$T/a.dpk" --tail pad --transforms rrc --flip
check "pad: both ranks exit 0" [ "$(rc pad 0)$(rc pad 1)" = "00" ]
check "pad: each rank gets ceil(N/2) = $(((N + 1) / 2)) samples" \
	[ "$(lines "$T/pad.r0")" -eq $(((N + 1) / 2)) -a "$(lines "$T/pad.r1")" -eq $(((N + 1) / 2)) ]
check "pad: equal step counts" [ "$(steps "$T/pad.r0")" = "$(steps "$T/pad.r1")" ]
real_ids pad >"$T/got"; expect_ids $N >"$T/want"
check "pad: non-padding ids are 0..$((N - 1)), each once" cmp -s "$T/got" "$T/want"
check "pad: one repeated sample (flag 4), none substituted" \
	[ "$(with_flag pad 4)" = 1 -a "$(with_flag pad 1)" = 0 ]
check "pad: every label is the sample's class" [ "$(bad_labels pad)" = 0 ]
check "pad: summary line on stderr" grep -q "samples, 0 substituted, 1 padding" "$T/pad.e0" "$T/pad.e1"

# ---- tail mask and drop ----
epoch mask "$T/a.dpk" --tail mask --sampling sequential
real_ids mask >"$T/got"
check "mask: ids 0..$((N - 1)) once, one padding sample (flag 2)" \
	sh -c "cmp -s '$T/got' '$T/want' && [ $(with_flag mask 2) = 1 ]"
epoch drop "$T/a.dpk" --tail drop
check "drop: floor(N/2) = $((N / 2)) per rank, no flags" \
	[ "$(lines "$T/drop.r0")" = $((N / 2)) -a "$(lines "$T/drop.r1")" = $((N / 2)) -a \
	  "$(awk '$4 != 0' "$T/drop.r0" "$T/drop.r1" | wc -l | tr -d ' ')" = 0 ]
check "drop: $((N / 2 * 2)) distinct ids" \
	[ "$(cat "$T/drop.r0" "$T/drop.r1" | awk '{print $2}' | sort -u | wc -l | tr -d ' ')" = $((N / 2 * 2)) ]

# ---- --steps stops early ----
"$BIN/ldcat" --socket "$T/s.sock" --dataset "$T/a.dpk" --job steps --steps 2 --batch 4 --crop 16 \
	>"$T/steps.out" 2>/dev/null
check "--steps 2: exit 0 after 2 batches of 4" [ $? -eq 0 -a "$(lines "$T/steps.out")" = 8 ]

# ---- missing dataset, bad usage ----
"$BIN/ldcat" --socket "$T/s.sock" --dataset "$T/nope.dpk" --job missing >/dev/null 2>"$T/missing.e"
check "missing dataset: ldcat exits 1" [ $? -eq 1 ]
check "missing dataset: the message names the path" grep -q "$T/nope.dpk" "$T/missing.e"
"$BIN/ldcat" --socket "$T/s.sock" >/dev/null 2>&1; check "no --dataset: exit 2" [ $? -eq 2 ]
"$BIN/ldcat" --dataset x --rank 2 --world 2 >/dev/null 2>&1; check "rank >= world: exit 2" [ $? -eq 2 ]
"$BIN/ldcat" --dataset x --crop 3y4 >/dev/null 2>&1; check "bad --crop: exit 2" [ $? -eq 2 ]
check "ldcat --help exits 0" sh -c "'$BIN/ldcat' --help | grep -q 'STEP ID LABEL FLAGS'"
# every loaderd option that takes a value refuses a bad one (exit 2, the option named) and starts
# nothing; an option's value never lands in another option
for opt in --max-pixels --max-conns --max-world --mem-share --idle-timeout --admin-share \
	--metrics-interval --workers --slots --task-samples --linger; do
	timeout 5 "$BIN/loaderd" --socket "$T/never.sock" "$opt" 0 >/dev/null 2>"$T/opt.e"
	rc=$?
	check "loaderd $opt 0: exit 2 naming $opt" sh -c "[ $rc -eq 2 ] && grep -q -- '$opt' '$T/opt.e'"
done
check "no socket made by a refused loaderd" [ ! -e "$T/never.sock" ]

# ---- a corrupted record: substituted, flagged and logged ----
X=40
cp "$T/a.dpk" "$T/bad.dpk"
corrupt_record "$T/bad.dpk" $X
check "the flipped byte makes sample $X bad" sh -c "'$BIN/dpack' verify '$T/bad.dpk' | grep -q 'bad sample $X:'"
epoch sub "$T/bad.dpk" --tail pad
check "bad record: both ranks exit 0" [ "$(rc sub 0)$(rc sub 1)" = "00" ]
check "bad record: sample $X is never delivered" [ "$(cat "$T/sub.r0" "$T/sub.r1" | awk -v x=$X '$2 == x' | wc -l | tr -d ' ')" = 0 ]
check "bad record: exactly one non-padding sample flagged substituted (1)" \
	[ "$(cat "$T/sub.r0" "$T/sub.r1" | awk '$4 == 1' | wc -l | tr -d ' ')" = 1 ]
cat "$T/sub.r0" "$T/sub.r1" | awk '$4 == 0 { print $2 }' | sort -n >"$T/got"
expect_ids $N $X >"$T/want"
check "bad record: the other ids are delivered once each" cmp -s "$T/got" "$T/want"
check "bad record: batch counts stay equal across ranks" \
	[ "$(lines "$T/sub.r0")" = "$(lines "$T/sub.r1")" -a "$(steps "$T/sub.r0")" = "$(steps "$T/sub.r1")" ]
check "bad record: labels match the delivered (substitute) ids" [ "$(bad_labels sub)" = 0 ]
check "bad record: loaderd's log names sample $X" grep -q "sample $X is bad" "$T/d1.log"
check "bad record: ldcat counts it in its summary" grep -q " [1-9][0-9]* substituted" "$T/sub.e0" "$T/sub.e1"

# The rank whose shard holds sample X fails, naming it; the other rank may have been given its
# whole epoch before the job failed (published batches stay good), or is told the job failed.
R=0; grep -q " 1$" "$T/sub.r1" && R=1
O=$((1 - R))
epoch fail "$T/bad.dpk" --on-bad fail
check "--on-bad fail: rank $R (holds sample $X) exits 1" [ "$(rc fail $R)" = 1 ]
check "--on-bad fail: its error names sample $X" grep -q "sample $X: checksum mismatch (policy: fail)" "$T/fail.e$R"
check "--on-bad fail: rank $O ends its epoch or is told that the job failed" \
	sh -c "[ \"\$(cat '$T/fail.rc$O')\" = 0 ] && [ \$(wc -l <'$T/fail.r$O') = $(((N + 1) / 2)) ] ||
	       grep -q 'job fail failed: sample $X' '$T/fail.e$O'"
check "--on-bad fail: sample $X never delivered" \
	[ "$(cat "$T/fail.r0" "$T/fail.r1" | awk -v x=$X '$2 == x' | wc -l | tr -d ' ')" = 0 ]

# ---- SIGTERM: clients are told, loaderd exits 0 and removes its socket ----
job=forever
rm -f "$T/forever.rc0"
( "$BIN/ldcat" --socket "$T/s.sock" --dataset "$T/a.dpk" --job forever --epochs 0 --batch 8 \
	--crop 16 >/dev/null 2>"$T/forever.e0"; echo $? >"$T/forever.rc0" ) &
sleep 0.5
kill -TERM "$LPID"
i=0
while kill -0 "$LPID" 2>/dev/null && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
check "SIGTERM: loaderd exits within 5 s" [ $i -lt 50 ]
wait "$LPID"; lrc=$?
LPID=""
check "SIGTERM: exit status 0 (got $lrc)" [ $lrc -eq 0 ]
check "SIGTERM: socket removed" [ ! -e "$T/s.sock" ]
i=0
while [ ! -s "$T/forever.rc0" ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
check "SIGTERM: the attached client exits 1 and says loaderd went" \
	sh -c "[ \"\$(cat '$T/forever.rc0')\" = 1 ] && grep -q loaderd '$T/forever.e0'"

# ---- the pread path: the same epoch, clean and with the bad record ----
serve d2 --io pread || no "loaderd --io pread starts"
epoch ppad "$T/a.dpk" --tail pad --transforms rrc --flip
real_ids ppad >"$T/got"; expect_ids $N >"$T/want"
check "pread: both ranks exit 0" [ "$(rc ppad 0)$(rc ppad 1)" = "00" ]
check "pread: non-padding ids are 0..$((N - 1)), each once" cmp -s "$T/got" "$T/want"
check "pread: every label is the sample's class" [ "$(bad_labels ppad)" = 0 ]
check "pread: same order as io_uring" cmp -s "$T/pad.r0" "$T/ppad.r0"
epoch psub "$T/bad.dpk" --tail pad
check "pread: bad record substituted and flagged, as with io_uring" \
	sh -c "[ \"\$(cat '$T/psub.rc0' '$T/psub.rc1' | tr -d '\\n')\" = 00 ] && cmp -s '$T/sub.r0' '$T/psub.r0' && cmp -s '$T/sub.r1' '$T/psub.r1'"
check "pread: loaderd's log names sample $X" grep -q "sample $X is bad" "$T/d2.log"

# ---- kill -9 leaves a stale socket; a new loaderd takes the path over at once ----
kill -KILL "$LPID"; wait "$LPID" 2>/dev/null; LPID=""
check "kill -9: the socket file is left behind" [ -S "$T/s.sock" ]
serve d3; started=$?
check "kill -9: a new loaderd starts on the same path" [ $started -eq 0 ]
"$BIN/ldcat" --socket "$T/s.sock" --dataset "$T/a.dpk" --job after --steps 3 --batch 8 --crop 16 \
	>"$T/after.out" 2>"$T/after.e"
check "kill -9: the new loaderd serves at once" [ $? -eq 0 -a "$(lines "$T/after.out")" = 24 ]
stop_loaderd

echo "$((n - fails)) passed, $fails failed"
[ $fails -eq 0 ]
