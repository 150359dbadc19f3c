/* The exact objective's gradient-descent loop on the CPU: many steps of ATTN_M, ATTN_S (rank R) or the MLP on the
 * cubic feature in one call, in float64. linattn/objectives/exact.py states the formulas and compiles this file once
 * per process (linattn/objectives/native.py):
 *
 *     cc -O3 -march=native -ffp-contract=fast -shared -fPIC exact_kernel.c
 *
 * A step, at the weights θ before its update:
 *     m = combined(θ)                              (models.py: fold of Σ_h W_KQ[h][:D] ⊗ v_h, or W₁ᵀ w₂)
 *     r = E[TTᵀ] m − E[yT],  L = E[y²] + m·(r − E[yT]),  g = ∂L/∂m = 2r
 *     each test set's L at the same m; the value weights
 *     ∂L/∂θ = the vector-Jacobian product of combined() with g  (models.py: combined_with_vjp)
 *     θ ← θ − lr ∂L/∂θ
 * The loop stops after n steps, or at the first step whose loss is not finite (before its update).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { ATTN_M = 0, ATTN_S = 1, MLP = 2 };

typedef double v4 __attribute__((vector_size(32)));

static inline v4 load4(const double *p) {
    v4 x;
    memcpy(&x, p, sizeof x);
    return x;
}

static inline double hsum(v4 s) { return (s[0] + s[1]) + (s[2] + s[3]); }

/* Σ_j a_j b_j over F entries, in two vector accumulators (the order differs from a BLAS dot only in rounding) */
static double dot(const double *a, const double *b, int F) {
    v4 s0 = {0, 0, 0, 0}, s1 = {0, 0, 0, 0};
    int j = 0;
    for (; j + 8 <= F; j += 8) {
        s0 += load4(a + j) * load4(b + j);
        s1 += load4(a + j + 4) * load4(b + j + 4);
    }
    for (; j + 4 <= F; j += 4)
        s0 += load4(a + j) * load4(b + j);
    double s = hsum(s0 + s1);
    for (; j < F; j++)
        s += a[j] * b[j];
    return s;
}

/* r = A m − b (A: F×F, row-major) and the quadratic form c + m·(r − b) = c − 2 m·b + mᵀ A m. Four rows at a time,
 * each in two vector accumulators: eight independent chains of fused multiply-adds, each load of m used four times */
static double quadratic(const double *A, const double *b, double c, const double *m, double *r, int F) {
    int i = 0;
    for (; i + 4 <= F; i += 4) {
        const double *a0 = A + (long)i * F, *a1 = a0 + F, *a2 = a1 + F, *a3 = a2 + F;
        v4 s[8] = {{0}};
        int j = 0;
        for (; j + 8 <= F; j += 8) {
            v4 x0 = load4(m + j), x1 = load4(m + j + 4);
            s[0] += load4(a0 + j) * x0, s[1] += load4(a0 + j + 4) * x1;
            s[2] += load4(a1 + j) * x0, s[3] += load4(a1 + j + 4) * x1;
            s[4] += load4(a2 + j) * x0, s[5] += load4(a2 + j + 4) * x1;
            s[6] += load4(a3 + j) * x0, s[7] += load4(a3 + j + 4) * x1;
        }
        double t[4] = {hsum(s[0] + s[1]), hsum(s[2] + s[3]), hsum(s[4] + s[5]), hsum(s[6] + s[7])};
        for (; j < F; j++)
            t[0] += a0[j] * m[j], t[1] += a1[j] * m[j], t[2] += a2[j] * m[j], t[3] += a3[j] * m[j];
        for (int k = 0; k < 4; k++)
            r[i + k] = t[k] - b[i + k];
    }
    for (; i < F; i++)
        r[i] = dot(A + (long)i * F, m, F) - b[i];
    double mr = 0.0, mb = 0.0;
    for (i = 0; i < F; i++) {
        mr += m[i] * r[i];
        mb += m[i] * b[i];
    }
    return c + (mr - mb);
}

typedef struct {
    int kind, H, D, R, E, K, F;
    double *m, *r, *scratch, *W, *G, *gW, *grad0, *grad1, *grad2;
} Net;

/* W[h][a][b], a < D: the rows of each head's key-query matrix that combined() reads (ATTN_S: W_Q[h]ᵀ W_K[h]) */
static void key_query(Net *n, const double *p0, const double *p1) {
    int H = n->H, D = n->D, E = n->E, R = n->R;
    for (int h = 0; h < H; h++)
        for (int a = 0; a < D; a++)
            for (int b = 0; b < E; b++) {
                double s;
                if (n->kind == ATTN_M) {
                    s = p0[((long)h * E + a) * E + b];
                } else {
                    s = 0.0;
                    for (int q = 0; q < R; q++)
                        s += p0[((long)h * R + q) * E + a] * p1[((long)h * R + q) * E + b];
                }
                n->W[((long)h * D + a) * E + b] = s;
            }
}

/* m = fold(M), M[a][b][c] = Σ_h W[h][a][b] v_h[c]: triangle slot (b, c), b ≤ c, holds M[a][b][c] + M[a][c][b] */
static void combine_attention(Net *n, const double *v) {
    int H = n->H, D = n->D, E = n->E;
    long k = 0;
    for (int a = 0; a < D; a++)
        for (int b = 0; b < E; b++)
            for (int c = b; c < E; c++, k++) {
                double s = 0.0, t = 0.0;
                for (int h = 0; h < H; h++)
                    s += n->W[((long)h * D + a) * E + b] * v[h * E + c];
                if (c != b)
                    for (int h = 0; h < H; h++)
                        t += n->W[((long)h * D + a) * E + c] * v[h * E + b];
                n->m[k] = c != b ? s + t : s;
            }
}

/* the gradients of the attention weights from g = ∂L/∂m: G = unfold(g), ∂v_h[c] = Σ_{a,b} W[h][a][b] G[a][b][c],
 * gW[h][a][b] = Σ_c G[a][b][c] v_h[c] (∂/∂W_KQ[h][a][b]), then through W_Q[h]ᵀ W_K[h] for ATTN_S */
static void attention_grad(Net *n, const double *g, const double *p0, const double *p1, const double *v) {
    int H = n->H, D = n->D, E = n->E, R = n->R;
    long k = 0;
    for (int a = 0; a < D; a++)
        for (int b = 0; b < E; b++)
            for (int c = b; c < E; c++, k++) {
                n->G[((long)a * E + b) * E + c] = g[k];
                n->G[((long)a * E + c) * E + b] = g[k];
            }
    double *dv = n->kind == ATTN_M ? n->grad1 : n->grad2;
    for (int h = 0; h < H; h++) {
        for (int c = 0; c < E; c++) {
            double s = 0.0;
            for (int ab = 0; ab < D * E; ab++)
                s += n->W[(long)h * D * E + ab] * n->G[(long)ab * E + c];
            dv[h * E + c] = s;
        }
        for (int ab = 0; ab < D * E; ab++)
            n->gW[(long)h * D * E + ab] = dot(n->G + (long)ab * E, v + h * E, E);
    }
    if (n->kind == ATTN_M) {
        memset(n->grad0, 0, sizeof(double) * H * E * E);
        for (int h = 0; h < H; h++)
            memcpy(n->grad0 + (long)h * E * E, n->gW + (long)h * D * E, sizeof(double) * D * E);
        return;
    }
    for (int h = 0; h < H; h++)
        for (int q = 0; q < R; q++) {
            const double *Q = p0 + ((long)h * R + q) * E, *Kr = p1 + ((long)h * R + q) * E;
            double *dQ = n->grad0 + ((long)h * R + q) * E, *dK = n->grad1 + ((long)h * R + q) * E;
            for (int a = 0; a < D; a++)
                dQ[a] = dot(Kr, n->gW + ((long)h * D + a) * E, E);
            dQ[D] = 0.0;
            for (int b = 0; b < E; b++) {
                double s = 0.0;
                for (int a = 0; a < D; a++)
                    s += Q[a] * n->gW[((long)h * D + a) * E + b];
                dK[b] = s;
            }
        }
}

static void descend(double *p, const double *grad, long size, double lr) {
    for (long i = 0; i < size; i++)
        p[i] -= lr * grad[i];
}

/* Run up to n steps. p0, p1, p2: the parameters in the model's parameters() order (ATTN_M: W_KQ (H,E,E), v (H,E);
 * ATTN_S: W_Q (H,R,E), W_K (H,R,E), v (H,E); MLP: W1 (H,D²), w2 (H)), updated in place. losses[t]; test k's loss
 * at test_losses[k][t]; values (NULL: not recorded) v_h[D] or w₂[h] at values[t·H + h]. Returns n, the step whose
 * loss is not finite (its loss stored, its update not made), or −1 where memory could not be allocated. */
long exact_steps(int kind, int H, int D, int R, long n_steps, double lr, double yy, const double *yT,
                 const double *TT, int n_tests, const double *t_yy, const double *const *t_yT,
                 const double *const *t_TT, double *p0, double *p1, double *p2, double *losses,
                 double *const *test_losses, double *values) {
    Net n = {.kind = kind, .H = H, .D = D, .R = R, .E = D + 1};
    n.K = n.E * (n.E + 1) / 2;
    n.F = kind == MLP ? D * D : D * n.K;
    long F = n.F, E = n.E, s0 = kind == ATTN_M ? (long)H * E * E : kind == ATTN_S ? (long)H * R * E : H * F;
    long s1 = kind == ATTN_S ? (long)H * R * E : kind == ATTN_M ? (long)H * E : H, s2 = kind == ATTN_S ? H * E : 0;
    long kq = (long)H * D * E;
    double *buf = malloc(sizeof(double) * (3 * F + 2 * kq + (long)D * E * E + s0 + s1 + s2 + 1));
    if (!buf)
        return -1;
    n.m = buf, n.r = n.m + F, n.scratch = n.r + F, n.W = n.scratch + F, n.gW = n.W + kq, n.G = n.gW + kq;
    n.grad0 = n.G + (long)D * E * E, n.grad1 = n.grad0 + s0, n.grad2 = n.grad1 + s1;
    double *v = kind == ATTN_S ? p2 : p1;
    long t = 0;
    for (; t < n_steps; t++) {
        if (kind == MLP) {
            for (long i = 0; i < F; i++) {
                double s = 0.0;
                for (int h = 0; h < H; h++)
                    s += p0[h * F + i] * p1[h];
                n.m[i] = s;
            }
        } else {
            key_query(&n, p0, p1);
            combine_attention(&n, v);
        }
        double loss = quadratic(TT, yT, yy, n.m, n.r, (int)F);
        losses[t] = loss;
        if (!isfinite(loss))
            break;
        for (int k = 0; k < n_tests; k++)
            test_losses[k][t] = quadratic(t_TT[k], t_yT[k], t_yy[k], n.m, n.scratch, (int)F);
        if (values)
            for (int h = 0; h < H; h++)
                values[t * H + h] = kind == MLP ? p1[h] : v[h * E + D];
        for (long i = 0; i < F; i++)
            n.r[i] *= 2.0;                                   /* g = ∂L/∂m */
        if (kind == MLP) {
            for (int h = 0; h < H; h++) {
                for (long i = 0; i < F; i++)
                    n.grad0[h * F + i] = p1[h] * n.r[i];
                n.grad1[h] = dot(p0 + h * F, n.r, (int)F);
            }
        } else {
            attention_grad(&n, n.r, p0, p1, v);
        }
        descend(p0, n.grad0, s0, lr);
        descend(p1, n.grad1, s1, lr);
        if (s2)
            descend(p2, n.grad2, s2, lr);
    }
    free(buf);
    return t;
}
