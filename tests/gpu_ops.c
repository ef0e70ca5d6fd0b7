/* gpu_ops.c - the CUDA device's compute ops against the host device, op by op (issue 7: the mlp's
 * cuBLAS forward/backward matches the host implementation; gpu_mlp.c runs the whole model).
 *
 * Every op gets the same seeded inputs on both devices (uploaded on the copy stream, run on the
 * compute stream, downloaded after it) and the outputs are compared:
 *   gemm          all four transpose combinations at odd sizes (1-wide, and k = 1031 too), with
 *                 beta 0 and beta -0.5 over a non-zero C: |cuda - host| <= 1e-4 x (|alpha| sum_k
 *                 |a_ik b_kj| + |beta c_ij|) for every element, the usual GEMM error bound's form
 *                 (relative to the magnitudes summed, not to a result that cancellation may bring
 *                 near zero; cuBLAS and OpenBLAS sum in different orders)
 *   pool_u8, bias_act, relu_bwd, sgd, scale
 *                 bit for bit: dev_cuda.cu says its elementwise kernels round like dev_host.c (no
 *                 fused multiply-add); this checks that claim
 *   col_sum       |diff| <= 1e-5 x (sum_i |dy_ij| + |db_j|) per column (another summation order)
 *   softmax_xent  dlogits |diff| <= 1e-6 + 1e-5 |host|; the loss sum to 1e-9 relative; the count of
 *                 correct predictions exactly (rows with tied maxima are included: the lowest
 *                 index wins on both); with and without weights, zero weights, all-zero weights;
 *                 a label outside [0, cols) is -EINVAL on both, and the device works afterwards.
 * Inputs are uniform in [-1, 1) unless said otherwise. */
#include "tests/gpu_util.h"
#include "trainer/dev.h"

#define S TRN_STREAM_COMPUTE
#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

static struct gpu_rng g_rng;

static float *randv(size_t n)
{
	float *x = xmalloc(n * sizeof(float));

	fill_uniform(&g_rng, x, n, -1.0f, 1.0f);
	return x;
}

/* ---- gemm ---- */

/* C = alpha op(A) op(B) + beta C0 on @d; result into @C. 0 or the op's error. */
static int gemm_on(struct trn_dev *d, int ta, int tb, int m, int n, int k, float alpha,
		   const float *A, const float *B, float beta, const float *C0, float *C)
{
	size_t na = (size_t)m * k, nb = (size_t)k * n, nc = (size_t)m * n;
	float *dA = dev_put(d, A, na * 4), *dB = dev_put(d, B, nb * 4), *dC = dev_put(d, C0, nc * 4);
	int ret = d->ops->gemm(d, S, ta, tb, m, n, k, alpha, dA, dB, beta, dC);

	if (ret == 0)
		dev_get(d, C, dC, nc * 4);
	d->ops->free(d, dA);
	d->ops->free(d, dB);
	d->ops->free(d, dC);
	return ret;
}

static void test_gemm(struct trn_dev *g, struct trn_dev *h)
{
	static const int sz[][3] = { { 37, 53, 71 }, { 1, 129, 17 }, { 129, 1, 257 }, { 64, 64, 64 },
				     { 200, 150, 1031 }, { 3, 5, 1 } };
	static const float betas[] = { 0.0f, -0.5f };
	const float alpha = 0.75f;

	for (int ta = 0; ta < 2; ta++)
		for (int tb = 0; tb < 2; tb++) {
			double worst = 0;
			int ok = 1, cases = 0;
			for (size_t c = 0; c < NELEM(sz); c++)
				for (size_t bi = 0; bi < NELEM(betas); bi++) {
					int m = sz[c][0], n = sz[c][1], k = sz[c][2];
					float beta = betas[bi];
					size_t nc = (size_t)m * n;
					float *A = randv((size_t)m * k), *B = randv((size_t)k * n);
					float *C0 = randv(nc), *cg = xmalloc(nc * 4), *ch = xmalloc(nc * 4);
					int rg = gemm_on(g, ta, tb, m, n, k, alpha, A, B, beta, C0, cg);
					int rh = gemm_on(h, ta, tb, m, n, k, alpha, A, B, beta, C0, ch);
					cases++;
					if (rg || rh) {
						printf("#   gemm %dx%dx%d: returned %d (cuda: %s), host %d\n",
						       m, n, k, rg, g->err, rh);
						ok = 0;
					} else {
						for (int i = 0; i < m; i++)
							for (int j = 0; j < n; j++) {
								double s = fabs(beta * C0[(size_t)i * n + j]);
								for (int q = 0; q < k; q++) {
									float a = ta ? A[(size_t)q * m + i] : A[(size_t)i * k + q];
									float b = tb ? B[(size_t)j * k + q] : B[(size_t)q * n + j];
									s += fabs((double)alpha * a * b);
								}
								double diff = fabs((double)cg[(size_t)i * n + j] -
										   (double)ch[(size_t)i * n + j]);
								double e = s > 0 ? diff / s : diff;
								if (!(e <= 1e-4)) {
									if (ok)
										printf("#   gemm ta=%d tb=%d %dx%dx%d beta %g: "
										       "C[%d][%d] %.9g vs host %.9g\n", ta, tb,
										       m, n, k, beta, i, j,
										       cg[(size_t)i * n + j],
										       ch[(size_t)i * n + j]);
									ok = 0;
								}
								if (e > worst || e != e)
									worst = e;
							}
					}
					free(A), free(B), free(C0), free(cg), free(ch);
				}
			CHECK(ok, "gemm ta=%d tb=%d: %d cases (sizes m x n x k from 1x129x17 to 200x150x1031, "
			      "beta 0 and -0.5): worst |diff| / sum|terms| %.2g (limit 1e-4)", ta, tb, cases,
			      worst);
		}
}

/* ---- pool_u8 ---- */

static int pool_on(struct trn_dev *d, const uint8_t *src, int count, int hh, int w, int c, int nchw,
		   int pool, float *out, size_t nout)
{
	uint8_t *ds = dev_put(d, src, (size_t)count * hh * w * c);
	float *dd = d->ops->alloc(d, nout * 4);
	int ret;

	if (!dd)
		harness_die("alloc: %s", d->err);
	ret = d->ops->pool_u8(d, S, ds, count, hh, w, c, nchw, pool, dd);
	if (ret == 0)
		dev_get(d, out, dd, nout * 4);
	d->ops->free(d, ds);
	d->ops->free(d, dd);
	return ret;
}

static void test_pool(struct trn_dev *g, struct trn_dev *h)
{
	static const int sh[][5] = { /* count, h, w, c, pool */
		{ 3, 31, 45, 3, 1 }, { 3, 31, 45, 3, 2 }, { 3, 31, 45, 3, 3 }, { 3, 31, 45, 3, 4 },
		{ 2, 17, 16, 1, 16 }, { 5, 224, 224, 3, 14 }, { 1, 7, 9, 4, 2 } };

	for (int nchw = 0; nchw < 2; nchw++) {
		int ok = 1;
		for (size_t c = 0; c < NELEM(sh); c++) {
			int count = sh[c][0], hh = sh[c][1], w = sh[c][2], ch = sh[c][3], pool = sh[c][4];
			size_t nin = (size_t)count * hh * w * ch;
			size_t nout = (size_t)count * (hh / pool) * (w / pool) * ch;
			uint8_t *src = xmalloc(nin);
			float *og = xmalloc(nout * 4), *oh = xmalloc(nout * 4);
			for (size_t i = 0; i < nin; i++)
				src[i] = (uint8_t)rng_next(&g_rng);
			src[0] = 0, src[nin - 1] = 255;
			int rg = pool_on(g, src, count, hh, w, ch, nchw, pool, og, nout);
			int rh = pool_on(h, src, count, hh, w, ch, nchw, pool, oh, nout);
			if (rg || rh || !same_floats("pool_u8", og, oh, nout)) {
				printf("#   pool_u8 %d x %dx%dx%d pool %d nchw %d: returned %d / %d %s\n",
				       count, hh, w, ch, pool, nchw, rg, rh, rg ? g->err : "");
				ok = 0;
			}
			free(src), free(og), free(oh);
		}
		CHECK(ok, "pool_u8 %s: %zu shapes (odd sides, pools 1 to 16, 1 to 4 channels) equal "
		      "the host's bit for bit", nchw ? "NCHW" : "NHWC", NELEM(sh));
	}
}

/* ---- bias_act, relu_bwd, scale, sgd: bit for bit ---- */

static void test_elementwise(struct trn_dev *g, struct trn_dev *h)
{
	const int rows = 37, cols = 129;
	const size_t n = 10007, nr = (size_t)rows * cols;

	for (int relu = 0; relu < 2; relu++) {
		float *y = randv(nr), *b = randv((size_t)cols), *og = xmalloc(nr * 4), *oh = xmalloc(nr * 4);
		y[5] = -b[5];  /* an exact zero before the ReLU */
		struct trn_dev *dv[2] = { g, h };
		float *out[2] = { og, oh };
		int rc[2];
		for (int i = 0; i < 2; i++) {
			float *dy = dev_put(dv[i], y, nr * 4), *db = dev_put(dv[i], b, (size_t)cols * 4);
			rc[i] = dv[i]->ops->bias_act(dv[i], S, dy, db, rows, cols, relu);
			if (!rc[i])
				dev_get(dv[i], out[i], dy, nr * 4);
			dv[i]->ops->free(dv[i], dy);
			dv[i]->ops->free(dv[i], db);
		}
		CHECK(!rc[0] && !rc[1] && same_floats("bias_act", og, oh, nr),
		      "bias_act relu=%d, %dx%d: equal to the host's bit for bit", relu, rows, cols);
		free(y), free(b), free(og), free(oh);
	}

	{
		float *dy = randv(n), *y = randv(n), *og = xmalloc(n * 4), *oh = xmalloc(n * 4);
		y[0] = 0.0f, y[1] = -0.0f, y[2] = 1e-30f;
		struct trn_dev *dv[2] = { g, h };
		float *out[2] = { og, oh };
		int rc[2];
		for (int i = 0; i < 2; i++) {
			float *ddy = dev_put(dv[i], dy, n * 4), *dyy = dev_put(dv[i], y, n * 4);
			rc[i] = dv[i]->ops->relu_bwd(dv[i], S, ddy, dyy, n);
			if (!rc[i])
				dev_get(dv[i], out[i], ddy, n * 4);
			dv[i]->ops->free(dv[i], ddy);
			dv[i]->ops->free(dv[i], dyy);
		}
		CHECK(!rc[0] && !rc[1] && same_floats("relu_bwd", og, oh, n),
		      "relu_bwd, %zu elements (y = 0, -0, 1e-30 among them): equal bit for bit", n);
		free(dy), free(y), free(og), free(oh);
	}

	{
		float *x = randv(n), *og = xmalloc(n * 4), *oh = xmalloc(n * 4);
		struct trn_dev *dv[2] = { g, h };
		float *out[2] = { og, oh };
		int rc[2];
		for (int i = 0; i < 2; i++) {
			float *dx = dev_put(dv[i], x, n * 4);
			rc[i] = dv[i]->ops->scale(dv[i], S, dx, n, -0.3f);
			if (!rc[i])
				dev_get(dv[i], out[i], dx, n * 4);
			dv[i]->ops->free(dv[i], dx);
		}
		CHECK(!rc[0] && !rc[1] && same_floats("scale", og, oh, n),
		      "scale by -0.3, %zu elements: equal bit for bit", n);
		free(x), free(og), free(oh);
	}

	{
		float *p = randv(n), *gr = randv(n), *m = randv(n);
		float *pg = xmalloc(n * 4), *ph = xmalloc(n * 4), *mg = xmalloc(n * 4), *mh = xmalloc(n * 4);
		struct trn_dev *dv[2] = { g, h };
		float *op[2] = { pg, ph }, *om[2] = { mg, mh };
		int rc[2];
		for (int i = 0; i < 2; i++) {
			float *dp = dev_put(dv[i], p, n * 4), *dg = dev_put(dv[i], gr, n * 4);
			float *dm = dev_put(dv[i], m, n * 4);
			/* twice: the second step reads the momentum the first wrote */
			rc[i] = dv[i]->ops->sgd(dv[i], S, dp, dg, dm, n, 0.05f, 0.9f, 0.125f);
			if (!rc[i])
				rc[i] = dv[i]->ops->sgd(dv[i], S, dp, dg, dm, n, 0.05f, 0.9f, 0.125f);
			if (!rc[i]) {
				dev_get(dv[i], op[i], dp, n * 4);
				dev_get(dv[i], om[i], dm, n * 4);
			}
			dv[i]->ops->free(dv[i], dp);
			dv[i]->ops->free(dv[i], dg);
			dv[i]->ops->free(dv[i], dm);
		}
		CHECK(!rc[0] && !rc[1] && same_floats("sgd params", pg, ph, n) &&
		      same_floats("sgd momentum", mg, mh, n),
		      "sgd (lr 0.05, momentum 0.9, scale 1/8), two steps, %zu parameters: parameters and "
		      "momentum equal bit for bit", n);
		free(p), free(gr), free(m), free(pg), free(ph), free(mg), free(mh);
	}
}

/* ---- col_sum ---- */

static void test_col_sum(struct trn_dev *g, struct trn_dev *h)
{
	static const int sh[][2] = { { 37, 45 }, { 1000, 33 }, { 1, 7 }, { 513, 1 }, { 64, 256 } };
	int ok = 1, cases = 0;
	double worst = 0;

	for (size_t c = 0; c < NELEM(sh); c++)
		for (int acc = 0; acc < 2; acc++) {
			int rows = sh[c][0], cols = sh[c][1];
			size_t nd = (size_t)rows * cols;
			float *dy = randv(nd), *db0 = randv((size_t)cols);
			float *og = xmalloc((size_t)cols * 4), *oh = xmalloc((size_t)cols * 4);
			struct trn_dev *dv[2] = { g, h };
			float *out[2] = { og, oh };
			int rc[2];
			cases++;
			for (int i = 0; i < 2; i++) {
				float *ddy = dev_put(dv[i], dy, nd * 4), *ddb = dev_put(dv[i], db0, (size_t)cols * 4);
				rc[i] = dv[i]->ops->col_sum(dv[i], S, ddy, rows, cols, ddb, acc);
				if (!rc[i])
					dev_get(dv[i], out[i], ddb, (size_t)cols * 4);
				dv[i]->ops->free(dv[i], ddy);
				dv[i]->ops->free(dv[i], ddb);
			}
			if (rc[0] || rc[1]) {
				printf("#   col_sum %dx%d: returned %d (%s) / %d\n", rows, cols, rc[0], g->err,
				       rc[1]);
				ok = 0;
			} else {
				for (int j = 0; j < cols; j++) {
					double s = acc ? fabs(db0[j]) : 0;
					for (int i = 0; i < rows; i++)
						s += fabs(dy[(size_t)i * cols + j]);
					double e = fabs((double)og[j] - oh[j]) / (s > 0 ? s : 1);
					if (!(e <= 1e-5)) {
						if (ok)
							printf("#   col_sum %dx%d acc %d: [%d] %.9g vs host %.9g\n",
							       rows, cols, acc, j, og[j], oh[j]);
						ok = 0;
					}
					if (e > worst || e != e)
						worst = e;
				}
			}
			free(dy), free(db0), free(og), free(oh);
		}
	CHECK(ok, "col_sum: %d cases (1 to 1000 rows, 1 to 256 columns, overwrite and accumulate): "
	      "worst |diff| / sum|terms| %.2g (limit 1e-5)", cases, worst);
}

/* ---- softmax_xent ---- */

struct xent_case {
	int rows, cols;
	int weights;       /* 0 none (NULL), 1 random in [0, 2) with some zeros, 2 all zero */
};

static int xent_on(struct trn_dev *d, const float *z, const int64_t *lab, const float *w, int rows,
		   int cols, float *dl, double out[2])
{
	size_t nz = (size_t)rows * cols;
	float *dz = dev_put(d, z, nz * 4), *dw = w ? dev_put(d, w, (size_t)rows * 4) : NULL;
	int64_t *dlab = dev_put(d, lab, (size_t)rows * 8);
	float *ddl = d->ops->alloc(d, nz * 4);
	int ret;

	if (!ddl)
		harness_die("alloc: %s", d->err);
	ret = d->ops->softmax_xent(d, S, dz, dlab, dw, rows, cols, ddl, out);
	if (ret == 0)
		dev_get(d, dl, ddl, nz * 4);
	d->ops->free(d, dz);
	d->ops->free(d, dw);
	d->ops->free(d, dlab);
	d->ops->free(d, ddl);
	return ret;
}

static void test_xent(struct trn_dev *g, struct trn_dev *h)
{
	static const struct xent_case cs[] = { { 37, 11, 0 }, { 37, 11, 1 }, { 16, 1000, 0 },
					       { 5, 257, 1 }, { 3, 1, 0 }, { 8, 5, 2 }, { 64, 10, 1 } };
	int grad_ok = 1, loss_ok = 1, hit_ok = 1;
	double worst_loss = 0;

	for (size_t c = 0; c < NELEM(cs); c++) {
		int rows = cs[c].rows, cols = cs[c].cols;
		size_t nz = (size_t)rows * cols;
		float *z = xmalloc(nz * 4), *w = NULL, *dg = xmalloc(nz * 4), *dh = xmalloc(nz * 4);
		int64_t *lab = xmalloc((size_t)rows * 8);
		fill_uniform(&g_rng, z, nz, -4.0f, 4.0f);
		for (int i = 0; i < rows; i++)
			lab[i] = (int64_t)(rng_next(&g_rng) % (uint64_t)cols);
		if (cols >= 8 && rows >= 2) {
			/* tied maxima: indices 3 and 7 of row 0 (label 7: the lowest index, 3, is the
			 * prediction, so no hit); the same with label 3 in row 1 (a hit) */
			for (int r = 0; r < 2; r++) {
				float *zr = z + (size_t)r * cols;
				zr[3] = zr[7] = 9.0f;
				lab[r] = r ? 3 : 7;
			}
		}
		if (cs[c].weights) {
			w = xmalloc((size_t)rows * 4);
			for (int i = 0; i < rows; i++)
				w[i] = cs[c].weights == 2 || i % 5 == 4 ? 0.0f : rng_uniform(&g_rng, 0.0f, 2.0f);
		}
		double og[2] = { 1.5, 2.0 }, oh[2] = { 1.5, 2.0 };  /* adds into what is there */
		int rg = xent_on(g, z, lab, w, rows, cols, dg, og);
		int rh = xent_on(h, z, lab, w, rows, cols, dh, oh);
		if (rg || rh) {
			printf("#   softmax_xent %dx%d: returned %d (%s) / %d\n", rows, cols, rg, g->err, rh);
			grad_ok = loss_ok = hit_ok = 0;
		} else {
			for (size_t i = 0; i < nz; i++)
				if (!(fabs((double)dg[i] - dh[i]) <= 1e-6 + 1e-5 * fabs(dh[i]))) {
					if (grad_ok)
						printf("#   softmax_xent %dx%d w%d: dlogits[%zu] %.9g vs host %.9g\n",
						       rows, cols, cs[c].weights, i, dg[i], dh[i]);
					grad_ok = 0;
				}
			double e = fabs(og[0] - oh[0]) / fmax(fabs(oh[0]), 1e-300);
			if (e > worst_loss || e != e)
				worst_loss = e;
			if (!(e <= 1e-9)) {
				printf("#   softmax_xent %dx%d w%d: loss sum %.17g vs host %.17g\n", rows, cols,
				       cs[c].weights, og[0], oh[0]);
				loss_ok = 0;
			}
			if (og[1] != oh[1]) {
				printf("#   softmax_xent %dx%d w%d: correct %.0f vs host %.0f\n", rows, cols,
				       cs[c].weights, og[1] - 2.0, oh[1] - 2.0);
				hit_ok = 0;
			}
		}
		free(z), free(w), free(dg), free(dh), free(lab);
	}
	CHECK(grad_ok, "softmax_xent: %zu cases (1 to 1000 classes; no, some zero, all zero weights): "
	      "dlogits within 1e-6 + 1e-5 |host|", NELEM(cs));
	CHECK(loss_ok, "softmax_xent: loss sums within 1e-9 relative (worst %.2g), added to out[0]",
	      worst_loss);
	CHECK(hit_ok, "softmax_xent: correct predictions equal the host's, tied maxima included, "
	      "added to out[1]");

	/* a bad label: -EINVAL on both, and the device goes on working */
	for (int bad = 0; bad < 2; bad++) {
		const int rows = 4, cols = 6;
		float z[24], dl[24];
		int64_t lab[4] = { 0, 1, 2, 3 };
		double out[2] = { 0, 0 };
		fill_uniform(&g_rng, z, 24, -1, 1);
		lab[2] = bad ? cols : -1;
		int rg = xent_on(g, z, lab, NULL, rows, cols, dl, out);
		int rh = xent_on(h, z, lab, NULL, rows, cols, dl, out);
		CHECK(rg == -EINVAL && rh == -EINVAL, "softmax_xent: label %d of %d classes is -EINVAL "
		      "(cuda %d: %s; host %d)", bad ? cols : -1, cols, rg, g->err, rh);
	}
	{
		float x[3] = { 1, 2, 3 }, y[3];
		float *dx = dev_put(g, x, sizeof(x));
		int ret = g->ops->scale(g, S, dx, 3, 2.0f);
		if (!ret)
			dev_get(g, y, dx, sizeof(y));
		g->ops->free(g, dx);
		CHECK(!ret && y[0] == 2 && y[1] == 4 && y[2] == 6, "the device works after those errors");
	}
}

int main(int argc, char **argv)
{
	struct trn_dev *g, *h;

	argc = gpu_open("gpu_ops", argc, argv, &g);
	if (argc > 1) {
		fprintf(stderr, "usage: gpu_ops [--self-check]\n");
		return 2;
	}
	if (trn_dev_host_open(&h) < 0)
		harness_die("out of memory");
	g_rng.s = g_seed;
	test_gemm(g, h);
	test_pool(g, h);
	test_elementwise(g, h);
	test_col_sum(g, h);
	test_xent(g, h);
	h->ops->close(h);
	g->ops->close(g);
	return gpu_done("gpu_ops");
}
