#!/bin/sh
# it_metrics.sh - loaderd --metrics-file, read by a real Prometheus parser (prometheus_client's, from
# Debian's python3-prometheus-client): a 2-rank job over a dataset with a corrupt record and an
# unbounded job stopped early run through ldcat; the file's counters agree with what the clients
# read (samples, steps, bad records; an unbounded rank at most a ring ahead), its types are right,
# it is complete on every one of many reads while it is rewritten every 0.2 s, it is written once
# more at shutdown, and a bad interval or an unwritable directory are handled. The per-rank batch
# latency: there for every rank on every read, never decreasing, its mean (/ steps) above 0 and
# below loaderd's uptime; loaderctl stats shows that mean per rank, "-" for a rank with no steps.
set -u
. "$(dirname "$0")/lib.sh"
BUILD=${BUILD:-build}
BIN=$BUILD/bin
need_bins loaderd ldcat loaderctl dsgen dpack
need_python "import prometheus_client.parser" python3-prometheus-client
T=$(mktemp -d /tmp/it_metrics.XXXXXX)
WPID=""
trap 'stop_pid "$WPID"; stop_loaderd; rm -rf "$T"' EXIT
trap 'exit 130' INT TERM HUP

# ---- the parser's side: prom.py MODE FILE ... prints "PASS desc" / "FAIL desc" lines ----
cat >"$T/prom.py" <<'PYEOF'
import json, os, sys, time
from prometheus_client.parser import text_string_to_metric_families

# Every family the file has, as the parser names them (a counter's family drops _total).
FAMILIES = {
    "loaderd_uptime_seconds": "gauge", "loaderd_workers": "gauge",
    "loaderd_workers_busy_ratio": "gauge", "loaderd_workers_busy_seconds": "counter",
    "loaderd_ring_memory_bytes": "gauge", "loaderd_ring_memory_limit_bytes": "gauge",
    "loaderd_connections": "gauge", "loaderd_jobs": "gauge", "loaderd_ranks_attached": "gauge",
    "loaderd_job_info": "gauge", "loaderd_job_world": "gauge", "loaderd_job_failed": "gauge",
    "loaderd_bad_records": "counter", "loaderd_samples": "counter", "loaderd_steps": "counter",
    "loaderd_rank_released_step": "gauge", "loaderd_rank_attached": "gauge",
    "loaderd_rank_attaches": "counter", "loaderd_ring_slots": "gauge",
    "loaderd_ring_slots_occupied": "gauge", "loaderd_ring_occupancy_ratio": "gauge",
    "loaderd_ring_empty_seconds": "counter", "loaderd_fill_seconds": "counter",
    "loaderd_batch_latency_seconds": "counter",
    "loaderd_cpu_budget_cores": "gauge", "loaderd_workers_needed": "gauge",
    "loaderd_job_demand_samples_per_second": "gauge", "loaderd_job_target_steps": "gauge",
    "loaderd_job_weight": "gauge", "loaderd_job_cpu_cores": "gauge",
    "loaderd_job_cpu_seconds": "counter",
}

def parse(text):
    """The families of @text; raises on a malformed or incomplete file."""
    if not text.endswith("\n"):
        raise ValueError("does not end with a newline")
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    missing = set(FAMILIES) - set(fams)
    if missing:
        raise ValueError("families missing: %s" % sorted(missing))
    return fams

def value(fams, fam, **labels):
    for s in fams[fam].samples:
        if all(s.labels.get(k) == v for k, v in labels.items()):
            return s.value
    raise KeyError("%s%s" % (fam, labels))

def report(ok, desc):
    print("%s %s" % ("PASS" if ok else "FAIL", desc))

mode, path = sys.argv[1], sys.argv[2]
if mode == "watch":
    # Read the file until STOP exists; every read must parse and be complete, and have a batch
    # latency for every rank (the ranks of loaderd_steps) that never goes down between reads.
    stop = sys.argv[3]
    reads = bad = 0
    seen = set()
    lat = {}
    while not os.path.exists(stop):
        try:
            text = open(path).read()
        except FileNotFoundError:
            bad += 1
            text = None
        if text is not None:
            reads += 1
            try:
                fams = parse(text)
                seen.add(value(fams, "loaderd_uptime_seconds"))
                key = lambda s: tuple(sorted(s.labels.items()))
                now = {key(s): s.value for s in fams["loaderd_batch_latency_seconds"].samples}
                ranks = {key(s) for s in fams["loaderd_steps"].samples}
                if set(now) != ranks:
                    raise ValueError("batch latency for %s, steps for %s" %
                                     (sorted(now), sorted(ranks)))
                for k, v in now.items():
                    if v < lat.get(k, 0):
                        raise ValueError("batch latency %s went down: %g -> %g" % (k, lat[k], v))
                    lat[k] = v
            except Exception as e:
                bad += 1
                print("# read %d: %s" % (reads, e))
        time.sleep(0.002)
    print(json.dumps({"reads": reads, "rewrites": len(seen), "bad": bad}))
    sys.exit(0)

fams = parse(open(path).read())
if mode == "types":
    for name, typ in sorted(FAMILIES.items()):
        if fams[name].type != typ:
            report(False, "%s is a %s, not a %s" % (name, fams[name].type, typ))
    report(all(fams[n].type == t for n, t in FAMILIES.items()),
           "every family has its type (%d families)" % len(FAMILIES))
    counters = [s for f in fams.values() if f.type == "counter" for s in f.samples]
    report(all(s.name.endswith("_total") for s in counters), "every counter sample ends in _total")
elif mode == "job":
    # job JOB WORLD SLOTS BATCH EXACT, then per rank: CONSUMED STEPS; then SUBSTITUTED
    job, world, slots, batch, exact = sys.argv[3], *map(int, sys.argv[4:8])
    rest = list(map(int, sys.argv[8:]))
    for r in range(world):
        consumed, steps = rest[2 * r], rest[2 * r + 1]
        lab = dict(job=job, rank=str(r))
        got = value(fams, "loaderd_samples", **lab)
        hi = consumed if exact else consumed + slots * batch
        report(consumed <= got <= hi, "%s rank %d: loaderd_samples_total %g in [%d, %d] "
               "(read by the client: %d)" % (job, r, got, consumed, hi, consumed))
        st = value(fams, "loaderd_steps", **lab)
        hi = steps if exact else steps + slots
        report(steps <= st <= hi, "%s rank %d: loaderd_steps_total %g in [%d, %d]" %
               (job, r, st, steps, hi))
        io = value(fams, "loaderd_fill_seconds", phase="io", **lab)
        dec = value(fams, "loaderd_fill_seconds", phase="decode", **lab)
        report(io > 0 and dec >= 0, "%s rank %d: fill seconds io %g, decode %g" % (job, r, io, dec))
        report(value(fams, "loaderd_rank_attaches", **lab) == 1, "%s rank %d: attached once" % (job, r))
        report(value(fams, "loaderd_rank_attached", **lab) == 0, "%s rank %d: detached now" % (job, r))
        e = value(fams, "loaderd_ring_empty_seconds", **lab)
        report(e >= 0, "%s rank %d: ring empty %g s" % (job, r, e))
        lat = value(fams, "loaderd_batch_latency_seconds", **lab)
        up = value(fams, "loaderd_uptime_seconds")
        report(lat >= 0 and (st == 0 or 0 < lat / st < up), "%s rank %d: batch latency %g s over "
               "%g steps, mean in (0, uptime %g s)" % (job, r, lat, st, up))
    subs = rest[2 * world]
    bad = value(fams, "loaderd_bad_records", job=job)
    if subs >= 0:
        report(bad == subs, "%s: loaderd_bad_records_total %g = samples substituted at the "
               "clients %d" % (job, bad, subs))
    report(value(fams, "loaderd_job_world", job=job) == world, "%s: loaderd_job_world %d" % (job, world))
elif mode == "get":
    # get FAMILY [LABEL=VALUE...]: print the value
    print(value(fams, sys.argv[3], **dict(a.split("=", 1) for a in sys.argv[4:])))
PYEOF
# pycheck MODE ARGS...: run prom.py on $T/m.prom and turn its PASS/FAIL lines into checks.
pycheck() {
	m=$1
	shift
	"$PY" "$T/prom.py" "$m" "$T/m.prom" "$@" >"$T/py.out" 2>&1 ||
		echo "FAIL prom.py $m did not run: $(tail -n 3 "$T/py.out" | tr '\n' ' ')" >>"$T/py.out"
	while IFS= read -r line; do
		case "$line" in
		"PASS "*) ok "${line#PASS }" ;;
		"FAIL "*) no "${line#FAIL }" ;;
		*) echo "# $line" ;;
		esac
	done <"$T/py.out"
}
metric() { "$PY" "$T/prom.py" get "$T/m.prom" "$@"; }

# ---- a dataset of 90 raw records with record 40 corrupt ----
"$BIN/dsgen" npy "$T/x.npy" "$T/y.npy" --count 90 --height 8 --width 8 --channels 3 \
	--classes 5 >/dev/null && "$BIN/dpack" pack --no-fsync "$T/x.npy" "$T/y.npy" "$T/d.dpk" >/dev/null &&
	corrupt_record "$T/d.dpk" 40
check "a 90-record dataset with record 40 corrupt" [ $? -eq 0 ]

# ---- bad options ----
"$BIN/loaderd" --socket "$T/x.sock" --metrics-file "$T/m.prom" --metrics-interval 0 2>/dev/null
check "--metrics-interval 0: exit 2" [ $? -eq 2 ]
"$BIN/loaderd" --socket "$T/x.sock" --metrics-file "" 2>/dev/null
check "--metrics-file '': exit 2" [ $? -eq 2 ]

serve_loaderd "$T/s.sock" "$T/ld.log" --metrics-file "$T/m.prom" --metrics-interval 0.2 --slots 4
i=0
while [ ! -s "$T/m.prom" ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
check "the file is written at start" [ -s "$T/m.prom" ]
check "no temporary file is left beside it" [ "$(ls "$T" | grep -c 'm\.prom\.')" = 0 ]

# ---- a reader that reads the file over and over while it is rewritten ----
"$PY" "$T/prom.py" watch "$T/m.prom" "$T/stop" >"$T/watch.out" 2>&1 &
WPID=$!

# ---- a bounded 2-rank job (2 epochs) and an unbounded one stopped after 7 steps ----
for r in 0 1; do
	( "$BIN/ldcat" --socket "$T/s.sock" --dataset "$T/d.dpk" --job two --world 2 --rank $r \
		--batch 8 --crop 0 --epochs 2 --timeout-ms 10000 >"$T/two.r$r" 2>"$T/two.e$r"
	  echo $? >"$T/two.rc$r" ) &
done
"$BIN/ldcat" --socket "$T/s.sock" --dataset "$T/d.dpk" --job open --batch 4 --crop 0 --epochs 0 \
	--slots 3 --steps 7 >"$T/open.r0" 2>"$T/open.e0"
check "the unbounded job: ldcat reads 7 steps, exit 0" [ $? -eq 0 ]
i=0
while { [ ! -s "$T/two.rc0" ] || [ ! -s "$T/two.rc1" ]; } && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
check "the 2-rank job: both ranks exit 0" [ "$(cat "$T/two.rc0" "$T/two.rc1" 2>/dev/null | tr -d '\n')" = 00 ]
sleep 1  # detached, and the file rewritten since
touch "$T/stop"
wait "$WPID"
WPID=""
check "the reader ran: $(cat "$T/watch.out" | tail -n 1)" \
	"$PY" -c "import json,sys; d = json.loads(open('$T/watch.out').read().splitlines()[-1]);
sys.exit(not (d['reads'] >= 20 and d['rewrites'] >= 3))"
check "every read found a whole file (parsed, every family there)" \
	"$PY" -c "import json,sys; d = json.loads(open('$T/watch.out').read().splitlines()[-1]);
sys.exit(d['bad'] != 0)"
grep '^# read' "$T/watch.out" | head -n 5

# ---- the counters against what the clients read ----
lines() { wc -l <"$1" | tr -d ' '; }
steps() { awk '{print $1}' "$1" | sort -u | wc -l | tr -d ' '; }
subs=$(cat "$T/two.r0" "$T/two.r1" | awk 'int($4) % 2 == 1' | wc -l | tr -d ' ')
check "the clients saw record 40 substituted ($subs samples)" [ "$subs" -ge 1 ]
pycheck types
pycheck job two 2 4 8 1 "$(lines "$T/two.r0")" "$(steps "$T/two.r0")" \
	"$(lines "$T/two.r1")" "$(steps "$T/two.r1")" "$subs"
pycheck job open 1 3 4 0 "$(lines "$T/open.r0")" "$(steps "$T/open.r0")" -1
check "loaderd_jobs 2, loaderd_connections 0, loaderd_ranks_attached 0" \
	[ "$(metric loaderd_jobs) $(metric loaderd_connections) $(metric loaderd_ranks_attached)" = "2.0 0.0 0.0" ]
check "loaderd_workers 1, uptime > 1 s" sh -c "[ \"\$('$PY' '$T/prom.py' get '$T/m.prom' loaderd_workers)\" = 1.0 ] &&
	'$PY' -c 'import sys; sys.exit(not $(metric loaderd_uptime_seconds) > 1)'"
check "the job's dataset is a label of loaderd_job_info" \
	[ "$(metric loaderd_job_info job=two dataset="$T/d.dpk")" = 1.0 ]

# ---- loaderctl stats: each rank's mean batch latency (the file's sum / steps), - for none ----
"$BIN/loaderctl" --socket "$T/s.sock" stats two >"$T/two.stats" 2>&1
check "loaderctl stats two: exit 0" [ $? -eq 0 ]
cat "$T/two.stats" | sed 's/^/# /'
for r in 0 1; do
	sum=$(metric loaderd_batch_latency_seconds job=two rank=$r)
	st=$(metric loaderd_steps job=two rank=$r)
	check "loaderctl stats two: rank $r's batch latency is the file's $sum s / $st steps, in ms" \
		"$PY" -c "import re, sys
m = re.search(r'^  rank $r: detached, resumes at step [0-9]+, batch latency ([0-9.]+) ms$',
              open('$T/two.stats').read(), re.M)
sys.exit(not (m and float(m.group(1)) > 0 and abs(float(m.group(1)) - $sum * 1e3 / $st) < 0.006))"
done
"$BIN/ldcat" --socket "$T/s.sock" --dataset "$T/d.dpk" --job half --world 2 --rank 0 --batch 4 \
	--crop 0 --epochs 0 --steps 2 >/dev/null 2>"$T/half.e0"
check "rank 0 of a 2-rank job alone: ldcat reads 2 steps, exit 0" [ $? -eq 0 ]
check "loaderctl stats half: the rank that never attached is counted, not listed (O(attached))" \
	sh -c "'$BIN/loaderctl' --socket '$T/s.sock' stats half |
		grep -q '^  1 other rank not attached (1 never attached)\$'"
check "loaderctl --json stats half: rank 0 listed with batch_latency_ms > 0, rank 1 counted" \
	sh -c "'$BIN/loaderctl' --socket '$T/s.sock' --json stats half | '$PY' -c 'import json, sys
j = json.load(sys.stdin)[0]
r = j[\"ranks\"]
sys.exit(not (len(r) == 1 and r[0][\"rank\"] == 0 and r[0][\"batch_latency_ms\"] > 0 and
              j[\"ranks_not_listed\"] == 1 and j[\"ranks_never_attached\"] == 1 and
              j[\"samples\"] == r[0][\"samples\"]))'"
stop_loaderd

# ---- written once more at shutdown; an unwritable directory is logged, not fatal ----
rm -f "$T/m.prom"
serve_loaderd "$T/s.sock" "$T/ld2.log" --metrics-file "$T/m.prom" --metrics-interval 3600
i=0
while [ ! -s "$T/m.prom" ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
"$BIN/ldcat" --socket "$T/s.sock" --dataset "$T/d.dpk" --job late --batch 4 --crop 0 --epochs 0 \
	--steps 3 >/dev/null 2>&1
stop_loaderd
check "at shutdown the file gets the job that ran after the first write" \
	"$PY" -c "import sys; sys.exit(not $(metric loaderd_samples job=late rank=0 2>/dev/null || echo 0) >= 12)"
serve_loaderd "$T/s.sock" "$T/ld3.log" --metrics-file "$T/nodir/m.prom" --metrics-interval 0.2
sleep 0.5
check "a metrics file in a missing directory: loaderd serves and logs why" \
	sh -c "'$BIN/ldcat' --socket '$T/s.sock' --dataset '$T/d.dpk' --job nodir --batch 4 --crop 0 \
		--epochs 0 --steps 2 >/dev/null 2>&1 && grep -q 'metrics file $T/nodir/m.prom: No such file' '$T/ld3.log'"
check "... once, not every interval" [ "$(grep -c 'metrics file' "$T/ld3.log")" = 1 ]
stop_loaderd

echo "$((n - fails)) passed, $fails failed"
[ "$fails" -eq 0 ]
