/* shares.h - balanced shares: how a global step's samples are split across ranks that run at
 * different speeds. Pure functions and one small log; no threads, no clock, no shared memory.
 *
 * A job that balances keeps WEIGHTS, one per rank, integers that sum to LDR_SHARES_ONE. Every
 * LDR_SHARES_EVERY steps the server takes each rank's reported compute time per sample as it came
 * with the release of a defined step (raw, from the ring: hostile; loader/srv_workers.c,
 * split_record), and ldr_shares_update() turns the previous weights and the reports into the
 * next ones: reports are clamped, the target is each rank's speed (1 / time) over the sum, the
 * step towards it is damped (half the way), and every weight keeps a floor. The new weights are
 * recorded in the job's split log from a step no rank has opened yet, so no step ever changes
 * its split once drawn. The split of a step is ldr_shares_split(log entry in force at that step,
 * the step's sample count): a pure function of what is recorded, so a rank that re-opens a step
 * the log still holds (a resumed job) gets the same split again. */
#ifndef LOADERD_SHARES_H
#define LOADERD_SHARES_H
#include <stdint.h>

#define LDR_SHARES_ONE (1u << 20)   /* the weights of a job sum to this */
#define LDR_SHARES_EVERY 4u         /* steps between share updates */
#define LDR_SHARES_LOG 64u          /* split log entries a job keeps (the oldest go first) */
#define LDR_SHARES_FLOOR_DIV 4u     /* no weight under 1 / (4 x world): a quarter of even */
#define LDR_SHARES_NS_MIN 1.0       /* a report is clamped into [NS_MIN, NS_MAX] ns per sample */
#define LDR_SHARES_NS_MAX 1e10      /* 10 s per sample */

/* What ldr_shares_update did with the reports: bit r of the masks is rank r (ranks >= 64 are
 * counted only). */
struct ldr_shares_note {
	uint32_t nonsense;          /* reports that were NaN, infinite or negative: ignored */
	uint32_t clamped;           /* finite positive reports outside [NS_MIN, NS_MAX]: clamped */
	uint32_t missing;           /* zero: not reported yet; the rank keeps its weight */
};

/* Even weights for @world ranks into @w (sum LDR_SHARES_ONE). */
void ldr_shares_even(uint32_t world, uint32_t *w);
/* Next weights from @prev (sum LDR_SHARES_ONE) and the ranks' raw reports @ns (compute ns per
 * sample, any double at all) into @out (may be @prev). Ranks without a usable report keep their
 * weight; the others share the rest in proportion to their speed, half way from where they were;
 * then every weight is raised to the floor (LDR_SHARES_ONE / (LDR_SHARES_FLOOR_DIV x world)) and
 * the sum made exactly LDR_SHARES_ONE. @note (NULL ok) counts what was ignored or clamped. */
void ldr_shares_update(uint32_t world, const uint32_t *prev, const double *ns, uint32_t *out,
		       struct ldr_shares_note *note);
/* Split @total samples (>= @world) over @world ranks by weights @w into @count: every rank
 * gets at least max(1, total / (LDR_SHARES_FLOOR_DIV x world)) and at most @cap (cap x world
 * >= total); the counts sum to @total; ties go to the lower rank. Writes the offsets (prefix
 * sums) into @offset when not NULL. 0, or -EINVAL when no split fits (total < world, cap too
 * small). */
int ldr_shares_split(uint32_t world, uint32_t total, uint32_t cap, const uint32_t *w,
		     uint32_t *count, uint32_t *offset);

/* The split log of a job: entries (from step, weights), at most LDR_SHARES_LOG, the oldest
 * dropped first. Caller's storage for the struct; the weights array is allocated. */
struct ldr_split_log {
	uint32_t world;
	unsigned n, head;           /* entries; index of the oldest */
	int dropped;                /* an entry was dropped: steps before the oldest are unknown */
	uint64_t from[LDR_SHARES_LOG];
	uint32_t *w;                /* LDR_SHARES_LOG x world */
};

/* 0 or -ENOMEM. Starts empty: every step is split evenly until the first push. */
int ldr_split_log_init(struct ldr_split_log *l, uint32_t world);
void ldr_split_log_fini(struct ldr_split_log *l);
/* The weights in force at @step: the newest entry from a step <= @step, or NULL (even: before
 * the first entry, or older than the log keeps). */
const uint32_t *ldr_split_log_at(const struct ldr_split_log *l, uint64_t step);
/* Like ldr_split_log_at, but NULL only when the log no longer knows @step (older than the
 * entries it keeps); before the first entry ever pushed, the even weights, written to @even
 * (world entries). */
const uint32_t *ldr_split_log_known_at(const struct ldr_split_log *l, uint64_t step,
				       uint32_t *even);
/* The newest entry's weights, or NULL when empty. */
const uint32_t *ldr_split_log_last(const struct ldr_split_log *l);
/* Record @w from @step on. @step must be above the newest entry's (-EINVAL otherwise). */
int ldr_split_log_push(struct ldr_split_log *l, uint64_t step, const uint32_t *w);

#endif
