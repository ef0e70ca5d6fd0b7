#!/bin/sh
# it_cachesim.sh - tools/ldcachesim, the replay of loaderd's sampler through a cache of whole shards
# (docs/S3.md, "Caches smaller than the dataset"), held to what must be true of it:
#   a cache that holds the dataset fetches it once (1.0 in epoch 0, nothing after), both policies;
#   sequential reads with a quarter cache: LRU fetches everything each epoch, the future 0.75 from
#   epoch 1 on (the optimum: a cache of C saves at most C an epoch);
#   global shuffle, quarter cache: the future fetches less than LRU, both far above 1;
#   the windowed shuffle (block = a shard's samples): a window of W shards with 2W <= the cache
#   fetches the dataset at most once an epoch under LRU; 2W one past the cache fetches shards
#   again (the ranks of a step straddle two windows at a boundary); with W = cache / 4 the future fetches 0.75.
set -u
BIN=${BUILD:-build}/bin
. "$(dirname "$0")/lib.sh"
need_bins ldcachesim
sim() { "$BIN/ldcachesim" --samples 20000 --shard-records 200 --world 4 --batch 32 --epochs 3 "$@" |
	tail -1; }
# get JSON FIELD EPOCH
get() { python3 -c "import json, sys; print(json.loads(sys.argv[1])[sys.argv[2]][int(sys.argv[3])])" "$@"; }
j=$(sim --cache 1)
check "a cache of the whole dataset: fetched once (both policies)" sh -c "
	[ $(get "$j" lru 0) = 1.0 ] && [ $(get "$j" lru 2) = 0.0 ] && [ $(get "$j" future 1) = 0.0 ]"
j=$(sim --sampling sequential --cache 0.25)
check "sequential, a quarter cache: LRU 1.0 every epoch, the future 0.75 from epoch 1" sh -c "
	[ $(get "$j" lru 1) = 1.0 ] && [ $(get "$j" future 1) = 0.75 ] && [ $(get "$j" future 2) = 0.75 ]"
j=$(sim --cache 0.25)
check "global shuffle, a quarter cache: the future below LRU, both far above 1" \
	lt "$(get "$j" future 1)" "$(get "$j" lru 1)" && lt 10 "$(get "$j" future 1)"
j=$(sim --sampling block --window 12 --cache 0.25)
k=$(sim --sampling block --window 13 --cache 0.25)
check "windowed, 2W = 24 <= 25 shards cached: LRU at most once an epoch" lt "$(get "$j" lru 1)" 1.0001
check "windowed, 2W = 26, one shard past the cache: LRU fetches shards again" lt 1.0001 "$(get "$k" lru 1)"
j=$(sim --sampling block --window 6 --cache 0.25)
check "windowed, W = cache / 4: the future 0.75 an epoch from epoch 1, LRU above it" sh -c "
	[ $(get "$j" future 1) = 0.75 ] && [ $(get "$j" future 2) = 0.75 ]" &&
	lt "$(get "$j" future 1)" "$(get "$j" lru 1)"
echo "1..$n"
[ "$fails" -eq 0 ]
