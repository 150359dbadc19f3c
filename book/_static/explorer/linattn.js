/* linattn.js — the population (P = ∞) gradient descent of linear attention, in float64 JavaScript.
 *
 * A line-by-line port of the Python package's population engine, so that a run here reproduces
 * `linattn.run.run(RunConfig(..., trainset_size=None))` step for step:
 *
 *   linattn/models.py   attention_features, triangle_pairs, fold_combined, _Attention.combined   -> combined()
 *   linattn/population.py  population_moments (engines.scale_for)                            -> populationMoments()
 *   linattn/train.py    gradient_descent: loss recorded BEFORE each step, θ ← θ − lr ∇L      -> Trainer.step()
 *   linattn/theory.py   c_d, plateau_losses                                                 -> plateauLosses()
 *   linattn/diagnostics.py  combined_A (the learned in-context matrix A)                   -> Trainer.learnedA(_, true)
 *
 * Both models predict ŷ = ⟨m(θ), T⟩ with the feature T = x_q ⊗ triu(S) (F = D(D+1)(D+2)/2 entries, index
 * a·K + k, k running over the upper triangle (b ≤ c) of a (D+1)×(D+1) matrix row by row, K = (D+1)(D+2)/2) and
 * the combined weight m = fold(M), M[a,b,c] = Σ_h W_KQ[h][a,b] v_h[c] (a < D), fold adding M[a,b,c] + M[a,c,b].
 * The population loss is the quadratic form
 *
 *     L(m) = E[y²] − 2⟨m, E[yT]⟩ + ⟨m, E[TTᵀ] m⟩,      ∂L/∂m = 2(E[TTᵀ] m − E[yT]),
 *
 * and the gradient reaches the weights by the chain rule through combined(): with G[a,b,c] = ∂L/∂m[a, (b,c)]
 * (symmetric in b, c)
 *
 *     ∂L/∂W_KQ[h][a,b] = Σ_c G[a,b,c] v_h[c]   (a < D; the query-label row a = D never enters: zero gradient)
 *     ∂L/∂v_h[c]       = Σ_{a<D, b} W_KQ[h][a,b] G[a,b,c]
 *     ATTN_S, W_KQ[h] = W_Q[h]ᵀ W_K[h]:  ∂L/∂W_Q[h][r,a] = Σ_b ∂L/∂W_KQ[h][a,b] W_K[h][r,b],
 *                                        ∂L/∂W_K[h][r,b] = Σ_{a<D} W_Q[h][r,a] ∂L/∂W_KQ[h][a,b].
 *
 * As in Python only v_h = W_V[h][D] (the last row of each value matrix) is a parameter; the other rows of W_V
 * never reach the prediction. No framework, no dependencies; works in browsers and in Node (module.exports).
 */
(function (root) {
  'use strict';

  // ------------------------------------------------------------------------------------------------------------
  // The feature layout
  // ------------------------------------------------------------------------------------------------------------

  /** engines.scale_for without vary_len: 1 ("sum", the reference) or 1/N ("mean", the paper), N = nTokens − 1. */
  function scaleFor(nTokens, normalize) {
    if (normalize === 'mean') return 1.0 / (nTokens - 1);
    if (normalize === 'sum') return 1.0;
    throw new Error("normalize must be 'sum' or 'mean', got " + normalize);
  }

  /** models.triangle_pairs: the pairs (b, c), b ≤ c, of an E×E matrix in torch.triu_indices order, and slot(b, c). */
  function triangle(E) {
    var K = E * (E + 1) / 2, b = new Int32Array(K), c = new Int32Array(K), slot = new Int32Array(E * E), k = 0;
    for (var i = 0; i < E; i++) {
      for (var j = i; j < E; j++) {
        b[k] = i; c[k] = j; slot[i * E + j] = k; slot[j * E + i] = k; k++;
      }
    }
    return { K: K, b: b, c: c, slot: slot };
  }

  // ------------------------------------------------------------------------------------------------------------
  // Population moments (engines._attention_population, one sequence length, no vary_len)
  // ------------------------------------------------------------------------------------------------------------

  // the 15 pairings of 6 indices and the 3 of 4 (Isserlis/Wick)
  var PAIRINGS6 = (function () {
    var out = [];
    (function rec(rest, acc) {
      if (!rest.length) { out.push(acc); return; }
      var first = rest[0];
      for (var i = 1; i < rest.length; i++) {
        rec(rest.slice(1, i).concat(rest.slice(i + 1)), acc.concat([[first, rest[i]]]));
      }
    })([0, 1, 2, 3, 4, 5], []);
    return out;
  })();

  /**
   * E[y²], E[yT] (F) and E[TTᵀ] (F×F, stored sparse: the exact zeros are dropped) of the icl = 1 task
   * x ~ N(0, Λ), w ~ N(0, I), y = wᵀx, for T = x_q ⊗ triu(S), S = s(Σ_{n≤N} x̃_n x̃_nᵀ + x̄_q x̄_qᵀ).
   * Entry by entry the formula of engines._attention_population (see its docstring):
   *
   *   E[T_abc T_xde]/s² = Λ_ax (N M4_bcde + N(N−1) K_bcde) + N (X4_axde EΣ_bc + X4_axbc EΣ_de) + X6_axbcde
   *   E[y T_abc]/s     = N (e_b Λ²_ac + e_c Λ²_ab),        E[y²] = tr Λ
   *
   * with K = E_w[Σ(w) ⊗ Σ(w)] for a context token's covariance Σ(w) = Λ̄ + e ūᵀ + ū eᵀ + (wᵀΛw) e eᵀ,
   * M4_bcde = K_bcde + K_bdce + K_becd (the fourth moment of one context token), EΣ = Λ̄ + tr(Λ) e eᵀ, X4/X6 the
   * query's Gaussian 4th/6th moments (zero when an index is the label coordinate D), Λ̄ = Λ padded by a zero
   * label row and column, e the label axis.
   *
   * cov: D×D array of arrays (symmetric positive definite); seqLen = N + 1 tokens.
   */
  function populationMoments(cov, seqLen, normalize) {
    var D = cov.length, E = D + 1, N = seqLen - 1, s = scaleFor(seqLen, normalize || 'sum');
    var tri = triangle(E), K = tri.K, F = D * K;
    var L1 = new Float64Array(E * E), L2 = new Float64Array(E * E), tr = 0, tr2 = 0;
    var i, j, l;
    for (i = 0; i < D; i++) {
      tr += cov[i][i];
      for (j = 0; j < D; j++) {
        L1[i * E + j] = cov[i][j];
        var acc = 0;
        for (l = 0; l < D; l++) acc += cov[i][l] * cov[l][j];
        L2[i * E + j] = acc;
      }
    }
    for (i = 0; i < D; i++) tr2 += L2[i * E + i];
    var ql = tr * tr + 2 * tr2;
    function ee(b, c) { return (b === D && c === D) ? 1 : 0; }
    function kron(b) { return b === D ? 1 : 0; }
    function Kt(b, c, d, e) {  // K_{bc,de} = E_w[Σ_bc Σ_de]
      var v = L1[b * E + c] * L1[d * E + e] + tr * L1[b * E + c] * ee(d, e) + tr * ee(b, c) * L1[d * E + e];
      if (b === D && d === D) v += L2[c * E + e];
      if (b === D && e === D) v += L2[c * E + d];
      if (c === D && d === D) v += L2[b * E + e];
      if (c === D && e === D) v += L2[b * E + d];
      if (b === D && c === D && d === D && e === D) v += ql;
      return v;
    }
    function X4(a, x, d, e) {  // E[x_a x_x x_d x_e], zero on the label coordinate
      if (d === D || e === D) return 0;
      return L1[a * E + x] * L1[d * E + e] + L1[a * E + d] * L1[x * E + e] + L1[a * E + e] * L1[x * E + d];
    }
    var idx = new Int32Array(6);
    function X6(a, x, b, c, d, e) {
      if (b === D || c === D || d === D || e === D) return 0;
      idx[0] = a; idx[1] = x; idx[2] = b; idx[3] = c; idx[4] = d; idx[5] = e;
      var v = 0;
      for (var p = 0; p < 15; p++) {
        var P = PAIRINGS6[p];
        v += L1[idx[P[0][0]] * E + idx[P[0][1]]] * L1[idx[P[1][0]] * E + idx[P[1][1]]] *
             L1[idx[P[2][0]] * E + idx[P[2][1]]];
      }
      return v;
    }
    function ES(b, c) { return L1[b * E + c] + tr * ee(b, c); }

    var yT = new Float64Array(F);
    for (var a = 0; a < D; a++) {
      for (var k = 0; k < K; k++) {
        var b = tri.b[k], c = tri.c[k];
        yT[a * K + k] = N * (kron(b) * L2[a * E + c] + kron(c) * L2[a * E + b]) * s;
      }
    }
    var dense = new Float64Array(F * F), s2 = s * s;
    for (i = 0; i < F; i++) {
      var ai = (i / K) | 0, ki = i - ai * K, bi = tri.b[ki], ci = tri.c[ki];
      for (j = i; j < F; j++) {
        var aj = (j / K) | 0, kj = j - aj * K, dj = tri.b[kj], ej = tri.c[kj];
        var kk = Kt(bi, ci, dj, ej);
        var m4 = kk + Kt(bi, dj, ci, ej) + Kt(bi, ej, dj, ci);
        var v = L1[ai * E + aj] * (N * m4 + N * (N - 1) * kk) +
                N * (X4(ai, aj, dj, ej) * ES(bi, ci) + X4(ai, aj, bi, ci) * ES(dj, ej)) +
                X6(ai, aj, bi, ci, dj, ej);
        v *= s2;
        dense[i * F + j] = v;
        dense[j * F + i] = v;
      }
    }
    return { D: D, F: F, K: K, N: N, scale: s, yy: tr, yT: yT, TT: sparse(dense, F), tri: tri };
  }

  /** Compressed sparse rows of a dense F×F matrix (exact zeros dropped: for a diagonal Λ, 91–98% of entries). */
  function sparse(dense, F) {
    var rowPtr = new Int32Array(F + 1), nnz = 0, i, j;
    for (i = 0; i < F * F; i++) if (dense[i] !== 0) nnz++;
    var col = new Int32Array(nnz), val = new Float64Array(nnz), n = 0;
    for (i = 0; i < F; i++) {
      rowPtr[i] = n;
      for (j = 0; j < F; j++) {
        var v = dense[i * F + j];
        if (v !== 0) { col[n] = j; val[n] = v; n++; }
      }
    }
    rowPtr[F] = n;
    return { F: F, nnz: nnz, rowPtr: rowPtr, col: col, val: val, dense: dense };
  }

  // ------------------------------------------------------------------------------------------------------------
  // Weights: the layout of init.npz, a seeded generator and the three initialisation eras
  // ------------------------------------------------------------------------------------------------------------

  /** A seeded generator of standard normals: sfc32 (32-bit state ×4, seeded by splitmix32), 53-bit uniforms,
   * Box–Muller (both outputs used). Not numpy's generator: weights drawn here differ from Python's draws. */
  function normalGenerator(seed) {
    var s = (seed >>> 0) ^ 0x9e3779b9;
    function splitmix() {
      s = (s + 0x9e3779b9) | 0;
      var z = s;
      z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
      z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
      return (z ^ (z >>> 16)) >>> 0;
    }
    var a = splitmix(), b = splitmix(), c = splitmix(), d = splitmix();
    function next32() {
      var t = (((a + b) | 0) + d) | 0;
      d = (d + 1) | 0;
      a = b ^ (b >>> 9);
      b = (c + (c << 3)) | 0;
      c = (c << 21) | (c >>> 11);
      c = (c + t) | 0;
      return t >>> 0;
    }
    for (var i = 0; i < 15; i++) next32();
    function uniform() {  // in (0, 1)
      var u;
      do { u = ((next32() >>> 5) * 67108864 + (next32() >>> 6)) / 9007199254740992; } while (u === 0);
      return u;
    }
    var spare = null;
    return function normal() {
      if (spare !== null) { var z = spare; spare = null; return z; }
      var r = Math.sqrt(-2 * Math.log(uniform())), th = 2 * Math.PI * uniform();
      spare = r * Math.sin(th);
      return r * Math.cos(th);
    };
  }

  function tensor(shape, fill) {  // nested arrays, like numpy's tolist()
    if (shape.length === 0) return fill();
    var out = new Array(shape[0]);
    for (var i = 0; i < shape[0]; i++) out[i] = tensor(shape.slice(1), fill);
    return out;
  }

  var ERAS = ['dec2024', 'jan2025', 'dec2025'];

  /**
   * Initial weights in init.npz's layout (nested arrays): ATTN_M {W_KQ (H,E,E), W_V (H,E,E)},
   * ATTN_S {W_Q (H,R,E), W_K (H,R,E), W_V (H,E,E)}, E = D + 1. Each array is drawn whole, in C order, then zeroed.
   *   ATTN_M, every era: W_KQ, W_V ~ N(0, init²); W_KQ[h][:D, D] = 0, W_V[h][D, :D] = 0.
   *   ATTN_S dec2024: W_Q, W_K ~ N(0, init²) (nothing zeroed); W_V = 0 except W_V[h][D][D] = init.
   *   ATTN_S jan2025: W_Q, W_K ~ N(0, init²/(R·E)), W_V ~ N(0, init²); W_K[h][:, D] = 0, W_V[h][D, :D] = 0.
   *   ATTN_S dec2025: W_Q, W_K ~ N(0, init²/(H·R·E)), W_V ~ N(0, init²/(H·E²)); zeroed as jan2025.
   */
  function initWeights(o) {
    var model = o.model, D = o.D, H = o.H, R = o.R || 1, E = D + 1, init = o.init, era = o.era || 'jan2025';
    if (ERAS.indexOf(era) < 0) throw new Error('unknown init era ' + era);
    var normal = normalGenerator(o.seed || 0);
    function gauss(shape, std) { return tensor(shape, function () { return std * normal(); }); }
    var h, i, r, out = {};
    if (model === 'attnM') {
      out.W_KQ = gauss([H, E, E], init);
      out.W_V = gauss([H, E, E], init);
      for (h = 0; h < H; h++) for (i = 0; i < D; i++) { out.W_KQ[h][i][D] = 0; out.W_V[h][D][i] = 0; }
      return out;
    }
    if (model !== 'attnS') throw new Error('unknown model ' + model);
    if (era === 'dec2024') {
      out.W_Q = gauss([H, R, E], init);
      out.W_K = gauss([H, R, E], init);
      out.W_V = tensor([H, E, E], function () { return 0; });
      for (h = 0; h < H; h++) out.W_V[h][D][D] = init;
      return out;
    }
    var kq = era === 'jan2025' ? init / Math.sqrt(R * E) : init / Math.sqrt(H * R * E);
    var vs = era === 'jan2025' ? init : init / (Math.sqrt(H) * E);
    out.W_Q = gauss([H, R, E], kq);
    out.W_K = gauss([H, R, E], kq);
    out.W_V = gauss([H, E, E], vs);
    for (h = 0; h < H; h++) {
      for (r = 0; r < R; r++) out.W_K[h][r][D] = 0;
      for (i = 0; i < D; i++) out.W_V[h][D][i] = 0;
    }
    return out;
  }

  function flat(nested, n, what) {
    var out = new Float64Array(n), k = 0;
    (function rec(x) {
      if (Array.isArray(x)) { for (var i = 0; i < x.length; i++) rec(x[i]); return; }
      if (k >= n) { k++; return; }
      out[k++] = +x;
    })(nested);
    if (k !== n) throw new Error(what + ' has ' + k + ' entries, expected ' + n);
    return out;
  }

  // ------------------------------------------------------------------------------------------------------------
  // Training: population gradient descent (train.gradient_descent on engines.population)
  // ------------------------------------------------------------------------------------------------------------

  /**
   * new Trainer({model, D, H, R, weights, moments, lr}) — weights in init.npz's layout (nested arrays).
   * step() returns the loss at the current weights, then updates them: θ ← θ − lr ∇L(θ).
   */
  function Trainer(o) {
    var D = o.D, E = D + 1, H = o.H, R = o.model === 'attnS' ? (o.R || 1) : 0, mom = o.moments;
    if (mom.D !== D) throw new Error('moments are for D = ' + mom.D + ', the model has D = ' + D);
    this.model = o.model; this.D = D; this.E = E; this.H = H; this.R = R; this.lr = o.lr; this.moments = mom;
    var W = o.weights;
    if (o.model === 'attnM') {
      var kq = flat(W.W_KQ, H * E * E, 'W_KQ');
      this.KQ = new Float64Array(H * D * E);  // rows a < D only are trained; row D never reaches ŷ
      this.KQlabel = new Float64Array(H * E);
      for (var h = 0; h < H; h++) {
        for (var a = 0; a < E; a++) {
          for (var b = 0; b < E; b++) {
            if (a < D) this.KQ[(h * D + a) * E + b] = kq[(h * E + a) * E + b];
            else this.KQlabel[h * E + b] = kq[(h * E + a) * E + b];
          }
        }
      }
    } else if (o.model === 'attnS') {
      this.Q = flat(W.W_Q, H * R * E, 'W_Q');
      this.K = flat(W.W_K, H * R * E, 'W_K');
      this.KQ = new Float64Array(H * D * E);
      this.gQ = new Float64Array(H * R * E);
      this.gK = new Float64Array(H * R * E);
    } else {
      throw new Error('unknown model ' + o.model);
    }
    var wv = flat(W.W_V, H * E * E, 'W_V');
    this.v = new Float64Array(H * E);
    for (h = 0; h < H; h++) for (var c = 0; c < E; c++) this.v[h * E + c] = wv[(h * E + D) * E + c];
    this.m = new Float64Array(mom.F);
    this.r = new Float64Array(mom.F);
    this.gKQ = new Float64Array(H * D * E);
    this.gv = new Float64Array(H * E);
    this.G = new Float64Array(E);
    this.Mfull = new Float64Array(E * E);
    this.t = 0;
  }

  /** W_KQ[h][:D, :] = W_Q[h][:, :D]ᵀ W_K[h] for ATTN_S (ATTN_M holds it directly). */
  Trainer.prototype.keyQuery = function () {
    if (this.model !== 'attnS') return;
    var D = this.D, E = this.E, H = this.H, R = this.R, Q = this.Q, Kw = this.K, KQ = this.KQ;
    for (var h = 0; h < H; h++) {
      for (var a = 0; a < D; a++) {
        for (var b = 0; b < E; b++) {
          var acc = 0;
          for (var r = 0; r < R; r++) acc += Q[(h * R + r) * E + a] * Kw[(h * R + r) * E + b];
          KQ[(h * D + a) * E + b] = acc;
        }
      }
    }
  };

  /** m = combined(θ): m[a, (b,c)] = M[a,b,c] + M[a,c,b] (b < c), M[a,b,b] (b = c), M[a,b,c] = Σ_h W_KQ[h][a,b] v_h[c]. */
  Trainer.prototype.combined = function () {
    this.keyQuery();
    var D = this.D, E = this.E, H = this.H, KQ = this.KQ, v = this.v, m = this.m, Mf = this.Mfull;
    var tri = this.moments.tri, K = tri.K, a, b, c, h, k;
    for (a = 0; a < D; a++) {
      Mf.fill(0);  // M[a, :, :]
      for (h = 0; h < H; h++) {
        var hv = h * E, row = (h * D + a) * E;
        for (b = 0; b < E; b++) {
          var kab = KQ[row + b], o = b * E;
          for (c = 0; c < E; c++) Mf[o + c] += kab * v[hv + c];
        }
      }
      for (k = 0; k < K; k++) {
        b = tri.b[k]; c = tri.c[k];
        m[a * K + k] = b === c ? Mf[b * E + c] : Mf[b * E + c] + Mf[c * E + b];
      }
    }
    return m;
  };

  /** L(m) = E[y²] + ⟨m, r − E[yT]⟩ with r = E[TTᵀ] m − E[yT] (engines._Quadratic), r kept for the gradient 2r. */
  Trainer.prototype.lossAt = function (m) {
    var mom = this.moments, TT = mom.TT, yT = mom.yT, r = this.r, F = mom.F;
    var rowPtr = TT.rowPtr, col = TT.col, val = TT.val, L = 0;
    for (var i = 0; i < F; i++) {
      var acc = 0;
      for (var p = rowPtr[i], end = rowPtr[i + 1]; p < end; p++) acc += val[p] * m[col[p]];
      r[i] = acc - yT[i];
    }
    for (i = 0; i < F; i++) L += m[i] * (r[i] - yT[i]);
    return mom.yy + L;
  };

  Trainer.prototype.value = function () { return this.lossAt(this.combined()); };

  /** One step of full-batch gradient descent; returns the loss before the step (as train.gradient_descent). */
  Trainer.prototype.step = function () {
    var loss = this.lossAt(this.combined());
    if (!isFinite(loss)) return loss;  // the caller stops: Python raises TrainingDiverged here
    var D = this.D, E = this.E, H = this.H, KQ = this.KQ, v = this.v, r = this.r, lr = this.lr;
    var gKQ = this.gKQ, gv = this.gv, G = this.G, tri = this.moments.tri, K = tri.K, slot = tri.slot;
    var h, a, b, c, acc;
    // ∂L/∂W_KQ[h][a,b] = Σ_c G[a,b,c] v_h[c] and ∂L/∂v_h[c] = Σ_{a,b} W_KQ[h][a,b] G[a,b,c], G[a,b,c] = 2 r[a, slot(b,c)]
    gv.fill(0);
    for (a = 0; a < D; a++) {
      var ra = a * K;
      for (b = 0; b < E; b++) {
        for (c = 0; c < E; c++) G[c] = 2.0 * r[ra + slot[b * E + c]];
        for (h = 0; h < H; h++) {
          var kab = KQ[(h * D + a) * E + b], hv = h * E;
          acc = 0;
          for (c = 0; c < E; c++) {
            acc += G[c] * v[hv + c];
            gv[hv + c] += kab * G[c];
          }
          gKQ[(h * D + a) * E + b] = acc;
        }
      }
    }
    if (this.model === 'attnS') {
      var R = this.R, Q = this.Q, Kw = this.K, gQ = this.gQ, gK = this.gK, rr;
      for (h = 0; h < H; h++) {
        for (rr = 0; rr < R; rr++) {
          var row = (h * R + rr) * E;
          for (a = 0; a < D; a++) {  // ∂/∂W_Q[h][r,a] = Σ_b ∂/∂W_KQ[h][a,b] W_K[h][r,b]
            acc = 0;
            for (b = 0; b < E; b++) acc += gKQ[(h * D + a) * E + b] * Kw[row + b];
            gQ[row + a] = acc;
          }
          gQ[row + D] = 0;
          for (b = 0; b < E; b++) {  // ∂/∂W_K[h][r,b] = Σ_{a<D} W_Q[h][r,a] ∂/∂W_KQ[h][a,b]
            acc = 0;
            for (a = 0; a < D; a++) acc += Q[row + a] * gKQ[(h * D + a) * E + b];
            gK[row + b] = acc;
          }
        }
      }
      for (var i = 0; i < Q.length; i++) { Q[i] -= lr * gQ[i]; Kw[i] -= lr * gK[i]; }
    } else {
      for (i = 0; i < KQ.length; i++) KQ[i] -= lr * gKQ[i];
    }
    for (i = 0; i < v.length; i++) v[i] -= lr * gv[i];
    this.t++;
    return loss;
  };

  /**
   * The learned in-context matrix, in the paper's normalisation (× N under normalize = "sum"), D×D row-major:
   *   effective = false: the theory's A = Σ_h v_h[D] U_hᵀ with U_h = W_KQ[h][:D, :D], read off the heads;
   *   effective = true:  diagnostics.combined_A, what the prediction uses, A[i][j] = m[j, slot(i, D)] = Σ_h (W_KQ[h][j,i] v_h[D] +
   *                      W_KQ[h][j,D] v_h[i]) — the coefficient of β_i x_q,j in ŷ (β_i = S[i, D]). The second term
   *                      is zero while W_KQ[h][:D, D] or v_h[:D] is; the dec2024 ATTN_S init leaves W_K's label column
   *                      non-zero, and there the two definitions differ once v_h[:D] has grown.
   */
  Trainer.prototype.learnedA = function (out, effective) {
    this.keyQuery();
    var D = this.D, E = this.E, H = this.H, KQ = this.KQ, v = this.v, N = this.moments.N;
    var f = this.moments.scale === 1.0 ? N : 1.0;
    out = out || new Float64Array(D * D);
    out.fill(0);
    for (var h = 0; h < H; h++) {
      var vd = v[h * E + D];
      for (var i = 0; i < D; i++) {
        for (var j = 0; j < D; j++) {
          var row = (h * D + j) * E;
          out[i * D + j] += vd * KQ[row + i] + (effective ? KQ[row + D] * v[h * E + i] : 0);
        }
      }
    }
    for (i = 0; i < D * D; i++) out[i] *= f;
    return out;
  };

  /** The current weights in init.npz's layout (W_V: only its last row is a parameter; the rest is returned as 0). */
  Trainer.prototype.weights = function () {
    var D = this.D, E = this.E, H = this.H, R = this.R, self = this, out = {};
    out.W_V = tensor([H, E, E], function () { return 0; });
    for (var h = 0; h < H; h++) for (var c = 0; c < E; c++) out.W_V[h][D][c] = this.v[h * E + c];
    if (this.model === 'attnM') {
      out.W_KQ = [];
      for (h = 0; h < H; h++) {
        out.W_KQ.push([]);
        for (var a = 0; a < E; a++) {
          var row = [];
          for (var b = 0; b < E; b++) row.push(a < D ? self.KQ[(h * D + a) * E + b] : self.KQlabel[h * E + b]);
          out.W_KQ[h].push(row);
        }
      }
    } else {
      ['Q', 'K'].forEach(function (n) {
        out['W_' + n] = tensor([H, R, E], function () { return 0; });
        for (var h2 = 0; h2 < H; h2++) for (var r = 0; r < R; r++) for (var b2 = 0; b2 < E; b2++) {
          out['W_' + n][h2][r][b2] = self[n][(h2 * R + r) * E + b2];
        }
      });
    }
    return out;
  };

  // ------------------------------------------------------------------------------------------------------------
  // Theory (theory.py): the plateau levels and the optimal in-context matrix
  // ------------------------------------------------------------------------------------------------------------

  /** λ sorted decreasing and c_d = 1 + (1 + tr Λ/λ_d)/N. */
  function cD(spectrum, N) {
    var lam = spectrum.slice().sort(function (x, y) { return y - x; }), tr = 0, i;
    for (i = 0; i < lam.length; i++) tr += lam[i];
    return { lam: lam, c: lam.map(function (l) { return 1 + (1 + tr / l) / N; }), tr: tr };
  }

  /** L(M_0), …, L(M_D) = tr Λ − Σ_{d≤m} λ_d/c_d; the last one is L*, the minimum. */
  function plateauLosses(spectrum, N) {
    var t = cD(spectrum, N), out = [t.tr], acc = 0;
    for (var d = 0; d < t.lam.length; d++) { acc += t.lam[d] / t.c[d]; out.push(t.tr - acc); }
    return out;
  }

  /** The minimiser's in-context matrix for Λ = diag(spectrum): A* = diag(1/(λ_d c_d)) (paper normalisation). */
  function optimalA(spectrum, N) {
    var D = spectrum.length, tr = 0, out = new Float64Array(D * D), i;
    for (i = 0; i < D; i++) tr += spectrum[i];
    for (i = 0; i < D; i++) out[i * D + i] = 1 / (spectrum[i] * (1 + (1 + tr / spectrum[i]) / N));
    return out;
  }

  var api = {
    scaleFor: scaleFor, triangle: triangle, populationMoments: populationMoments, normalGenerator: normalGenerator,
    initWeights: initWeights, ERAS: ERAS, Trainer: Trainer, plateauLosses: plateauLosses, optimalA: optimalA,
    cD: cD
  };
  if (typeof module !== 'undefined' && module.exports) module.exports = api;
  else root.linattn = api;
})(typeof self !== 'undefined' ? self : this);
