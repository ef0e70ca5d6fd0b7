#!/bin/sh
# it_multinode.sh - two "nodes" on one machine (issue 18): two network namespaces joined by a veth
# pair (10.231.0.1/30 and .2, no other address is used), each with its own loaderd on its own
# socket and its own copy of the dataset, and mpirun (Open MPI, TCP) with 2 ranks per node.
#
# A node is a network namespace plus a private mount namespace in which the node's folder
# ($T/node-a, $T/node-b) is bind-mounted on the one path every node sees, $T/node: as on a
# cluster, the socket and the dataset have the same path on every node and different files behind
# it. The launch agent ($T/agent, what ssh is to mpirun on a cluster) is `agent HOST CMD`: it runs
# CMD with sh on node HOST (ip netns exec + unshare --mount --uts; the node's hostname is node-a or
# node-b). mpirun itself runs on node a; Open MPI starts its daemon on node b through the agent
# (--mca plm_rsh_agent), and the ranks talk over the veth only (btl tcp,self and both TCP
# interfaces limited to 10.231.0.0/30). Checks:
#   - an epoch of 4 ranks (2 per node): the ranks' samples (trainer --log-samples) are disjoint
#     and cover the dataset exactly; each node's loaderd served only its own node's ranks; the
#     bytes went over the veth (its counters);
#   - DDP equivalence across the nodes: 4 ranks x b end with the parameters of 1 rank x 4b;
#   - with the veth rate-limited by tc (tbf, both directions) and a model with many parameters
#     and little compute: the exposed allreduce is much longer than on the unlimited link;
#     ldprobe across the nodes (--hostfile, --launch-agent) measures each node's loader ceiling
#     on that node and says communication-limited; its batch advice (from how compute grows with
#     the batch, which it measures), applied, gives the exposed allreduce share it says, within
#     20 points, the allreduce costing about the same per step;
#   - node b's loaderd killed under a running job: node b's ranks fail saying loaderd went away,
#     and mpirun exits within seconds (nothing hangs on node a).
# Everything made here (namespaces, veth, qdiscs, processes, files) is removed on exit, failure
# and signals included. Skipped (exit 77, saying why) without root, CAP_NET_ADMIN, ip, tc,
# unshare or mpirun. About 90 s on 2 cores.
set -u
BIN=$(cd "${BUILD:-build}/bin" 2>/dev/null && pwd) || { echo "# ${BUILD:-build}/bin: not built"; exit 1; }
. "$(dirname "$0")/lib.sh"
need_bins trainer loaderd ldprobe ldcat loaderctl dsgen dpack

skip() { echo "# skip: $*"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "needs root (network namespaces, veth, tc, bind mounts)"
for c in ip tc unshare mpirun python3; do
	command -v "$c" >/dev/null 2>&1 || skip "no $c (scripts/deps.sh installs iproute2, util-linux, openmpi-bin)"
done

# Names of this run: namespaces, veth ends (at most 15 characters).
ID=$$
NSA=ldmn$ID-a NSB=ldmn$ID-b VA=ldmn${ID}a VB=ldmn${ID}b
IPA=10.231.0.1 IPB=10.231.0.2 NET=10.231.0.0/30
T=$(mktemp -d /tmp/it_multinode.XXXXXX)
mpi_session_in "$T"
V=$T/node   # the path every node sees its own folder at
LDA="" LDB=""

cleanup() {
	# processes in the namespaces (loaderd, ranks, orted), then the namespaces: deleting one
	# deletes its veth end, the pair with it, and the qdisc on it
	for ns in "$NSA" "$NSB"; do
		pids=$(ip netns pids "$ns" 2>/dev/null)
		[ -n "$pids" ] && kill -KILL $pids 2>/dev/null
	done
	stop_pid "$LDA"
	stop_pid "$LDB"
	# mpirun and launch agents of this run outside the namespaces, if any are left
	for p in $(pgrep -f "$T/" 2>/dev/null); do
		[ "$p" != $$ ] && kill -KILL "$p" 2>/dev/null
	done
	ip netns del "$NSA" 2>/dev/null
	ip netns del "$NSB" 2>/dev/null
	ip link del "$VA" 2>/dev/null
	[ -n "${KEEP:-}" ] || rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

# ---- the two nodes ----
if ! ip netns add "$NSA" 2>"$T/ip.err"; then
	skip "cannot make a network namespace ($(head -n 1 "$T/ip.err")): needs CAP_NET_ADMIN"
fi
ip netns add "$NSB" && ip link add "$VA" type veth peer name "$VB" &&
	ip link set "$VA" netns "$NSA" && ip link set "$VB" netns "$NSB" &&
	ip -n "$NSA" addr add "$IPA/30" dev "$VA" && ip -n "$NSB" addr add "$IPB/30" dev "$VB" &&
	ip -n "$NSA" link set "$VA" up && ip -n "$NSB" link set "$VB" up &&
	ip -n "$NSA" link set lo up && ip -n "$NSB" link set lo up 2>"$T/ip.err" ||
	{ echo "# setting up the veth pair failed:"; show "$T/ip.err"; exit 1; }
mkdir -p "$T/node-a" "$T/node-b" "$V"

# The launch agent: agent HOST CMD... (as ssh HOST CMD...: the words are joined and run by sh).
cat >"$T/agent" <<EOF
#!/bin/sh
# agent HOST CMD...: run CMD on the namespace node HOST of $T
host=\$1
shift
case \$host in
$IPA|node-a) ns=$NSA n=a ;;
$IPB|node-b) ns=$NSB n=b ;;
*) echo "agent: no node \$host here" >&2; exit 255 ;;
esac
exec ip netns exec "\$ns" unshare --mount --uts sh -c \
	'mount --bind "\$1" "\$2" && hostname "\$3" && shift 3 && exec sh -c "\$*"' \
	agent "$T/node-\$n" "$V" "node-\$n" "\$@"
EOF
chmod +x "$T/agent"
printf '%s slots=2\n%s slots=2\n' "$IPA" "$IPB" >"$T/hosts"
ok "two namespaces joined by a veth pair ($IPA, $IPB), a launch agent, a hostfile"

# Open MPI: root allowed; over TCP on the veth only; ranks launched on node b through the agent.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
export OMPI_MCA_btl=tcp,self OMPI_MCA_btl_tcp_if_include=$NET OMPI_MCA_oob_tcp_if_include=$NET
export OMPI_MCA_plm_rsh_agent=$T/agent OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_hwloc_base_binding_policy=none
GUARD="timeout -k 5 90"
# on NODE CMD...: CMD (one shell string) on node a or b
on() { node=$1; shift; "$T/agent" "node-$node" "$@"; }
# mp NAME NP [trainer options...]: mpirun -np NP trainer on both nodes (from node a), output in
# $T/NAME.out. Returns mpirun's status. In the background and waited for, so that a signal to
# this script is handled (cleanup) at once, not after the run.
mp() {
	name=$1 np=$2
	shift 2
	$GUARD "$T/agent" "$IPA" "exec mpirun --hostfile '$T/hosts' -np $np '$BIN/trainer' $*" \
		>"$T/$name.out" 2>&1 &
	wait $!
}
# veth bytes sent from node a
txbytes() {
	ip -n "$NSA" -s -j link show "$VA" |
		python3 -c 'import json, sys; print(json.load(sys.stdin)[0]["stats64"]["tx"]["bytes"])'
}

# ---- a dataset, one copy per node; a loaderd per node ----
if ! { "$BIN/dsgen" imagefolder "$T/tree" --classes 4 --per-class 25 --min-side 48 --max-side 96 \
		>/dev/null && "$BIN/dpack" pack --no-fsync "$T/tree" "$T/node-a/d.dpk" >/dev/null &&
	cp "$T/node-a/d.dpk" "$T/node-b/d.dpk"; }; then
	echo "# could not make the dataset"
	exit 1
fi
rm -rf "$T/tree"
NSAMP=100
# start_ld NODE: node NODE's loaderd on $V/ld.sock (one worker), through a wrapper that runs it
# there (the agent execs into it, so its pid is loaderd's); pid in LDA or LDB, log in
# $T/ld-NODE.log. start_loaderd (lib.sh) waits for its --ready-fd line.
start_ld() {
	cat >"$T/loaderd-$1" <<EOF
#!/bin/sh
cmd="exec '$BIN/loaderd'"
for a in "\$@"; do cmd="\$cmd '\$a'"; done
exec "$T/agent" node-$1 "\$cmd"
EOF
	chmod +x "$T/loaderd-$1"
	LOADERD=$T/loaderd-$1 start_loaderd "$T/ld-$1.log" --socket "$V/ld.sock" --workers 1 --linger 5
	rc=$?
	if [ "$1" = a ]; then LDA=$LPID; else LDB=$LPID; fi
	LPID=""
	return $rc
}
check "a loaderd on node a" start_ld a
check "a loaderd on node b" start_ld b
check "each on its own socket: the same path, two files" \
	[ -S "$T/node-a/ld.sock" -a -S "$T/node-b/ld.sock" -a ! -e "$V/ld.sock" ]
on a "hostname" >"$T/hn.a" 2>&1
check "the agent runs on node a as node-a ($(cat "$T/hn.a"))" grep -qx node-a "$T/hn.a"

# ---- an epoch over 4 ranks on 2 nodes: disjoint, covering samples ----
tx0=$(txbytes)
t0=$(now)
mp epoch 4 --socket "$V/ld.sock" --dataset "$V/d.dpk" --device host --crop 32 --batch 8 \
	--epochs 1 --log-every 0 --log-samples "$T/samples"
rc=$?
echo "# epoch run: $(since "$t0") s"
check "mpirun -np 4 across the nodes, one epoch: exit 0 (exit $rc)" [ $rc -eq 0 ]
[ $rc -eq 0 ] || show "$T/epoch.out"
# served NODE: the ranks its loaderd attached, in order, on one line
served() { grep -o 'rank [0-9]/4 attached' "$T/ld-$1.log" | cut -c6 | sort | tr '\n' ' '; }
check "node a's loaderd served ranks 0 and 1 only ($(served a))" [ "$(served a)" = "0 1 " ]
check "node b's loaderd served ranks 2 and 3 only ($(served b))" [ "$(served b)" = "2 3 " ]
check "the 4 ranks' samples (not padding) are disjoint and cover the $NSAMP samples exactly" \
	python3 - "$T/samples" "$NSAMP" <<'PY'
import sys
prefix, n = sys.argv[1], int(sys.argv[2])
seen, per = [], []
for r in range(4):
    ids = [int(l.split()[1]) for l in open('%s.%d' % (prefix, r))
           if l.strip() and not int(l.split()[3]) & 2]
    per.append(len(ids))
    seen += ids
print('# samples per rank %s, %d in all, %d distinct' % (per, len(seen), len(set(seen))))
sys.exit(not (len(seen) == len(set(seen)) == n and set(seen) == set(range(n))))
PY
tx1=$(txbytes)
check "the run went over the veth ($((tx1 - tx0)) bytes sent by node a)" [ $((tx1 - tx0)) -gt 1000000 ]

# ---- DDP equivalence across the nodes ----
B=16
DDP="--synthetic --device host --crop 32 --steps 20 --log-every 0"
$GUARD "$BIN/trainer" $DDP --batch $B --lr 0 --dump-params "$T/init.bin" >"$T/init.out" 2>&1 ||
	no "initial parameters (--lr 0)"
$GUARD "$BIN/trainer" $DDP --batch $B --dump-params "$T/r1.bin" >"$T/r1.out" 2>&1
check "1 rank x $B (the reference)" [ $? -eq 0 ]
tx0=$(txbytes)
mp r4 4 $DDP --batch $((B / 4)) --first-bucket-mb 0.005 --bucket-mb 0.01 --dump-params "$T/r4.bin"
rc=$?
tx1=$(txbytes)
check "4 ranks x $((B / 4)) on 2 nodes, 4 buckets (exit $rc)" [ $rc -eq 0 ]
[ $rc -eq 0 ] || show "$T/r4.out"
check "  same parameters as 1 rank x $B (1e-5)" cmp_params same "$T/r1.bin" "$T/r4.bin" "$T/init.bin"
# 20 allreduces of 199434 floats: at least one gradient's worth (0.8 MB) each way per step
check "  the gradients went over the veth ($((tx1 - tx0)) bytes sent by node a)" [ $((tx1 - tx0)) -gt 16000000 ]
$GUARD "$BIN/trainer" $DDP --batch $((B / 4)) --dump-params "$T/h1.bin" >"$T/h1.out" 2>&1
check "  differs from 1 rank x $((B / 4)) (the check can fail)" cmp_params differ "$T/r4.bin" "$T/h1.bin" "$T/init.bin"

# ---- a slow network: tc on the veth, a model with many parameters and little compute ----
# 2M parameters (8 MiB of gradient), batch 1: compute is a few ms, the allreduce crosses the link.
RATE=${MULTINODE_RATE:-200mbit}
MODEL="synthetic:flops=1M,params=2M"
# run NAME BATCH: 10 steps of the model through the loaderds, the report in $T/NAME.json
run() {
	mp "$1" 4 --socket "$V/ld.sock" --dataset "$V/d.dpk" --device host --crop 32 --model $MODEL \
		--batch "$2" --steps 10 --warmup 2 --log-every 0 --report-json "$T/$1.json"
}
# figures REPORT: "comm_ms share step_ms" of a trainer report (the least exposed rank's allreduce
# per step, as the verdict reads it)
figures() {
	python3 -c "
import json, sys
r = json.load(open(sys.argv[1]))
c = r['causes']['comm']
print('%.1f %.3f %.1f %s' % (c * r['step_ms'], c, r['step_ms'], r['verdict']))" "$1"
}
run fast 1
check "unlimited link: the model runs, batch 1 (exit $?)" [ -s "$T/fast.json" ]
set -- $(figures "$T/fast.json" 2>/dev/null || echo 0 0 0 none)
fast_ms=$1
echo "# unlimited link: exposed allreduce $1 ms of $3 ms per step ($4)"
for x in "$NSA $VA" "$NSB $VB"; do
	set -- $x
	ip netns exec "$1" tc qdisc add dev "$2" root tbf rate "$RATE" burst 1mb latency 100ms ||
		no "tc qdisc add dev $2 root tbf rate $RATE"
done
tbf() { ip netns exec "$1" tc qdisc show dev "$2" | grep -q tbf; }
check "tc: both ends of the veth limited to $RATE" eval 'tbf "$NSA" "$VA" && tbf "$NSB" "$VB"'

# ldprobe across the nodes, from node a: each node's loader ceiling on that node, the verdict
# and the advice; its real run (trainer-real.json) is the same model and batch as the run above
t0=$(now)
$GUARD "$T/agent" "$IPA" "exec '$BIN/ldprobe' --hostfile '$T/hosts' --launch-agent '$T/agent' \
	--socket '$V/ld.sock' --dataset '$V/d.dpk' --model $MODEL --crop 32 --batch 1 \
	--device host --seconds 1.5 --out '$T/probe'" >"$T/probe.out" 2>"$T/probe.err" &
wait $!
rc=$?
echo "# ldprobe: $(since "$t0") s"
check "ldprobe --hostfile across the nodes: exit 0 (exit $rc)" [ $rc -eq 0 ]
[ $rc -eq 0 ] || { show "$T/probe.err"; show "$T/probe.out"; }
sed -n '/^  node /p; /^verdict/,$p' "$T/probe.out" | sed 's/^/# /'
check "  a loader ceiling for each node, measured there" sh -c \
	"grep -q '^  node $IPA (ranks 0-1): .* samples/s' '$T/probe.out' &&
	 grep -q '^  node $IPB (ranks 2-3): .* samples/s' '$T/probe.out'"
check "  verdict: communication-limited" \
	grep -q "^ldprobe: .* verdict=communication-limited$" "$T/probe.out"
# the advice: --batch N ... brings its share to about P% (or: even --batch N leaves about P%)
adv=$(sed -n 's/.*larger batch: .* so \(even \)\{0,1\}--batch \([0-9]*\) .* about \([0-9]*\)%.*/\2 \3/p' \
	"$T/probe.out" | head -n 1)
set -- $adv
check "  the advice names a larger batch and the share it expects, measured (${adv:-none})" [ $# -eq 2 ]
nb=${1:-8} want=${2:-0}
set -- $(figures "$T/probe/trainer-real.json" 2>/dev/null || echo 0 0 0 none)
before_ms=$1 before=$2
echo "# $RATE link: exposed allreduce $1 ms of $3 ms per step ($4)"
check "  the trainer's report says communication-limited" [ "$4" = communication-limited ]
check "  the exposed allreduce is at least 1.5x the unlimited link's ($before_ms ms vs $fast_ms ms)" \
	lt "1.5 * $fast_ms" "$before_ms"
run after "$nb"
rc=$?
check "the advice applied: --batch $nb through the loaderds (exit $rc)" [ $rc -eq 0 ]
[ $rc -eq 0 ] || show "$T/after.out"
set -- $(figures "$T/after.json" 2>/dev/null || echo 0 1 0 none)
after_ms=$1 after=$2
echo "# exposed allreduce at $RATE: batch 1 $before_ms ms/step (share $before), batch $nb $after_ms ms/step (share $after; ldprobe said about $want%)"
check "  its share is what ldprobe said, within 20 points ($want% said, $(python3 -c "print(round(100 * $after))")% measured)" \
	python3 -c "import sys; sys.exit(not abs(100 * $after - $want) <= 20)"
check "  the allreduce costs about the same per step ($before_ms -> $after_ms ms, within 2x)" \
	python3 -c "import sys; a, b = $before_ms, $after_ms; sys.exit(not (b > 0 and a / 2 <= b <= 2 * a))"
for x in "$NSA $VA" "$NSB $VB"; do
	set -- $x
	ip netns exec "$1" tc qdisc del dev "$2" root 2>/dev/null
done

# ---- node b's loaderd killed under a running job ----
base=$(grep -c 'attached' "$T/ld-b.log")
mp kill 4 --socket "$V/ld.sock" --dataset "$V/d.dpk" --device host --crop 32 --batch 4 \
	--steps 1000000 --log-every 0 &
mpid=$!
i=0
while [ "$(grep -c 'attached' "$T/ld-b.log")" -lt $((base + 2)) ] && [ $i -lt 200 ]; do sleep 0.1; i=$((i + 1)); done
sleep 0.5
kill_wait "$LDB" $mpid
LDB=""
check "node b's loaderd killed: mpirun exits non-zero (exit $rc)" [ $rc -ne 0 ]
check "  within $dt s of the kill (< 15)" lt "$dt" 15
check "  a rank of node b says loaderd went away" \
	grep -Eq "rank [23].*loaderd closed the connection" "$T/kill.out"
[ $rc -ne 0 ] && grep -q "loaderd closed" "$T/kill.out" || show "$T/kill.out"
sleep 0.3
left() { [ -z "$(ip netns pids "$NSB")" ] && [ "$(ip netns pids "$NSA" | grep -vx "$LDA" | wc -l)" -eq 0 ]; }
check "  no rank left on either node (node a's loaderd still runs)" left
check "  node a's loaderd still runs" kill -0 "$LDA"

echo "$((n - fails)) passed, $fails failed"
[ "$fails" -eq 0 ]
