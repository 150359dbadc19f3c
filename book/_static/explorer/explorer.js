/* explorer.js — the live explorer of book/explore.md: controls, URL settings, a chunked training loop that keeps the
 * page responsive, a hand-written canvas plot of the loss with the theory's plateaus, and the learned in-context
 * matrix A at the step under the cursor. The mathematics lives in linattn.js (window.linattn), loaded before this.
 *
 * Settings come from the URL query string (see book/explore.md for the list); the page trains once on load
 * (autorun=0 turns that off) and writes each finished run as JSON into <script id="explorer-result">.
 */
(function () {
  'use strict';
  var LA = window.linattn;

  // ------------------------------------------------------------------------------------------------- settings

  var LIMITS = {  // [min, max, integer]
    D: [2, 8, true], N: [1, 1000, true], H: [1, 32, true], R: [1, 8, true], init: [1e-8, 10, false],
    lr: [1e-6, 10, false], steps: [1, 200000, true], seed: [0, 4294967295, true]
  };
  var FIG3A = { model: 'attnS', D: 4, N: 31, H: 5, R: 1, init: 0.01, era: 'dec2024', lr: 0.02, steps: 10001,
    normalize: 'sum', spectrum: '0.4,0.3,0.2,0.1' };
  var FIG4 = { model: 'attnS', D: 8, N: 31, H: 9, R: 2, init: 0.005, era: 'jan2025', lr: 0.02, steps: 20001,
    normalize: 'sum', spectrum: 'paper' };
  var DEFAULTS = Object.assign({ seed: 0, xscale: 'log', yscale: 'linear', aview: 'effective' }, FIG3A);
  var CHOICES = {
    model: ['attnS', 'attnM'], era: LA.ERAS, normalize: ['sum', 'mean'], xscale: ['log', 'linear'],
    yscale: ['linear', 'log'], aview: ['effective', 'heads'], preset: ['paper', 'white', 'close', 'power', 'custom']
  };

  /** The spectrum presets at dimension D (each with trace 1). */
  var PRESETS = {
    // largest first, as Figure 3a lists (0.4, 0.3, 0.2, 0.1): the heat map's diagonal then reads e_1 … e_D
    paper: function (D) { return range(D).map(function (d) { return (D - d) / (D * (D + 1) / 2); }); },
    white: function (D) { return range(D).map(function () { return 1 / D; }); },
    close: function (D) {  // two close leading eigenvalues, then a gap: 1, 0.95, then 0.5 … 0.1 (normalised)
      var raw = [1, 0.95];
      for (var d = 0; d < D - 2; d++) raw.push(D === 3 ? 0.3 : 0.5 - 0.4 * d / (D - 3));
      return normalise(raw.slice(0, D));
    },
    power: function (D) { return normalise(range(D).map(function (d) { return Math.pow(d + 1, -1.5); })); }
  };
  var PRESET_NAMES = { paper: 'd / ΣD (the paper)', white: 'white, I / D', close: 'two close eigenvalues',
    power: 'power law d^−1.5', custom: 'custom list' };

  function range(n) { var a = []; for (var i = 0; i < n; i++) a.push(i); return a; }
  function normalise(a) { var s = a.reduce(function (x, y) { return x + y; }, 0); return a.map(function (x) { return x / s; }); }
  function fmt(x, p) {
    if (!isFinite(x)) return String(x);
    if (x === 0) return '0';
    var a = Math.abs(x);
    if (a >= 1e-3 && a < 1e5) return String(+x.toPrecision(p || 4));
    return x.toExponential((p || 4) - 1).replace(/\.?0+e/, 'e').replace('e+', 'e');
  }
  function listText(a) { return a.map(function (x) { return String(+x.toPrecision(6)); }).join(', '); }

  // ------------------------------------------------------------------------------------------------- the DOM

  var root = document.getElementById('linattn-explorer');
  if (!root || !LA) return;
  var resultEl = document.getElementById('explorer-result');
  if (!resultEl) {
    resultEl = document.createElement('script');
    resultEl.type = 'application/json';
    resultEl.id = 'explorer-result';
    root.parentNode.insertBefore(resultEl, root.nextSibling);
  }

  function el(tag, attrs, children) {
    var e = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) {
      if (k === 'text') e.textContent = attrs[k];
      else if (k === 'class') e.className = attrs[k];
      else e.setAttribute(k, attrs[k]);
    });
    (children || []).forEach(function (c) { e.appendChild(c); });
    return e;
  }
  var inputs = {};
  function field(name, label, kind, extra) {
    var input;
    if (kind === 'select') {
      input = el('select', { name: name });
      extra.forEach(function (o) { input.appendChild(el('option', { value: o[0], text: o[1] })); });
    } else {
      input = el('input', Object.assign({ name: name, type: 'text', inputmode: 'decimal', autocomplete: 'off' }, extra || {}));
    }
    inputs[name] = input;
    return el('label', { class: name === 'spectrum' ? 'lx-wide' : '' }, [el('span', { text: label }), input]);
  }
  function opts(list, names) { return list.map(function (v) { return [v, names ? names[v] : v]; }); }

  root.className = 'lx';
  root.innerHTML = '';
  var modelBox = el('fieldset', {}, [el('legend', { text: 'Model and task' }), el('div', { class: 'lx-grid' }, [
    field('model', 'model', 'select', [['attnS', 'ATTN_S'], ['attnM', 'ATTN_M']]),
    field('D', 'D (2–8)'), field('N', 'N context pairs'), field('H', 'H heads'), field('R', 'R rank (ATTN_S)'),
    field('normalize', 'normalisation', 'select', [['sum', 'sum (code)'], ['mean', '1/N (paper)']]),
    field('preset', 'spectrum of Λ', 'select', opts(CHOICES.preset, PRESET_NAMES)),
    field('spectrum', 'eigenvalues (comma-separated)')
  ])]);
  var trainBox = el('fieldset', {}, [el('legend', { text: 'Initialisation and training' }), el('div', { class: 'lx-grid' }, [
    field('init', 'init scale'), field('era', 'init era', 'select', opts(LA.ERAS)), field('seed', 'seed'),
    field('lr', 'learning rate'), field('steps', 'steps')
  ])]);
  var btnTrain = el('button', { type: 'button', class: 'lx-primary', text: 'Train' });
  var btnStop = el('button', { type: 'button', text: 'Stop' });
  var btnFig3 = el('button', { type: 'button', text: 'Figure 3a', title: 'ATTN_S, H = 5, R = 1, D = 4, N = 31, init 0.01 (dec2024), lr 0.02, 10001 steps, Λ = diag(0.4, 0.3, 0.2, 0.1)' });
  var btnFig4 = el('button', { type: 'button', text: 'Figure 4, R = 2', title: 'ATTN_S, H = 9, R = 2, D = 8, N = 31, init 0.005 (jan2025), lr 0.02, 20001 steps, Λ = diag(d/36)' });
  var btnLink = el('button', { type: 'button', text: 'Link to these settings' });
  var notesEl = el('div', { class: 'lx-notes', role: 'status' });
  var errorEl = el('div', { class: 'lx-error', role: 'alert' });
  var statusEl = el('div', { class: 'lx-status', 'aria-live': 'polite' });
  var plotCanvas = el('canvas', { 'aria-label': 'training loss against step, with the plateau levels of the theory' });
  var aCanvas = el('canvas', { 'aria-label': 'learned in-context matrix A' });
  var aOptCanvas = el('canvas', { 'aria-label': 'the theory’s optimal in-context matrix' });
  var aCaption = el('div', { class: 'lx-caption' });
  var aOptCaption = el('div', { class: 'lx-caption' });
  var linkOut = el('input', { class: 'lx-link', type: 'text', readonly: 'readonly', hidden: 'hidden' });
  var axes = el('div', { class: 'lx-axes' }, [
    el('label', {}, [el('span', { text: 'step axis' }), (inputs.xscale = el('select', { name: 'xscale' }))]),
    el('label', {}, [el('span', { text: 'loss axis' }), (inputs.yscale = el('select', { name: 'yscale' }))])
  ]);
  CHOICES.xscale.forEach(function (v) { inputs.xscale.appendChild(el('option', { value: v, text: v })); });
  CHOICES.yscale.forEach(function (v) { inputs.yscale.appendChild(el('option', { value: v, text: v })); });

  [modelBox, trainBox,
    el('div', { class: 'lx-buttons' }, [btnTrain, btnStop, btnFig3, btnFig4, btnLink]),
    notesEl, errorEl, statusEl,
    el('div', { class: 'lx-panels' }, [
      el('div', { class: 'lx-plot' }, [plotCanvas, axes]),
      el('div', { class: 'lx-side' }, [aCanvas, el('div', { class: 'lx-axes' }, [el('label', {}, [
        el('span', { text: 'A from' }), (inputs.aview = el('select', { name: 'aview' }))])]), aCaption, aOptCanvas,
        aOptCaption])
    ]),
    linkOut
  ].forEach(function (c) { root.appendChild(c); });
  [['effective', 'what ŷ uses (combined_A)'], ['heads', 'the heads’ Σ v_h[D] U_h']].forEach(function (o) {
    inputs.aview.appendChild(el('option', { value: o[0], text: o[1] }));
  });

  // ------------------------------------------------------------------------------------------------- controls

  function setControls(s) {
    Object.keys(s).forEach(function (k) {
      if (k === 'spectrum') setSpectrumText(s.spectrum);
      else if (inputs[k]) inputs[k].value = String(s[k]);
    });
    syncDisabled();
  }
  function setSpectrumText(v) {  // a preset name or a list
    var name = String(v).trim().toLowerCase();
    if (PRESETS[name]) { inputs.preset.value = name; inputs.spectrum.value = ''; }
    else { inputs.preset.value = 'custom'; inputs.spectrum.value = String(v); }
  }
  function syncDisabled() {
    inputs.R.disabled = inputs.model.value !== 'attnS';
  }

  /** Reads, validates and clamps the controls: {settings, notes, error}. Clamped values are written back. */
  function readControls() {
    var s = {}, notes = [], error = null;
    Object.keys(inputs).forEach(function (k) { inputs[k].classList.remove('lx-clamped'); });
    ['model', 'era', 'normalize', 'xscale', 'yscale'].forEach(function (k) {
      s[k] = CHOICES[k].indexOf(inputs[k].value) >= 0 ? inputs[k].value : DEFAULTS[k];
    });
    function num(k, hi) {
      var lim = LIMITS[k], raw = String(inputs[k].value).trim(), x = Number(raw), max = hi === undefined ? lim[1] : hi;
      var changed = false;
      if (raw === '' || !isFinite(x)) {
        x = Math.min(DEFAULTS[k], max);
        notes.push(k + ' = "' + raw + '" is not a number: using ' + x + '.');
        changed = true;
      } else {
        var y = lim[2] ? Math.round(x) : x;
        y = Math.min(Math.max(y, lim[0]), max);
        if (y !== x) {
          notes.push(k + ' = ' + raw + ' is not ' + (lim[2] ? 'an integer' : 'a number') + ' in ' + lim[0] + '…' + max +
            ': clamped to ' + y + '.');
          changed = true;
        }
        x = y;
      }
      if (changed) { inputs[k].value = String(x); inputs[k].classList.add('lx-clamped'); }
      return x;
    }
    ['D', 'N', 'H', 'init', 'lr', 'steps', 'seed'].forEach(function (k) { s[k] = num(k); });
    s.R = s.model === 'attnS' ? num('R', s.D) : 1;
    var preset = inputs.preset.value;
    if (preset !== 'custom' && PRESETS[preset]) {
      s.preset = preset;
      s.spectrum = PRESETS[preset](s.D);
      inputs.spectrum.placeholder = listText(s.spectrum);
    } else {
      s.preset = 'custom';
      var text = String(inputs.spectrum.value).trim();
      var parts = text === '' ? [] : text.split(/[\s,;]+/).filter(function (t) { return t !== ''; });
      var vals = parts.map(Number);
      if (!parts.length) error = 'The spectrum is empty: give ' + s.D + ' positive eigenvalues, comma-separated.';
      else if (vals.some(function (x) { return !isFinite(x); })) error = 'The spectrum "' + text + '" has an entry that is not a number.';
      else if (vals.some(function (x) { return x <= 0; })) error = 'The spectrum must be positive (Λ is a covariance matrix): ' +
        vals.filter(function (x) { return x <= 0; }).join(', ') + ' is not. No run.';
      else if (vals.length !== s.D) error = 'The spectrum has ' + vals.length + ' eigenvalues but D = ' + s.D + ': give one per dimension.';
      s.spectrum = vals;
    }
    return { settings: s, notes: notes, error: error };
  }

  /** The query string → the controls (raw values: readControls clamps them and says so). */
  function applyQuery(q) {
    var s = {}, notes = [];
    var map = { model: 'model', D: 'D', N: 'N', H: 'H', R: 'R', init: 'init', era: 'era', lr: 'lr', steps: 'steps',
      seed: 'seed', normalize: 'normalize', xscale: 'xscale', yscale: 'yscale', aview: 'aview' };
    Object.keys(map).forEach(function (k) {
      if (!q.has(k)) return;
      var v = q.get(k);
      if (CHOICES[k] && CHOICES[k].indexOf(v) < 0) {
        var alias = { attnm: 'attnM', attns: 'attnS', attn_m: 'attnM', attn_s: 'attnS' }[v.toLowerCase()];
        if (k === 'model' && alias) v = alias;
        else { notes.push(k + ' = "' + v + '" is not one of ' + CHOICES[k].join(', ') + ': using ' + DEFAULTS[k] + '.'); return; }
      }
      s[k] = v;
    });
    if (q.has('spectrum')) {
      s.spectrum = q.get('spectrum');
      var n = String(s.spectrum).split(/[\s,;]+/).filter(function (t) { return t !== ''; }).length;
      if (!q.has('D') && !PRESETS[String(s.spectrum).trim().toLowerCase()] && n >= 1) s.D = String(n);
    }
    setControls(Object.assign({}, DEFAULTS, s));
    return notes;
  }

  function queryOf(s) {
    var q = new URLSearchParams();
    ['model', 'D', 'N', 'H', 'R', 'init', 'era', 'lr', 'steps', 'seed', 'normalize'].forEach(function (k) {
      if (k !== 'R' || s.model === 'attnS') q.set(k, String(s[k]));
    });
    q.set('spectrum', s.preset === 'custom' ? s.spectrum.join(',') : s.preset);
    if (s.xscale !== DEFAULTS.xscale) q.set('xscale', s.xscale);
    if (s.yscale !== DEFAULTS.yscale) q.set('yscale', s.yscale);
    if (inputs.aview.value !== DEFAULTS.aview) q.set('aview', inputs.aview.value);
    return q.toString();
  }

  // ------------------------------------------------------------------------------------------------- training

  var run = null;        // the current run
  var runId = 0;
  var hoverStep = null;  // the step under the cursor, or null
  var drawPending = false;
  var BUDGET_MS = 12;    // compute per slice, so input and painting get their turn between slices
  var DRAW_EVERY_MS = 40;  // while training, redraw the plot at most this often (25 frames a second)
  var lastDraw = -1e9;
  var channel = new MessageChannel();
  channel.port1.onmessage = function () { pump(); };
  function schedule() { channel.port2.postMessage(0); }
  function now() { return performance.now(); }

  function stopRun(reason) {
    if (run && run.status === 'running') {
      run.status = 'stopped';
      run.message = reason || 'Stopped at step ' + run.t + '.';
      finish();
    }
  }

  function fail(message, s) {
    stopRun();
    run = { id: ++runId, status: 'error', message: message, s: s || null, t: 0, loss: new Float64Array(0) };
    errorEl.textContent = message;
    statusEl.textContent = '';
    writeResult();
    requestDraw();
  }

  function checkWeights(w, s) {
    var E = s.D + 1, shapes = s.model === 'attnM' ? { W_KQ: [s.H, E, E], W_V: [s.H, E, E] }
      : { W_Q: [s.H, s.R, E], W_K: [s.H, s.R, E], W_V: [s.H, E, E] };
    Object.keys(shapes).forEach(function (k) {
      var want = shapes[k], got = [], a = w[k];
      while (Array.isArray(a)) { got.push(a.length); a = a[0]; }
      if (got.join(',') !== want.join(',')) {
        throw new Error(k + ' has shape (' + got.join(', ') + '), the settings need (' + want.join(', ') + ')');
      }
      // every row, not only the first, must have that shape and hold finite numbers (a ragged list is refused)
      (function walk(x, depth, at) {
        if (depth === want.length) {
          if (typeof x !== 'number' || !isFinite(x)) throw new Error(k + at + ' is not a finite number');
          return;
        }
        if (!Array.isArray(x) || x.length !== want[depth]) {
          throw new Error(k + at + ' should be a list of ' + want[depth] + ' entries');
        }
        x.forEach(function (y, i) { walk(y, depth + 1, at + '[' + i + ']'); });
      })(w[k], 0, '');
    });
  }

  /** Starts a run from the controls (weights: nested arrays in init.npz's layout, or null for the seeded draw). */
  function start(weights, weightsSource) {
    stopRun('Replaced by a new run.');
    var rc = readControls();
    notesEl.textContent = pageNotes.concat(rc.notes).join(' ');
    errorEl.textContent = '';
    if (rc.error) { fail(rc.error, rc.settings); return; }
    var s = rc.settings;
    var w;
    try {
      if (weights) { checkWeights(weights, s); w = weights; }
      else w = LA.initWeights({ model: s.model, D: s.D, H: s.H, R: s.R, init: s.init, era: s.era, seed: s.seed });
    } catch (e) { fail('The initial weights do not fit: ' + e.message + '.', s); return; }
    var cov = s.spectrum.map(function (x, i) { return s.spectrum.map(function (_, j) { return i === j ? x : 0; }); });
    var t0 = now();
    var moments = LA.populationMoments(cov, s.N + 1, s.normalize);
    var trainer = new LA.Trainer({ model: s.model, D: s.D, H: s.H, R: s.R, weights: w, moments: moments, lr: s.lr });
    var t1 = now();
    var stride = Math.max(1, Math.ceil(s.steps / 2000));
    run = {
      id: ++runId, status: 'running', s: s, trainer: trainer, moments: moments, t: 0,
      loss: new Float64Array(s.steps), stride: stride,
      A: new Float64Array(Math.ceil(s.steps / stride) * s.D * s.D),
      Aeff: new Float64Array(Math.ceil(s.steps / stride) * s.D * s.D),
      plateaus: LA.plateauLosses(s.spectrum, s.N), Aopt: LA.optimalA(s.spectrum, s.N),
      weightsSource: weightsSource || ('seeded: ' + s.era + ', init ' + s.init + ', seed ' + s.seed),
      init: w, momentsMs: t1 - t0, computeMs: 0, started: now(), message: ''
    };
    if (s.model === 'attnM' && !weights) run.weightsSource = 'seeded: init ' + s.init + ', seed ' + s.seed + ' (the eras agree for ATTN_M)';
    writeResult();
    requestDraw();
    schedule();
  }

  function pump() {
    var r = run;
    if (!r || r.status !== 'running') return;
    var tr = r.trainer, loss = r.loss, n = r.s.steps, t = r.t, stride = r.stride, DD = r.s.D * r.s.D;
    var c0 = now(), deadline = c0 + BUDGET_MS, bad = null;
    outer:
    while (t < n) {
      var end = Math.min(n, t + 8);
      for (; t < end; t++) {
        if (t % stride === 0) {
          tr.learnedA(r.A.subarray((t / stride) * DD, (t / stride + 1) * DD), false);
          tr.learnedA(r.Aeff.subarray((t / stride) * DD, (t / stride + 1) * DD), true);
        }
        var l = tr.step();
        if (!isFinite(l)) { bad = l; break outer; }
        loss[t] = l;
      }
      if (now() > deadline) break;
    }
    r.computeMs += now() - c0;
    r.t = t;
    if (bad !== null) {
      r.status = 'diverged';
      r.message = 'The run diverged at step ' + t + ': the loss became ' + bad + ' (lr = ' + r.s.lr +
        '). Try a smaller learning rate, e.g. ' + fmt(r.s.lr / 4) + '.';
      errorEl.textContent = r.message;
      finish();
    } else if (t >= n) {
      r.status = 'done';
      finish();
    } else {
      schedule();
    }
    if (r.status !== 'running' || now() - lastDraw >= DRAW_EVERY_MS) requestDraw();
  }

  function finish() {
    var r = run;
    r.wallMs = now() - r.started;
    writeResult();
  }

  function writeResult() {
    var r = run, out = { status: r.status, message: r.message || '' };
    if (r.s) {
      out.settings = {
        model: r.s.model, D: r.s.D, N: r.s.N, seq_len: r.s.N + 1, H: r.s.H, R: r.s.R, init: r.s.init, era: r.s.era,
        lr: r.s.lr, steps: r.s.steps, seed: r.s.seed, normalize: r.s.normalize, spectrum: r.s.spectrum,
        preset: r.s.preset
      };
    }
    out.notes = notesEl.textContent;
    if (r.trainer) {
      out.weights = r.weightsSource;
      out.steps_done = r.t;
      out.loss = Array.prototype.slice.call(r.loss.subarray(0, r.t));
      out.plateaus = r.plateaus;
      out.L_star = r.plateaus[r.plateaus.length - 1];
      out.F = r.moments.F;
      out.TT_nonzeros = r.moments.TT.nnz;
      out.moments_seconds = r.momentsMs / 1000;
      if (r.status !== 'running') {
        out.compute_seconds = r.computeMs / 1000;
        out.draw_seconds = (r.drawMs || 0) / 1000;
        out.wall_seconds = r.wallMs / 1000;
        out.steps_per_second = r.wallMs > 0 ? r.t / (r.wallMs / 1000) : null;
        out.compute_steps_per_second = r.computeMs > 0 ? r.t / (r.computeMs / 1000) : null;
        if (r.t > 0) {
          var DD = r.s.D * r.s.D, k = Math.floor((r.t - 1) / r.stride);
          out.A_snapshot_step = k * r.stride;
          out.A_snapshot = Array.prototype.slice.call(r.A.subarray(k * DD, (k + 1) * DD));
          out.A_effective_snapshot = Array.prototype.slice.call(r.Aeff.subarray(k * DD, (k + 1) * DD));
        }
      }
      if (dumpInit) out.init = r.init;
    }
    resultEl.textContent = JSON.stringify(out).replace(/</g, '\\u003c');
  }

  // ------------------------------------------------------------------------------------------------- drawing

  function requestDraw() {
    if (drawPending) return;
    drawPending = true;
    requestAnimationFrame(function () {
      drawPending = false;
      var t0 = now();
      draw();
      lastDraw = now();
      if (run) run.drawMs = (run.drawMs || 0) + lastDraw - t0;
    });
  }

  function prepare(canvas) {
    var dpr = window.devicePixelRatio || 1, w = canvas.clientWidth || 300, h = canvas.clientHeight || 150;
    if (canvas.width !== Math.round(w * dpr) || canvas.height !== Math.round(h * dpr)) {
      canvas.width = Math.round(w * dpr);
      canvas.height = Math.round(h * dpr);
    }
    var ctx = canvas.getContext('2d');
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, w, h);
    return { ctx: ctx, w: w, h: h };
  }
  function ink() { return getComputedStyle(root).color || '#222'; }

  function niceTicks(lo, hi, n) {
    var span = hi - lo, step = Math.pow(10, Math.floor(Math.log10(span / n))), err = span / n / step;
    step *= err >= 5 ? 5 : err >= 2 ? 2 : 1;
    var out = [];
    for (var v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(+v.toPrecision(12));
    return out;
  }

  function draw() {
    var r = run;
    statusLine();
    drawPlot(r);
    drawHeat(aCanvas, r && r.trainer ? currentA(r) : null, r, 'A');
    drawHeat(aOptCanvas, r && r.trainer ? r.Aopt : null, r, 'Aopt');
  }

  function statusLine() {
    var r = run;
    if (!r || !r.trainer) return;
    var parts = [], last = r.t > 0 ? r.loss[r.t - 1] : NaN;
    if (r.status === 'running') {
      var secs = (now() - r.started) / 1000;
      parts.push('training… step ' + r.t.toLocaleString('en') + ' / ' + r.s.steps.toLocaleString('en'));
      if (secs > 0) parts.push(Math.round(r.t / secs).toLocaleString('en') + ' steps/s');
    } else {
      parts.push(r.status + ': ' + r.t.toLocaleString('en') + ' steps in ' + fmt(r.wallMs / 1000, 3) + ' s (' +
        Math.round(r.t / Math.max(r.wallMs / 1000, 1e-9)).toLocaleString('en') + ' steps/s)');
    }
    if (r.t > 0) parts.push('loss ' + fmt(last, 6));
    parts.push('L* = ' + fmt(r.plateaus[r.plateaus.length - 1], 6));
    parts.push('F = ' + r.moments.F);
    parts.push('weights ' + r.weightsSource);
    if (hoverStep !== null && hoverStep < r.t) {
      parts.unshift('cursor: step ' + hoverStep + ', loss ' + fmt(r.loss[hoverStep], 6) + ' |');
    }
    statusEl.textContent = parts.join(' · ');
  }

  function xMap(r, geom) {
    var n = Math.max(r.s.steps - 1, 1);
    if (inputs.xscale.value === 'log') {
      var hi = Math.log10(Math.max(n, 10));
      return {
        log: true, lo: 1, hi: Math.max(n, 10),
        px: function (s) { return geom.x0 + geom.w * Math.log10(Math.max(s, 1)) / hi; },
        step: function (px) { return Math.pow(10, (px - geom.x0) / geom.w * hi); }
      };
    }
    return {
      log: false, lo: 0, hi: n,
      px: function (s) { return geom.x0 + geom.w * s / n; },
      step: function (px) { return (px - geom.x0) / geom.w * n; }
    };
  }

  function yMap(r, geom) {
    var P = r.plateaus, L0 = P[0], first = r.t > 0 ? r.loss[0] : L0;
    var hi = 1.08 * Math.max(L0, Math.min(first, 10 * L0));
    if (inputs.yscale.value === 'log' || r.status === 'diverged') {  // a diverged run: always log, all of it
      var lo = P[P.length - 1], i;
      for (i = 0; i < r.t; i++) if (r.loss[i] < lo) lo = r.loss[i];
      if (r.status === 'diverged') for (i = 0; i < r.t; i++) if (r.loss[i] * 1.5 > hi) hi = r.loss[i] * 1.5;
      lo = Math.max(lo * 0.7, 1e-12);
      var a = Math.log10(lo), b = Math.log10(hi);
      return { log: true, lo: lo, hi: hi, px: function (v) { return geom.y0 + geom.h * (1 - (Math.log10(Math.max(v, 1e-300)) - a) / (b - a)); } };
    }
    return { log: false, lo: 0, hi: hi, px: function (v) { return geom.y0 + geom.h * (1 - v / hi); } };
  }

  function drawPlot(r) {
    var c = prepare(plotCanvas), ctx = c.ctx, color = ink();
    var geom = { x0: 62, y0: 12, w: c.w - 62 - 44, h: c.h - 12 - 40 };
    ctx.font = '11px system-ui, sans-serif';
    ctx.fillStyle = color;
    ctx.strokeStyle = color;
    if (!r || !r.trainer) {
      ctx.textAlign = 'center';
      ctx.font = '13px system-ui, sans-serif';
      var msg = r && r.message ? r.message : 'Press “Train” to start.';
      wrapText(ctx, (r && r.status === 'error' ? 'No run: ' : '') + msg, c.w / 2, c.h / 2 - 20, c.w - 60, 17);
      return;
    }
    var X = xMap(r, geom), Y = yMap(r, geom);
    // axes and ticks
    ctx.globalAlpha = 0.8;
    ctx.lineWidth = 1;
    ctx.strokeRect(geom.x0, geom.y0, geom.w, geom.h);
    ctx.textAlign = 'center';
    ctx.textBaseline = 'top';
    var xt = X.log ? range(Math.floor(Math.log10(X.hi)) + 1).map(function (k) { return Math.pow(10, k); })
      : niceTicks(0, X.hi, 6);
    xt.forEach(function (s) {
      var x = X.px(s);
      ctx.beginPath(); ctx.moveTo(x, geom.y0 + geom.h); ctx.lineTo(x, geom.y0 + geom.h + 4); ctx.stroke();
      ctx.fillText(X.log ? '10' + sup(Math.round(Math.log10(s))) : s.toLocaleString('en'), x, geom.y0 + geom.h + 6);
    });
    ctx.fillText('step', geom.x0 + geom.w / 2, geom.y0 + geom.h + 22);
    ctx.textAlign = 'right';
    ctx.textBaseline = 'middle';
    var yt = Y.log ? logTicks(Y.lo, Y.hi) : niceTicks(0, Y.hi, 5);
    yt.forEach(function (v) {
      var y = Y.px(v);
      ctx.beginPath(); ctx.moveTo(geom.x0 - 4, y); ctx.lineTo(geom.x0, y); ctx.stroke();
      ctx.fillText(fmt(v, 3), geom.x0 - 6, y);
    });
    ctx.save();
    ctx.translate(10, geom.y0 + geom.h / 2);
    ctx.rotate(-Math.PI / 2);
    ctx.textAlign = 'center';
    ctx.fillText('population loss', 0, 0);
    ctx.restore();
    ctx.globalAlpha = 1;
    // the theory's plateaus
    ctx.save();
    ctx.beginPath(); ctx.rect(geom.x0, geom.y0, geom.w + 44, geom.h); ctx.clip();
    var P = r.plateaus, lastLabel = -1e9;
    ctx.textAlign = 'left';
    for (var m = P.length - 1; m >= 0; m--) {
      var y = Y.px(P[m]), star = m === P.length - 1;
      ctx.strokeStyle = star ? '#2e9d4f' : 'rgba(128,128,128,0.8)';
      ctx.setLineDash(star ? [] : [5, 4]);
      ctx.lineWidth = star ? 1.5 : 1;
      ctx.beginPath(); ctx.moveTo(geom.x0, y); ctx.lineTo(geom.x0 + geom.w, y); ctx.stroke();
      if (Math.abs(y - lastLabel) >= 11) {
        ctx.fillStyle = star ? '#2e9d4f' : color;
        ctx.fillText(star ? 'L*' : 'M' + sub(m), geom.x0 + geom.w + 4, y);
        lastLabel = y;
      }
    }
    ctx.setLineDash([]);
    ctx.restore();
    // the loss curve: per pixel column, first/min/max/last of the steps that fall in it
    ctx.save();
    ctx.beginPath(); ctx.rect(geom.x0, geom.y0, geom.w, geom.h); ctx.clip();
    ctx.strokeStyle = '#2a6fb0';
    ctx.lineWidth = 1.6;
    ctx.beginPath();
    var loss = r.loss, t = r.t, s0 = X.log ? 1 : 0, started = false;
    if (X.log && t > 0) { ctx.moveTo(X.px(1), Y.px(loss[0])); started = true; }
    var s = s0;
    while (s < t) {
      var col = Math.floor(X.px(s)), e = s, lo = loss[s], hi = loss[s];
      while (e + 1 < t && Math.floor(X.px(e + 1)) === col) { e++; if (loss[e] < lo) lo = loss[e]; if (loss[e] > hi) hi = loss[e]; }
      var x = X.px(s);
      if (!started) { ctx.moveTo(x, Y.px(loss[s])); started = true; } else ctx.lineTo(x, Y.px(loss[s]));
      if (e > s) { ctx.lineTo(x, Y.px(hi)); ctx.lineTo(x, Y.px(lo)); ctx.lineTo(X.px(e), Y.px(loss[e])); }
      s = e + 1;
    }
    ctx.stroke();
    // the cursor
    if (hoverStep !== null && hoverStep < t) {
      var hx = X.px(Math.max(hoverStep, X.log ? 1 : 0));
      ctx.strokeStyle = 'rgba(200,80,40,0.9)';
      ctx.lineWidth = 1;
      ctx.beginPath(); ctx.moveTo(hx, geom.y0); ctx.lineTo(hx, geom.y0 + geom.h); ctx.stroke();
      ctx.fillStyle = 'rgba(200,80,40,1)';
      ctx.beginPath(); ctx.arc(hx, Y.px(loss[hoverStep]), 3.5, 0, 2 * Math.PI); ctx.fill();
    }
    ctx.restore();
    if (r.status === 'diverged' || r.status === 'stopped') {
      ctx.fillStyle = r.status === 'diverged' ? '#c0392b' : color;
      ctx.textAlign = 'center';
      ctx.textBaseline = 'top';
      ctx.font = '600 13px system-ui, sans-serif';
      ctx.fillText(r.status === 'diverged' ? 'diverged at step ' + r.t + ' — lower the learning rate (loss axis: log)'
        : 'stopped at step ' + r.t, geom.x0 + geom.w / 2, geom.y0 + 8);
    }
    plotCanvas._geom = geom;
    plotCanvas._x = X;
  }

  function logTicks(lo, hi) {
    var out = [], a = Math.floor(Math.log10(lo)), b = Math.ceil(Math.log10(hi));
    var mult = b - a <= 2 ? [1, 2, 5] : [1], every = Math.max(1, Math.ceil((b - a) / 6));
    for (var k = a; k <= b; k += every) {
      mult.forEach(function (m) { var v = m * Math.pow(10, k); if (v >= lo && v <= hi) out.push(v); });
    }
    return out;
  }
  function sup(n) { return String(n).split('').map(function (ch) { return '⁰¹²³⁴⁵⁶⁷⁸⁹'['0123456789'.indexOf(ch)] || '⁻'; }).join(''); }
  function sub(n) { return String(n).split('').map(function (ch) { return '₀₁₂₃₄₅₆₇₈₉'['0123456789'.indexOf(ch)]; }).join(''); }
  function wrapText(ctx, text, x, y, maxW, lh) {
    var words = text.split(' '), line = '';
    words.forEach(function (w) {
      if (ctx.measureText(line + w).width > maxW && line) { ctx.fillText(line, x, y); y += lh; line = ''; }
      line += w + ' ';
    });
    ctx.fillText(line, x, y);
  }

  function currentA(r) {
    if (r.t === 0) return null;
    var step = hoverStep !== null && hoverStep < r.t ? hoverStep : r.t - 1;
    var k = Math.floor(step / r.stride), DD = r.s.D * r.s.D;
    r.shownAStep = k * r.stride;
    return (inputs.aview.value === 'effective' ? r.Aeff : r.A).subarray(k * DD, (k + 1) * DD);
  }

  function heatColor(v) {  // diverging: blue (negative), white, red (positive); v in [−1, 1]
    v = Math.max(-1, Math.min(1, v));
    var c = v >= 0 ? [178, 24, 43] : [33, 102, 172], a = Math.abs(v);
    return 'rgb(' + [0, 1, 2].map(function (i) { return Math.round(255 + (c[i] - 255) * a); }).join(',') + ')';
  }

  function drawHeat(canvas, A, r, which) {
    var c = prepare(canvas), ctx = c.ctx;
    var caption = which === 'A' ? aCaption : aOptCaption;
    if (!A || !r) {
      ctx.fillStyle = ink(); ctx.font = '12px system-ui, sans-serif'; ctx.textAlign = 'center';
      ctx.fillText(which === 'A' ? 'A appears as training runs' : '', c.w / 2, c.h / 2);
      caption.textContent = '';
      return;
    }
    var D = r.s.D, scale = 0;
    for (var i = 0; i < D * D; i++) scale = Math.max(scale, Math.abs(r.Aopt[i]));
    var pad = 4, cell = (Math.min(c.w, c.h) - 2 * pad) / D;
    ctx.font = (D <= 4 ? 11 : 9) + 'px system-ui, sans-serif';
    ctx.textAlign = 'center';
    ctx.textBaseline = 'middle';
    for (i = 0; i < D; i++) {
      for (var j = 0; j < D; j++) {
        var v = A[i * D + j] / scale;
        ctx.fillStyle = heatColor(v);
        ctx.fillRect(pad + j * cell, pad + i * cell, cell - 1, cell - 1);
        if (D <= 5) {
          ctx.fillStyle = Math.abs(v) > 0.6 ? '#fff' : '#222';
          ctx.fillText(Math.abs(v) < 1e-3 ? '0' : fmt(A[i * D + j], 2), pad + (j + 0.5) * cell, pad + (i + 0.5) * cell);
        }
      }
    }
    if (which === 'A') {
      caption.textContent = (inputs.aview.value === 'effective' ? 'Effective A (the coefficients of βᵢ x_q,j in ŷ)'
        : 'Learned A = Σₕ vₕ[D] Uₕᵀ') + ' at step ' + r.shownAStep + (hoverStep !== null ? ' (cursor)' : '') +
        (r.s.normalize === 'sum' ? ', × N (paper normalisation)' : '') + '. Colour scale ±' + fmt(scale, 3) + '.';
    } else {
      caption.textContent = 'Theory: the minimiser’s A* = diag(1/(λ_d c_d)) in the same colours.';
    }
  }

  // ------------------------------------------------------------------------------------------------- events

  function onPointer(ev) {
    var r = run, geom = plotCanvas._geom, X = plotCanvas._x;
    if (!r || !r.trainer || !geom || r.t === 0) return;
    var rect = plotCanvas.getBoundingClientRect(), x = ev.clientX - rect.left;
    if (x < geom.x0 || x > geom.x0 + geom.w) { hoverStep = null; requestDraw(); return; }
    var s = Math.round(X.step(x));
    if (X.log && x <= X.px(1)) s = 0;
    hoverStep = Math.max(0, Math.min(r.t - 1, s));
    requestDraw();
  }
  plotCanvas.addEventListener('pointermove', onPointer);
  plotCanvas.addEventListener('pointerdown', onPointer);
  plotCanvas.addEventListener('pointerleave', function () { hoverStep = null; requestDraw(); });

  btnTrain.addEventListener('click', function () { start(); });
  btnStop.addEventListener('click', function () { stopRun(); requestDraw(); });
  btnFig3.addEventListener('click', function () { setControls(Object.assign({}, FIG3A, { seed: inputs.seed.value })); start(); });
  btnFig4.addEventListener('click', function () { setControls(Object.assign({}, FIG4, { seed: inputs.seed.value })); start(); });
  btnLink.addEventListener('click', function () {
    var rc = readControls();
    var q = queryOf(rc.settings), url = location.href.split('?')[0].split('#')[0] + '?' + q;
    linkOut.hidden = false;
    linkOut.value = url;
    linkOut.select();
    try { history.replaceState(null, '', '?' + q); } catch (e) { /* file:// may refuse */ }
  });
  inputs.model.addEventListener('change', syncDisabled);
  inputs.preset.addEventListener('change', function () {
    if (inputs.preset.value === 'custom' && !inputs.spectrum.value) inputs.spectrum.value = inputs.spectrum.placeholder;
    if (inputs.preset.value !== 'custom') inputs.spectrum.value = '';
  });
  inputs.spectrum.addEventListener('input', function () { inputs.preset.value = 'custom'; });
  Object.keys(inputs).forEach(function (k) {
    inputs[k].addEventListener('change', function () {
      if (k === 'xscale' || k === 'yscale' || k === 'aview') { requestDraw(); return; }
      start();  // every change of a setting restarts the run
    });
  });
  window.addEventListener('resize', requestDraw);

  // ------------------------------------------------------------------------------------------------- start-up

  var query = new URLSearchParams(location.search);
  var dumpInit = query.get('dump_init') === '1';
  var pageNotes = applyQuery(query);
  window.linattnExplorer = { start: start, stop: stopRun, state: function () { return run; } };
  // the first run waits for the page to load and MathJax to typeset it, so the two do not share the main thread
  var begun = false;
  function begin() {
    if (begun) return;
    begun = true;
    autorun();
  }
  function afterTypesetting() {
    var mj = window.MathJax;
    if (mj && mj.startup && mj.startup.promise) mj.startup.promise.then(begin, begin);
    else begin();
    setTimeout(begin, 4000);  // never wait longer than this
  }
  if (document.readyState === 'complete') afterTypesetting();
  else window.addEventListener('load', afterTypesetting);
  statusEl.textContent = 'waiting for the page to load …';
  requestDraw();

  function autorun() {
  if (query.get('autorun') === '0') {
    notesEl.textContent = pageNotes.join(' ');
    resultEl.textContent = JSON.stringify({ status: 'idle' });
    requestDraw();
  } else if (query.has('weights')) {
    var url = query.get('weights');
    statusEl.textContent = 'loading the initial weights from ' + url + ' …';
    fetch(url).then(function (resp) {
      if (!resp.ok) throw new Error('HTTP ' + resp.status);
      return resp.json();
    }).then(function (w) {
      start(w, 'from ' + url);
      pageNotes = [];  // later runs (any change of a setting) use the seeded weights again
    }, function (e) {
      fail('Could not load the initial weights from ' + url + ' (' + e.message + '). Opened as a file:// page the ' +
        'browser may refuse to fetch; serve the book over http.');
    });
  } else {
    start();
  }
  }
})();
