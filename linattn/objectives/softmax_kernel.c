/* The softmax objective's pass over the tokens on the CPU: loss, dL/dW_KQ and dL/dv of one prefix length, summed
 * over every block of sequences. linattn/objectives/softmax.py states the formulas (1)-(6) and the data layout and
 * compiles this file once per process for its dimension and precision:
 *
 *     cc -O3 -march=native -ffp-contract=fast -shared -fPIC -DDIM=<D+1> [-DUSE_DOUBLE] softmax_kernel.c
 *
 * GCC/Clang vector extensions: a `vec` holds LANES sequences of a block of BLOCK (the sequence index is innermost in
 * every array), so each line below is one SIMD instruction for LANES sequences at once: one 512-bit register where
 * the compiler targets AVX-512 (-march=native on such a CPU), else 256 bits.
 *
 * For NG groups of LANES sequences and one head, one pass over the n keys forms the 2·DIM + 1 sums Z, T, TU
 * (4)-(5), while a share of the next block is prefetched. A group where some key outscores the query by more than
 * 2^limit (Z > 2^limit, or NaN) is computed again with its largest score as the shift.
 *
 * At Figure 5's ATTN_S setting (float32, AVX-512) the inner loop is 38 vector instructions per key, head and 16
 * sequences, and a step over the whole set takes the CPU time of the same passes over data already in cache: what
 * is left is that arithmetic (benchmarks/README.md).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifndef DIM
#error "compile with -DDIM=<D+1>"
#endif
#define BLOCK 32

#ifdef USE_DOUBLE
typedef double real;
typedef int64_t word;
#ifdef __AVX512F__
#define LANES 8 /* one 512-bit register */
#else
#define LANES 4
#endif
#define MANTISSA 52
#define EXP_BIAS 1023
#define ROUNDER 6755399441055744.0 /* 1.5 * 2^52: x + ROUNDER - ROUNDER rounds x to an integer */
#define EXP_MAX 1022.0
/* 2^f = e^(f ln 2) on [-1/2, 1/2], Taylor to degree 13: below double rounding (4e-18) */
static const real P2[] = {1.0, 0.6931471805599453, 0.2402265069591007, 0.05550410866482158, 0.009618129107628477,
                          0.0013333558146428443, 0.00015403530393381608, 1.525273380405984e-05,
                          1.3215486790144307e-06, 1.0178086009239699e-07, 7.054911620801123e-09,
                          4.445538271870811e-10, 2.567843599348821e-11, 1.3691488853904124e-12};
#define NP2 14
#else
typedef float real;
typedef int32_t word;
#ifdef __AVX512F__
#define LANES 16 /* one 512-bit register */
#else
#define LANES 8
#endif
#define MANTISSA 23
#define EXP_BIAS 127
#define ROUNDER 12582912.0f /* 1.5 * 2^23 */
#define EXP_MAX 126.0f
/* 2^f on [-1/2, 1/2], near-minimax relative error (7.5e-8; 2.6e-7 in float arithmetic) */
static const real P2[] = {1.0000000716546729f, 0.6931469670643613f, 0.24022119723881574f, 0.055507132741486956f,
                          0.009675541332787224f, 0.0013276471782291757f};
#define NP2 6
#endif

typedef real vec __attribute__((vector_size(LANES * sizeof(real))));
typedef word ivec __attribute__((vector_size(LANES * sizeof(real))));

static inline vec load(const real *p) { vec v; memcpy(&v, p, sizeof v); return v; }
static inline vec splat(real x) { return (vec){0} + x; }
static inline vec blend(ivec mask, vec a, vec b) { return (vec)((mask & (ivec)a) | (~mask & (ivec)b)); }
static inline vec vmax(vec a, vec b) { return blend(a > b, a, b); }

/* 2^f on [-1/2, 1/2] (the polynomial P2) */
static inline vec poly2(vec f) {
#ifdef USE_DOUBLE
    vec p = splat(P2[NP2 - 1]);
    for (int i = NP2 - 2; i >= 0; i--) p = p * f + P2[i];
#else
    /* Estrin's form: the chain from a score to its sums is what the loop waits on */
    vec f2 = f * f;
    vec p = (f * P2[1] + P2[0]) + f2 * ((f * P2[3] + P2[2]) + f2 * (f * P2[5] + P2[4]));
#endif
    return p;
}

#ifdef __AVX512F__ /* LANES fill one 512-bit register */
#include <immintrin.h>
#ifdef USE_DOUBLE
#define VMAX(a, b) ((vec)_mm512_max_pd((__m512d)(a), (__m512d)(b)))
#define VROUND(a) ((vec)_mm512_roundscale_pd((__m512d)(a), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC))
#define VSCALE(a, n) ((vec)_mm512_scalef_pd((__m512d)(a), (__m512d)(n)))
#else
#define VMAX(a, b) ((vec)_mm512_max_ps((__m512)(a), (__m512)(b)))
#define VROUND(a) ((vec)_mm512_roundscale_ps((__m512)(a), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC))
#define VSCALE(a, n) ((vec)_mm512_scalef_ps((__m512)(a), (__m512)(n)))
#endif
/* 2^z = 2^n 2^f, n = round(z), f = z - n, in AVX-512's own instructions: the same numbers as the generic version
 * below (n rounded to nearest even, 2^n applied exactly) in 4 instructions besides the polynomial instead of 9.
 * Below -EXP_MAX the term is 2^-EXP_MAX (max returns z itself when z is NaN); above EXP_MAX it overflows to
 * infinity, which the caller's Z > limit test catches, as it catches the generic version's clamped 2^EXP_MAX. */
static inline vec pow2(vec z) {
    z = VMAX(splat(-EXP_MAX), z);
    vec n = VROUND(z);
    return VSCALE(poly2(z - n), n);
}
#else
/* 2^z = 2^n 2^f, n = round(z), f = z - n; z clamped to +-EXP_MAX, so that 2^n is a normal number (below, the term is
 * 2^-EXP_MAX instead of 0: the sums hold at least 1 from the shift's own key; NaN stays NaN). 2^n is built from the
 * bits of z + ROUNDER, whose low bits hold n. */
static inline vec pow2(vec z) {
    z = blend(z < -EXP_MAX, splat(-EXP_MAX), z);
    z = blend(z > EXP_MAX, splat(EXP_MAX), z);
    vec t = z + ROUNDER;
    vec n = t - ROUNDER;
    ivec bits = ((ivec)t - (ivec)splat(ROUNDER) + EXP_BIAS) << MANTISSA;
    return poly2(z - n) * (vec)bits;
}
#endif

/* Score of a token with coordinates x (log2 units): q . x */
static inline vec score(const vec q[DIM], const vec x[DIM]) {
    vec s = q[0] * x[0];
    for (int b = 1; b < DIM; b++) s += q[b] * x[b];
    return s;
}

/* A key's score less the shift, q . x - shift, the shift taken in the first fused multiply-add */
static inline vec shifted_score(const vec q[DIM], const vec x[DIM], vec shift) {
    vec s = q[0] * x[0] - shift;
    for (int b = 1; b < DIM; b++) s += q[b] * x[b];
    return s;
}

static inline void token(vec x[DIM], const real *X, long stride) {
    for (int b = 0; b < DIM; b++) x[b] = load(X + b * stride);
}

/* What one head gives one group of sequences: Z, T_b, TU_b and y_h = v.T / Z (4) */
typedef struct { vec Z, y, T[DIM], TU[DIM]; } head_sums;

/* Groups of LANES sequences that one pass over the keys takes side by side: independent chains of arithmetic for the
 * out-of-order core to overlap (a key's chain from its score to its sums is some 60 cycles long) */
#define NG 2

/* X: the first group's first key, coordinate b at X[b*xs + j*BLOCK], group i at X[i*LANES]; xq: the queries,
 * coordinate b at xq[b*BLOCK]; shift: the scores' shift c_h (3) of each group. One pass over the keys: each key's
 * score, e = 2^z and e.u, then its terms of Z, T, TU. */
static void sums(head_sums out[NG], const real *X, long xs, int n, const real *xq, const vec q[NG][DIM],
                 const vec v[DIM], const vec shift[NG], const char *ahead, long lines) {
    vec x[DIM], Z[NG], T[NG][DIM], TU[NG][DIM];
    for (int i = 0; i < NG; i++) {
        token(x, xq + i * LANES, BLOCK);
        vec e = pow2(score(q[i], x) - shift[i]);     /* the query's own term: 1 unless the shift is a key's score */
        vec u = v[0] * x[0];
        for (int b = 1; b < DIM; b++) u += v[b] * x[b];
        Z[i] = e;
        for (int b = 0; b < DIM; b++) {
            T[i][b] = e * x[b];
            TU[i][b] = e * u * x[b];
        }
    }
    for (int j = 0; j < n; j++) {
        for (long l = j * lines / n; l < (j + 1) * lines / n; l++)
            __builtin_prefetch(ahead + 64 * l);
        for (int i = 0; i < NG; i++) {
            token(x, X + j * BLOCK + i * LANES, xs);
            vec e = pow2(shifted_score(q[i], x, shift[i]));
            vec u = v[0] * x[0];
            for (int b = 1; b < DIM; b++) u += v[b] * x[b];
            vec eu = e * u;
            Z[i] += e;
            for (int b = 0; b < DIM; b++) {
                T[i][b] += e * x[b];
                TU[i][b] += eu * x[b];
            }
        }
    }
    for (int i = 0; i < NG; i++) {
        vec y = v[0] * T[i][0];
        for (int b = 1; b < DIM; b++) y += v[b] * T[i][b];
        out[i].Z = Z[i];
        out[i].y = y / Z[i];
        memcpy(out[i].T, T[i], sizeof T[i]);
        memcpy(out[i].TU, TU[i], sizeof TU[i]);
    }
}

/* malloc aligns to 16 bytes, a vec needs its own size */
static void *vec_alloc(size_t count) {
    size_t bytes = (count > 0 ? count : 1) * sizeof(vec);
    return aligned_alloc(sizeof(vec), bytes);
}

static inline int any_above(vec Z, real limit) {
    for (int l = 0; l < LANES; l++)
        if (!(Z[l] <= limit)) return 1;
    return 0;
}

static inline double lane_sum(vec a) {
    double s = 0.0;
    for (int l = 0; l < LANES; l++) s += (double)a[l];
    return s;
}

/* The sums of one prefix length over K blocks.
 *   X  (K, DIM, n_all, BLOCK): context tokens; the first n of each sequence are this term's keys
 *   xq (K, DIM, BLOCK): the queries; y (K, BLOCK): the targets
 *   W  (H, DIM, DIM): W[h, b, a] = log2(e) W_KQ[h][a, b]; v (H, DIM)
 * Adds to loss the sum of (y_hat - y)^2 and, when grad, to dW (H, DIM, DIM) [h, a, b] the sum of
 * xq_a dL/dq_b (5)-(6) and to dv (H, DIM) the sum of dL/dv (6), with c = 2 (y_hat - y) (the caller divides by
 * P * terms). Returns 0, or -1 when out of memory. */
int softmax_sums(const real *X, long K, long n_all, int n, const real *xq, const real *y, const real *W,
                 const real *v, int H, real limit, int grad, double *loss, double *dW, double *dv) {
    head_sums *hs = vec_alloc((size_t)H * NG * sizeof(head_sums) / sizeof(vec));   /* [h][i] */
    vec *gW = vec_alloc((size_t)H * DIM * DIM);    /* dW and dv of one block, summed over its groups */
    vec *gv = vec_alloc((size_t)H * DIM);
    if (!hs || !gW || !gv) {
        free(hs); free(gW); free(gv);
        return -1;
    }
    const long xs = n_all * BLOCK;                  /* from one coordinate of a token to the next */
    /* the next block's keys (contiguous) are fetched into cache while this block computes, a share in each pass */
    const long passes = (long)H * (BLOCK / (NG * LANES)), share = (DIM * xs * sizeof(real) / 64 + passes - 1) / passes;
    double total = 0.0;
    for (long k = 0; k < K; k++) {
        const char *ahead = (const char *)(X + (k + 1 < K ? k + 1 : k) * DIM * xs);
        long pass = 0;
        if (grad) {
            memset(gW, 0, sizeof(vec) * (size_t)H * DIM * DIM);
            memset(gv, 0, sizeof(vec) * (size_t)H * DIM);
        }
        for (int g = 0; g < BLOCK; g += NG * LANES) {
            const real *Xg = X + k * DIM * xs + g, *xqg = xq + k * DIM * BLOCK + g;
            vec x_q[NG][DIM], r[NG];
            for (int i = 0; i < NG; i++) {
                token(x_q[i], xqg + i * LANES, BLOCK);
                r[i] = -load(y + k * BLOCK + g + i * LANES);
            }
            for (int h = 0; h < H; h++) {
                head_sums *hh = hs + (long)h * NG;
                vec q[NG][DIM], vh[DIM], shift[NG];  /* q_h = W_KQ[h]^T x_q (1), log2 units */
                for (int b = 0; b < DIM; b++) vh[b] = splat(v[h * DIM + b]);
                for (int i = 0; i < NG; i++) {
                    for (int b = 0; b < DIM; b++) {
                        const real *Wb = W + ((long)h * DIM + b) * DIM;
                        vec acc = Wb[0] * x_q[i][0];
                        for (int a = 1; a < DIM; a++) acc += Wb[a] * x_q[i][a];
                        q[i][b] = acc;
                    }
                    shift[i] = score(q[i], x_q[i]);  /* c_h = s_hq, the query's own score */
                }
                sums(hh, Xg, xs, n, xqg, q, vh, shift, ahead + 64 * share * pass++, share);
                int again = 0;
                for (int i = 0; i < NG; i++)
                    if (any_above(hh[i].Z, limit)) {  /* some key outscores the query by more: shift by the largest */
                        again = 1;
                        vec x[DIM];
                        for (int j = 0; j < n; j++) {
                            token(x, Xg + j * BLOCK + i * LANES, xs);
                            shift[i] = vmax(shift[i], score(q[i], x));
                        }
                    }
                if (again)                            /* a group whose shift stayed gets the same sums again */
                    sums(hh, Xg, xs, n, xqg, q, vh, shift, ahead, 0);
                for (int i = 0; i < NG; i++) r[i] += hh[i].y;
            }
            for (int i = 0; i < NG; i++) total += lane_sum(r[i] * r[i]);
            if (!grad) continue;
            for (int i = 0; i < NG; i++)
                for (int h = 0; h < H; h++) {
                    const head_sums *hi = hs + (long)h * NG + i;
                    vec c = (real)2 * r[i] / hi->Z;
                    for (int b = 0; b < DIM; b++) {
                        vec dq = c * (hi->TU[b] - hi->y * hi->T[b]);   /* (5) */
                        for (int a = 0; a < DIM; a++) gW[(h * DIM + a) * DIM + b] += x_q[i][a] * dq;
                        gv[h * DIM + b] += c * hi->T[b];
                    }
                }
        }
        if (grad) {
            for (long i = 0; i < (long)H * DIM * DIM; i++) dW[i] += lane_sum(gW[i]);
            for (long i = 0; i < (long)H * DIM; i++) dv[i] += lane_sum(gv[i]);
        }
    }
    *loss += total;
    free(hs); free(gW); free(gv);
    return 0;
}
