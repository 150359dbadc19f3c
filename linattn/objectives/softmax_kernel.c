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
 * For one group of LANES sequences and one head, the n keys are taken CHUNK at a time: one loop weighs each key
 * (score, e = 2^z and e.u) into a buffer in the L1 cache, a second adds its terms to the 2·DIM + 1 sums Z, T, TU
 * (4)-(5) in registers, while a share of the block after next is prefetched. A group where some key outscores the
 * query by more than 2^limit (Z > 2^limit, or NaN) is computed again with its largest score as the shift.
 *
 * At Figure 5's settings (float32, D = 4, in the cache) a key costs about 4.1 ns a head and 8 sequences with AVX2,
 * 1.2x the time its 27 instructions for the FMA units take at their measured peak, and 4.4 ns a head and 16 sequences
 * with AVX-512 (30 such instructions: 1.2x); the per-head work around the loops (q, the query's own term, the
 * gradient) is a sixth to a fifth of the kernel at 31 keys (benchmarks/README.md).
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
typedef uint64_t uword;
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
typedef uint32_t uword;
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
/* IN_REGISTER(v): v is held in a register from here, so that a value loaded from memory is loaded once and read from
 * the register by every later use, where the compiler would fold the load into each instruction that uses it (one
 * load each: loads, not multiply-adds, were what the loops over keys waited on). Only where a vec fits in one
 * register (AVX) */
#ifdef __AVX__
#define IN_REGISTER(v) __asm__("" : "+x"(v))
#else
#define IN_REGISTER(v) ((void)0)
#endif
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
#define VSCALE(a, n) ((vec)_mm512_scalef_pd((__m512d)(a), (__m512d)(n)))
#define VREDUCE(a) ((vec)_mm512_reduce_round_pd((__m512d)(a), _MM_FROUND_TO_NEAREST_INT, _MM_FROUND_NO_EXC))
#else
#define VMAX(a, b) ((vec)_mm512_max_ps((__m512)(a), (__m512)(b)))
#define VSCALE(a, n) ((vec)_mm512_scalef_ps((__m512)(a), (__m512)(n)))
#define VREDUCE(a) ((vec)_mm512_reduce_round_ps((__m512)(a), _MM_FROUND_TO_NEAREST_INT, _MM_FROUND_NO_EXC))
#endif
/* 2^z = 2^n 2^f, n = round(z), f = z - n, in AVX-512's own instructions: the same numbers as the generic version
 * below (n rounded to nearest even, 2^n applied exactly) in 4 instructions besides the polynomial instead of 9:
 * vreduce gives f = z - round(z) (exact) in one, and n = z - f is exact. Below -EXP_MAX the term is 2^-EXP_MAX
 * (max returns z itself when z is NaN); above EXP_MAX it overflows to infinity, which the caller's Z > limit test
 * catches, as it catches the generic version's clamped 2^EXP_MAX. */
static inline vec pow2(vec z) {
    z = VMAX(splat(-EXP_MAX), z);
    vec f = VREDUCE(z);
    return VSCALE(poly2(f), z - f);
}
#else
#ifdef __AVX__ /* LANES fill one 256-bit register: the clamps below in one instruction each instead of two */
#include <immintrin.h>
#ifdef USE_DOUBLE
#define VMAX(a, b) ((vec)_mm256_max_pd((__m256d)(a), (__m256d)(b)))
#define VMIN(a, b) ((vec)_mm256_min_pd((__m256d)(a), (__m256d)(b)))
#else
#define VMAX(a, b) ((vec)_mm256_max_ps((__m256)(a), (__m256)(b)))
#define VMIN(a, b) ((vec)_mm256_min_ps((__m256)(a), (__m256)(b)))
#endif
#endif
/* 2^z = 2^n 2^f, n = round(z), f = z - n; z clamped to +-EXP_CLAMP, so that 2^n 2^f is a normal number (below, the
 * term is about 2^-EXP_CLAMP instead of 0: the sums hold at least 1 from the shift's own key; NaN stays NaN, as max and
 * min return their second operand where one is NaN). The low bits of t = z + ROUNDER hold n (two's complement), so
 * t's bits shifted into the exponent field and added to 2^f's bits make 2^n 2^f: an integer addition, not a
 * multiplication on the units the rest of the loop keeps busy. A NaN z gives a NaN 2^f, to which t adds nothing where
 * the NaN's low 9 bits are zero, as in every NaN that arithmetic makes or numpy and torch write. */
#define EXP_CLAMP (EXP_MAX - 1) /* 2^f is in [2^-1/2, 2^1/2]: its exponent field is 126 or 127 (float32) */

typedef uword uvec __attribute__((vector_size(LANES * sizeof(real))));
static inline vec pow2(vec z) {
#ifdef VMIN
    z = VMIN(splat(EXP_CLAMP), VMAX(splat(-EXP_CLAMP), z));
#else
    z = blend(z < -EXP_CLAMP, splat(-EXP_CLAMP), z);
    z = blend(z > EXP_CLAMP, splat(EXP_CLAMP), z);
#endif
    vec t = z + ROUNDER;
    vec n = t - ROUNDER;
    ivec scale = (ivec)((uvec)t << MANTISSA);
    return (vec)((ivec)poly2(z - n) + scale);
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

/* A token's DIM coordinates: coordinate b at X[b*BLOCK] (the layout puts a key's coordinates side by side, so that
 * every load in the loop over keys is one pointer plus a constant) */
static inline void token(vec x[DIM], const real *X) {
    for (int b = 0; b < DIM; b++) x[b] = load(X + b * BLOCK);
}

/* What one head gives one group of sequences: Z, T_b, TU_b and y_h = v.T / Z (4) */
typedef struct { vec Z, y, T[DIM], TU[DIM]; } head_sums;

/* Keys weighed at a time (below): their weights wait in a buffer in the L1 cache */
#define CHUNK 32

/* AVX2's 16 registers hold q and v or the polynomial's constants, not both: there the scores and u = v.x of a chunk
 * are one loop and their weights another; with AVX-512's 32 registers one loop does both. */
#ifdef __AVX512F__
#define SPLIT_WEIGHTS 0
#else
#define SPLIT_WEIGHTS 1
#endif

/* The weights of keys 0 .. m-1 from X (key j's coordinate b at X[j*KEY + b*BLOCK]): e[j] = 2^z (3), z = q.x - shift,
 * and eu[j] = e[j] (v.x). The keys are independent, so the core overlaps their chains (some 50 cycles each).
 * `largest` (the second pass, the shift the largest score): z = score(q, x) - shift, from the very rounded scores
 * the shift is the largest of, so that the top key's z is exactly 0 and none is above. The shift taken inside the
 * fused chain (shifted_score) differs from that by a score's rounding, which at scores of 1e30 (1e23 in float32)
 * is far more than 2^z spans: the top key's weight overflowed (vscalef: inf, NaN sums) or vanished (a wrong loss). */
static inline void weigh(const real *X, int m, const vec q[DIM], const vec v[DIM], vec shift, int largest, vec *e,
                         vec *eu) {
    const long KEY = DIM * BLOCK;
    for (int j = 0; j < m; j++) {
        vec x[DIM];
        token(x, X + j * KEY);
        for (int b = 0; b < DIM; b++) IN_REGISTER(x[b]);   /* one load for both sums, not one each */
        vec z = largest ? score(q, x) - shift : shifted_score(q, x, shift), u = v[0] * x[0];
        for (int b = 1; b < DIM; b++) u += v[b] * x[b];
        if (SPLIT_WEIGHTS) {
            e[j] = z;
            eu[j] = u;
        } else {
            e[j] = pow2(z);
            eu[j] = e[j] * u;
        }
    }
    for (int j = 0; SPLIT_WEIGHTS && j < m; j++) {
        e[j] = pow2(e[j]);
        eu[j] *= e[j];
    }
}

/* Adds the terms of keys 0 .. m-1 of X with weights e, eu to Z, T, TU (4)-(5), kept in registers through the loop */
static inline void add_terms(const real *X, int m, const vec *e, const vec *eu, head_sums *acc) {
    const long KEY = DIM * BLOCK;
    vec Z = acc->Z, T[DIM], TU[DIM];
    memcpy(T, acc->T, sizeof T);
    memcpy(TU, acc->TU, sizeof TU);
    for (int j = 0; j < m; j++) {
        vec ej = e[j], euj = eu[j];
        Z += ej;
        for (int b = 0; b < DIM; b++) {
            vec xb = load(X + j * KEY + b * BLOCK);
            IN_REGISTER(xb);   /* one load for both terms, not one each */
            T[b] += ej * xb;
            TU[b] += euj * xb;
        }
    }
    acc->Z = Z;
    memcpy(acc->T, T, sizeof T);
    memcpy(acc->TU, TU, sizeof TU);
}

/* X: the group's first key, key j's coordinate b at X[j*KEY + b*BLOCK]; xq: the query, coordinate b at
 * xq[b*BLOCK]; shift: the scores' shift c_h (3), `own` where it is the query's own score in every lane. The keys
 * are taken CHUNK at a time: their weights into a buffer (weigh), then their terms (add_terms); `lines` cache lines
 * from `ahead` are prefetched on the way. One loop doing both spilled sums with AVX2's 16 registers and reloaded
 * q and v from memory for every key; apart, each loop's values fit and the weights' chains overlap freely. */
static head_sums sums(const real *X, int n, const real *xq, const vec q[DIM], const vec v[DIM], vec shift, int own,
                      const char *ahead, long lines) {
    const long KEY = DIM * BLOCK;
    head_sums out;
    vec x[DIM];
    token(x, xq);
    /* the query's own term: exactly 2^0 = 1 where the shift is its own score (`own`, the first pass: z + 1, so that
     * a NaN or infinite shift still gives NaN and the group is computed again; in a second pass, the lanes whose
     * shift stayed), else 2^z; the polynomial's 2^0 is 1 + 1.2e-7 */
    vec z = score(q, x) - shift;
    vec e = own ? z + 1 : blend(z == 0, splat(1), pow2(z));
    vec u = v[0] * x[0];
    for (int b = 1; b < DIM; b++) u += v[b] * x[b];
    out.Z = e;
    for (int b = 0; b < DIM; b++) {
        out.T[b] = e * x[b];
        out.TU[b] = e * u * x[b];
    }
    const long per = n > 0 ? (lines + n - 1) / n : 0;     /* lines prefetched a key */
    vec we[CHUNK], weu[CHUNK];
    for (int j0 = 0; j0 < n; j0 += CHUNK) {
        const int m = n - j0 < CHUNK ? n - j0 : CHUNK;
        for (long l = j0 * per; l < (j0 + m) * per && l < lines; l++)
            __builtin_prefetch(ahead + 64 * l, 0, 2);    /* read, into L2 (prefetcht1) */
        weigh(X + j0 * KEY, m, q, v, shift, !own, we, weu);
        add_terms(X + j0 * KEY, m, we, weu, &out);
    }
    vec y = v[0] * out.T[0];
    for (int b = 1; b < DIM; b++) y += v[b] * out.T[b];
    out.y = y / out.Z;
    return out;
}

/* malloc aligns to 16 bytes, a vec needs its own size */
static void *vec_alloc(size_t count) {
    size_t bytes = (count > 0 ? count : 1) * sizeof(vec);
    return aligned_alloc(sizeof(vec), bytes);
}

static inline int any_above(vec Z, real limit) {
    int above = 0;
    for (int l = 0; l < LANES; l++) above |= !(Z[l] <= limit);
    return above;
}

/* dW and dv are summed in float32 vectors over FLUSH blocks, then added lane by lane into float64 vectors (`wide`,
 * WIDE of them a vec), whose lanes are summed once at the end: summing 16 lanes into one float64 after every block
 * took a fifth of the time, and converting after every block still a tenth. FLUSH blocks are 8 groups of 8 or 16
 * sequences in float32 (each lane sums 8 terms on either path; 4 blocks with AVX-512 instead of 2 made its step 4%
 * faster), 4 or 8 groups in float64. */
#define FLUSH (LANES == 16 ? 4 : 2)
#ifdef USE_DOUBLE
#define WIDE 1
typedef vec wide;
static inline void widen_add(wide acc[WIDE], vec a) { acc[0] += a; }
#else
#define WIDE 2
typedef double wide __attribute__((vector_size(LANES / 2 * sizeof(double))));
#ifdef __AVX512F__
static inline void widen_add(wide acc[WIDE], vec a) {
    __m512 x = (__m512)a;
    acc[0] += (wide)_mm512_cvtps_pd(_mm512_castps512_ps256(x));
    acc[1] += (wide)_mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
}
#else
typedef float half __attribute__((vector_size(LANES / 2 * sizeof(float))));
static inline void widen_add(wide acc[WIDE], vec a) {
    half lo, hi;
    memcpy(&lo, &a, sizeof lo);
    memcpy(&hi, (const char *)&a + sizeof lo, sizeof hi);
    acc[0] += __builtin_convertvector(lo, wide);
    acc[1] += __builtin_convertvector(hi, wide);
}
#endif
#endif

static inline double wide_sum(const wide acc[WIDE]) {
    double s = 0.0;
    for (int w = 0; w < WIDE; w++)
        for (int l = 0; l < (int)(sizeof(wide) / sizeof(double)); l++) s += acc[w][l];
    return s;
}

/* The sums of one prefix length over K blocks.
 *   X  (K, n_all, DIM, BLOCK): context tokens; the first n of each sequence are this term's keys
 *   xq (K, DIM, BLOCK): the queries; y (K, BLOCK): the targets
 *   W  (H, DIM, DIM): W[h, b, a] = log2(e) W_KQ[h][a, b]; v (H, DIM)
 * Adds to loss the sum of (y_hat - y)^2 and, when grad, to dW (H, DIM, DIM) [h, a, b] the sum of
 * xq_a dL/dq_b (5)-(6) and to dv (H, DIM) the sum of dL/dv (6), with c = 2 (y_hat - y) (the caller divides by
 * P * terms). Returns 0, or -1 when out of memory. */
int softmax_sums(const real *X, long K, long n_all, int n, const real *xq, const real *y, const real *W,
                 const real *v, int H, real limit, int grad, double *loss, double *dW, double *dv) {
    const long nW = (long)H * DIM * DIM, nv = (long)H * DIM;
    head_sums *hs = vec_alloc((size_t)H * sizeof(head_sums) / sizeof(vec));   /* [h] */
    vec *gW = vec_alloc((size_t)nW);                /* dW and dv of FLUSH blocks, summed over their groups */
    vec *gv = vec_alloc((size_t)nv);
    const size_t nwide = (size_t)(nW + nv + 1) * WIDE;   /* float64 sums of dW, dv and the loss, lane by lane */
    wide *sW = aligned_alloc(sizeof(wide), nwide * sizeof(wide)), *sv = sW + nW * WIDE, *sl = sv + nv * WIDE;
    if (!hs || !gW || !gv || !sW) {
        free(hs); free(gW); free(gv); free(sW);
        return -1;
    }
    memset(sW, 0, nwide * sizeof(wide));
    const long block = n_all * DIM * BLOCK;         /* from one block to the next */
    /* the first n keys (contiguous) of the block after next are fetched into the L2 cache while this block
     * computes, a share in each pass over it: a block's time to arrive from L3, and the L1 cache left to this one */
    const long passes = (long)H * (BLOCK / LANES);
    const long share = ((long)n * DIM * BLOCK * sizeof(real) / 64 + passes - 1) / passes;
    for (long k = 0; k < K; k++) {
        const char *ahead = (const char *)(X + (k + 2 < K ? k + 2 : k) * block);
        long pass = 0;
        if (grad && k % FLUSH == 0) {
            memset(gW, 0, sizeof(vec) * (size_t)nW);
            memset(gv, 0, sizeof(vec) * (size_t)nv);
        }
        for (int g = 0; g < BLOCK; g += LANES) {
            const real *Xg = X + k * block + g, *xqg = xq + k * DIM * BLOCK + g;
            vec x_q[DIM];
            token(x_q, xqg);
            vec r = -load(y + k * BLOCK + g);
            for (int h = 0; h < H; h++) {
                vec q[DIM], vh[DIM];                 /* q_h = W_KQ[h]^T x_q (1), log2 units */
                for (int b = 0; b < DIM; b++) vh[b] = splat(v[h * DIM + b]);
                for (int b = 0; b < DIM; b++) {
                    const real *Wb = W + ((long)h * DIM + b) * DIM;
                    vec acc = Wb[0] * x_q[0];
                    for (int a = 1; a < DIM; a++) acc += Wb[a] * x_q[a];
                    q[b] = acc;
                }
                vec shift = score(q, x_q);            /* c_h = s_hq, the query's own score */
                hs[h] = sums(Xg, n, xqg, q, vh, shift, 1, ahead + 64 * share * pass++, share);
                if (any_above(hs[h].Z, limit)) {     /* some key outscores the query by more: shift by the largest */
                    vec x[DIM];
                    for (int j = 0; j < n; j++) {
                        token(x, Xg + j * DIM * BLOCK);
                        shift = vmax(shift, score(q, x));
                    }
                    hs[h] = sums(Xg, n, xqg, q, vh, shift, 0, ahead, 0);
                }
                r += hs[h].y;
            }
            widen_add(sl, r * r);
            if (!grad) continue;
            for (int h = 0; h < H; h++) {
                const head_sums *hh = hs + h;
                vec c = (real)2 * r / hh->Z;
                for (int b = 0; b < DIM; b++) {
                    vec dq = c * (hh->TU[b] - hh->y * hh->T[b]);   /* (5) */
                    for (int a = 0; a < DIM; a++) gW[(h * DIM + a) * DIM + b] += x_q[a] * dq;
                    gv[h * DIM + b] += c * hh->T[b];
                }
            }
        }
        if (grad && (k % FLUSH == FLUSH - 1 || k + 1 == K)) {
            for (long i = 0; i < nW; i++) widen_add(sW + i * WIDE, gW[i]);
            for (long i = 0; i < nv; i++) widen_add(sv + i * WIDE, gv[i]);
        }
    }
    *loss += wide_sum(sl);
    if (grad) {
        for (long i = 0; i < nW; i++) dW[i] += wide_sum(sW + i * WIDE);
        for (long i = 0; i < nv; i++) dv[i] += wide_sum(sv + i * WIDE);
    }
    free(hs); free(gW); free(gv); free(sW);
    return 0;
}
