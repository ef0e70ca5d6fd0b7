# lib.sh - helpers the benchmark scripts share; sourced: . "$(dirname "$0")/lib.sh"

now() { date +%s.%N; }

# cpu_s PID: the user + system CPU seconds of PID so far (HZ 100)
cpu_s() { awk '{printf "%.2f", ($14 + $15) / 100}' "/proc/$1/stat"; }

# evict FILE: drop FILE's pages from the page cache
evict() {
	python3 -c "import os, sys; fd = os.open(sys.argv[1], os.O_RDONLY); \
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)" "$1"
}

# ldcat_rate LDCAT SOCK LDPID DATASET JOB EPOCHS DIR [ldcat options]: EPOCHS epochs of DATASET
# through LDCAT (batch 256) from the loaderd LDPID serving on SOCK, as job JOB. Prints
# "samples/s cpu-s-per-M", the CPU being loaderd's and ldcat's together; ldcat's output, log and
# CPU times stay in DIR (ldcat.out, ldcat.log, ldcat.cpu).
ldcat_rate() {
	_l=$1 _s=$2 _p=$3 _d=$4 _j=$5 _e=$6 _w=$7
	shift 7
	_c0=$(cpu_s "$_p"); _t0=$(now)
	/usr/bin/time -f "%U %S" -o "$_w/ldcat.cpu" "$_l" --socket "$_s" --dataset "$_d" \
		--batch 256 --epochs "$_e" --job "$_j" "$@" >"$_w/ldcat.out" 2>>"$_w/ldcat.log"
	_t1=$(now); _c1=$(cpu_s "$_p")
	awk -v n="$(wc -l <"$_w/ldcat.out")" -v t="$(echo "$_t1 - $_t0" | bc)" \
	    -v c="$(echo "$_c1 - $_c0" | bc)" -v u="$(cat "$_w/ldcat.cpu")" 'BEGIN { split(u, x, " ");
		printf "%.0f %.2f", n / t, (c + x[1] + x[2]) / (n / 1e6) }'
}
