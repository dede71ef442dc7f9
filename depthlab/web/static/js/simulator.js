// The simulator (lesson section 2a/2b): the naive stack (red row) beside an improved one
// (green row) for one N, g and setting of the model's switches (residual: a name of the
// model's residual registry; norm: none | rmsnorm on the sublayer input; x0 mixing, the
// model's x0_mix, for the residuals meta's simulator.x0_mix lists; in collapse mode the token
// mixer, attention, Gated DeltaNet or their 3:1 hybrid). Two figures share
// the controls: gradient mode (per-layer gradient bars, stream RMS, bottom/top ratio over g)
// and collapse mode (distance from all-equal per layer, stream RMS, mean cosine). The
// sliders' bounds and the switches' choices come from /api/meta (`simulator`).
(function () {
  "use strict";
  const DL = (window.DL = window.DL || {});
  DL.figures = DL.figures || {};
  DL.perf = { t0: null, samples: [] };

  const { $, range, t } = DL.kit;

  // Hover read-outs: the value under the cursor and what it means.
  const say = (key) => (x, v, k, vs) => DL.t(key, { x: DL.fmt(x, 4), v: vs });
  const sayRow = (key) => (x, v, k, vs) =>
    DL.t(key, { x: DL.fmt(x, 4), v: vs, row: DL.t(k === 0 ? "sim.row.plain" : "sim.row.improved") });

  function specs(mode, marker) {
    const C = DL.COLORS;
    // an RMS is a size: its axis starts at zero, so the improved stack's growth reads true
    const rms = (color) => ({ xLabel: t("sim.ax.write"), yLabel: t("sim.ax.rms"), height: 170, xInt: true, yZero: true,
                              legend: false, hover: say("hover.rms"), series: [{ label: "RMS", color }] });
    const rows = [{ label: t("sim.row.plain"), color: C.plain, points: true },
                  { label: t("sim.row.improved"), color: C.improved, points: true }];
    if (mode === "gradient") {
      const layers = (color) => ({ xLabel: t("sim.ax.layer"), yLabel: t("sim.ax.grad"), yLog: true, xInt: true,
                                   height: 170, legend: false, hover: say("hover.grad"),
                                   series: [{ label: t("sim.ax.grad"), color, bars: true }] });
      return {
        plainLayers: layers(C.plain), improvedLayers: layers(C.improved),
        plainRms: rms(C.plain), improvedRms: rms(C.improved),
        bottom: { xLabel: t("sim.ax.g"), yLabel: t("sim.ax.ratio"), yLog: true, height: 210, marker,
                  hover: sayRow("hover.ratio"), series: rows },
      };
    }
    const dist = (color) => ({ xLabel: t("sim.ax.depth"), yLabel: t("sim.ax.dist"), yLog: true, height: 170, xInt: true,
                               legend: false, hover: say("hover.dist"),
                               series: [{ label: t("sim.ax.dist"), color, points: true }] });
    return {
      plainLayers: dist(C.plain), improvedLayers: dist(C.improved),
      plainRms: rms(C.plain), improvedRms: rms(C.improved),
      bottom: { xLabel: t("sim.ax.depth"), yLabel: t("sim.ax.cos"), height: 210, yRange: [-0.2, 1.05], xInt: true,
                hover: (x, v, k) => sayRow("hover.cos")(x, v, k, DL.fmtNear1(v, 5)), series: rows },
    };
  }

  // The write rule of the chosen residual, from its spec (/api/meta's simulator.formulas,
  // depthlab/variants.py): F(h) is the sublayer on h (with the norm switch on, RMSNorm in the
  // residual's slot: on h, or after the add for a Post-LN residual), ⟦e⟧ the slot after the
  // add, {n} the copies of the stream.
  function formula(st) {
    const post = spec && spec.post_norm.includes(st.residual);
    const on = st.norm === "rmsnorm";
    const f = (h) => (on && !post ? "F(RMSNorm(" + h + "))" : "F(" + h + ")");
    const wrap = (e) => (on ? "RMSNorm(" + e + ")" : e);
    const n = (spec && spec.streams && spec.streams[st.residual]) || "n"; // copies of the stream
    const template = (spec && spec.formulas && spec.formulas[st.residual]) || "x ← " + st.residual + "(x, F(x))";
    const mix = st.x0 && spec && spec.x0_formula ? spec.x0_formula + "; " : ""; // before every layer
    return mix + template.replace(/F\(([^()]*)\)/g, (_, h) => f(h))
      .replace(/⟦([^⟧]*)⟧/g, (_, e) => wrap(e)).replace(/\{n\}/g, String(n));
  }
  let spec = null; // /api/meta's `simulator`
  const labelKey = (name) => (spec && spec.labels && spec.labels[name]) || "sim.res." + name;
  const residualLabel = (name) => (DL.hasKey(labelKey(name)) ? DL.t(labelKey(name)) : name);
  // The norm switch names its slot: the sublayer input, or after the add (Post-LN residuals).
  const normFree = (name) => !!(spec && spec.norm_free && spec.norm_free.includes(name));
  const normLabel = (st) => DL.t(spec && spec.post_norm.includes(st.residual) ? "sim.t.postnorm" : "sim.t.prenorm");
  // x0 mixing mixes one stream that the residual does not hold on the sphere (meta's
  // simulator.x0_mix); a static copy holds it only for the residuals of its x0_static.
  const x0Applies = (name) => !!(spec && spec.x0_mix && spec.x0_mix.includes(name));
  const x0Stored = (name) => !(spec && spec.x0_static) || spec.x0_static.includes(name);
  const x0Open = (name) => x0Applies(name) && x0Stored(name);
  const x0Why = (name) => DL.t(!x0Applies(name) ? "sim.t.x0.off" : !x0Stored(name) ? "sim.t.x0.static" : "sim.t.x0.hint");
  function x0Show(st) { // the checkbox, its label and its tooltip for the state `st`
    const box = $("t-x0");
    if (!box) return;
    Object.assign(box, { checked: !!st.x0, disabled: !x0Open(st.residual) });
    $("t-x0-label").parentElement.title = x0Why(st.residual);
    // in a static copy the reason is written out, not only in the tooltip
    $("t-x0-why").textContent = x0Applies(st.residual) && !x0Stored(st.residual) ? " " + DL.t("sim.t.x0.static.short") : "";
  }

  // The token mixer of collapse mode (meta's simulator.mixers): both rows' sublayers. Gradient
  // mode has none; a residual the model's DeltaNet layer refuses keeps attention; a static
  // copy holds the other mixers for the residuals of its mixer_static, without x0 mixing.
  const mixerWhy = (st) => (st.mode !== "collapse" ? "sim.t.mixer.gradient"
    : spec && spec.mixer_refused && spec.mixer_refused.includes(st.residual) ? "sim.t.mixer.off"
    : spec && spec.mixer_static && (!spec.mixer_static.includes(st.residual) || st.x0) ? "sim.t.mixer.static" : null);
  const mixerOf = (st) => (mixerWhy(st) ? "attention" : st.mixer); // the mixer the request carries
  function mixerShow(st) {
    const sel = $("t-mixer");
    if (!sel) return;
    const why = mixerWhy(st);
    Object.assign(sel, { value: mixerOf(st), disabled: !!why });
    sel.parentElement.title = why ? DL.t(why) : DL.t("sim.t.mixer.hint");
  }

  // The switches, one radio per residual and a checkbox for the input norm, from meta.
  function buildSwitches(spec, st, onSwitch) {
    const box = $("sim-switches");
    box.textContent = "";
    const group = document.createElement("span");
    group.className = "switch-group";
    group.setAttribute("role", "radiogroup");
    group.setAttribute("aria-label", DL.t("sim.sw.residual"));
    group.append(DL.t("sim.sw.residual") + " ");
    for (const name of spec.residuals) {
      const label = document.createElement("label");
      const radio = Object.assign(document.createElement("input"), {
        type: "radio", name: "sim-residual", id: "t-res-" + name, value: name, checked: st.residual === name });
      // a residual that allows no norm (nGPT) turns the norm switch off with it, one that
      // x0 mixing does not apply to (or a static copy does not hold it for) the x0 switch
      radio.addEventListener("change", () => onSwitch(Object.assign({ residual: name },
        normFree(name) ? { norm: "none" } : {}, x0Open(name) ? {} : { x0: false })));
      label.append(radio, " " + residualLabel(name));
      group.append(label, " ");
    }
    const label = document.createElement("label");
    const box2 = Object.assign(document.createElement("input"), {
      type: "checkbox", id: "t-norm", checked: st.norm === "rmsnorm", disabled: normFree(st.residual) });
    box2.addEventListener("change", (e) => onSwitch({ norm: e.target.checked ? "rmsnorm" : "none" }));
    const text = Object.assign(document.createElement("span"), { id: "t-norm-label", textContent: " " + normLabel(st) });
    label.append(box2, text);
    const x0 = document.createElement("label");
    const box3 = Object.assign(document.createElement("input"), { type: "checkbox", id: "t-x0" });
    box3.addEventListener("change", (e) => onSwitch({ x0: e.target.checked }));
    x0.append(box3, Object.assign(document.createElement("span"), { id: "t-x0-label", textContent: " " + DL.t("sim.t.x0") }),
              Object.assign(document.createElement("span"), { id: "t-x0-why", className: "note" }));
    const mixer = document.createElement("label");
    const sel = Object.assign(document.createElement("select"), { id: "t-mixer" });
    for (const name of spec.mixers || []) {
      const key = "sim.mixer." + name;
      sel.append(Object.assign(document.createElement("option"), { value: name, textContent: DL.hasKey(key) ? DL.t(key) : name }));
    }
    sel.addEventListener("change", (e) => onSwitch({ mixer: e.target.value }));
    mixer.append(DL.t("sim.sw.mixer") + " ", sel);
    box.append(group, label, " ", x0, " ", mixer);
    x0Show(st);
    mixerShow(st);
  }

  // One token through the first writes, as arrows in the plane the server chose
  // (depthlab.probes.simulator.Trail): every number here is the server's, the page only
  // draws. rule "replace": each state drawn from the origin, the older ones fainter;
  // "add": x0, then each write from the tip of the state before, and the sum dashed;
  // "other": each write from the tip, and dashed what the residual did besides adding it.
  const SUB = "₀₁₂₃₄₅₆₇₈₉";
  const xs = (k) => "x" + String(k).split("").map((c) => SUB[+c]).join("");
  function trailSegments(tr) {
    const at = (v, i) => [v[2 * i], v[2 * i + 1]];
    const K = tr.wlen.length;
    const len = (i) => DL.fmt(tr.len[i]);
    const out = [{ from: [0, 0], to: at(tr.xy, 0), cls: "x0", tag: xs(0), text: DL.t("sim.trail.x0", { len: len(0) }) }];
    for (let k = 1; k <= K; k++) {
      const v = { k, xj: xs(k - 1), xk: xs(k), len: len(k), w: DL.fmt(tr.wlen[k - 1]),
                  formula: xs(k) + " = F(" + xs(k - 1) + ")" };
      const tag = k === K || tr.rule === "replace" ? xs(k) : null; // a replaced state is known by its name
      if (tr.rule === "replace") {
        out.push({ from: [0, 0], to: at(tr.xy, k), cls: "state", tag, opacity: 0.3 + 0.7 * k / K,
                   text: DL.t("sim.trail.state", v) });
      } else if (tr.rule === "add") {
        out.push({ from: at(tr.xy, k - 1), to: at(tr.xy, k), cls: "write", tag, text: DL.t("sim.trail.write", v) });
      } else {
        const from = at(tr.xy, k - 1);
        const w = at(tr.wxy, k - 1);
        const head = [from[0] + w[0], from[1] + w[1]];
        out.push({ from, to: head, cls: "write", text: DL.t("sim.trail.write", v) },
                 { from: head, to: at(tr.xy, k), cls: "rest", dash: true, tag, text: DL.t("sim.trail.rest", v) });
      }
    }
    if (tr.rule === "add" && K > 1) {
      out.push({ from: [0, 0], to: at(tr.xy, K), cls: "sum", dash: true,
                 text: DL.t("sim.trail.sum", { k: K, xk: xs(K), len: len(K) }) });
    }
    return out;
  }
  function drawTrails(r) {
    const rows = { plain: r.naive.trail, improved: r.improved.trail };
    const said = [];
    for (const [row, tr] of Object.entries(rows)) {
      const box = $("trail-" + row);
      if (!tr) { box.textContent = ""; continue; }
      const kept = DL.t("sim.trail.kept", { p: DL.fmt(100 * tr.kept, 2) });
      DL.arrows(box, trailSegments(tr), $("trail-ro-" + row), kept, DL.t(row === "plain" ? "sim.trail.red" : "sim.trail.green"));
      Object.assign(box.dataset, { rule: tr.rule, writes: tr.wlen.length });
      const K = tr.wlen.length;
      said.push(DL.t(tr.reading, { row: DL.t(row === "plain" ? "sim.trail.red" : "sim.trail.green"), k: K,
                                   first: DL.fmt(tr.len[0]), last: DL.fmt(tr.len[K]), w: DL.fmt(tr.wmean) }));
    }
    $("reading-trail").textContent = said.join(DL.lang() === "zh" ? "" : " ");
    const tr = r.improved.trail;
    $("trail-note").textContent = tr ? DL.t("sim.trail.note", { token: tr.token + 1, k: tr.wlen.length }) : "";
  }

  DL.figures.simulator = function (source, showError) {
    let mode = null;
    let charts = {};
    let current = null; // the newest state asked for
    let lastSim = null;
    let lastSweep = null;
    let onSwitch = (patch) => DL.state.set(patch);
    const status = $("sim-status");

    // Bounds first: no request leaves before the state is within them.
    const ready = source.meta().then((m) => {
      spec = m.simulator;
      const n = $("n");
      const g = $("g");
      [n.min, n.max, n.step] = [spec.depth[0], spec.depth[1], 1];
      [g.min, g.max, g.step] = [spec.gain[0], spec.gain[1], spec.gain_step];
      DL.state.bound(spec);
      const st = DL.state.get();
      [n.value, g.value] = [st.n, st.g];
      buildSwitches(spec, st, (patch) => onSwitch(patch));
    });
    ready.catch(showError);

    function build(m) {
      mode = m;
      const s = specs(m, () => (current ? current.g : null));
      charts = {
        plainLayers: DL.charts.make($("c-plain-layers"), s.plainLayers),
        plainRms: DL.charts.make($("c-plain-rms"), s.plainRms),
        improvedLayers: DL.charts.make($("c-improved-layers"), s.improvedLayers),
        improvedRms: DL.charts.make($("c-improved-rms"), s.improvedRms),
        bottom: DL.charts.make($("c-bottom"), s.bottom),
      };
      $("sim-bottom-h").textContent = DL.t(m === "gradient" ? "sim.bottom.gradient" : "sim.bottom.collapse");
    }

    function readout(el, pairs) {
      el.textContent = pairs.map(([k, v]) => DL.t(k) + " " + DL.fmt(v)).join(" · ");
    }

    function drawSim(r) {
      lastSim = r;
      if (r.kind !== mode) return;
      drawTrails(r);
      const n = r.request.depth;
      const g = r.request.gain;
      for (const row of ["plain", "improved"]) {
        const d = r[row === "plain" ? "naive" : row];
        const el = $("ro-" + row);
        if (r.kind === "gradient") {
          charts[row + "Layers"].update(range(1, n), [d.per_layer]);
          readout(el, [["sim.ro.ratio", d.ratio], ["sim.ro.rms", d.stream_rms[n]]]);
          el.dataset.ratio = d.ratio;
        } else {
          charts[row + "Layers"].update(range(0, n), [d.rel_distance]);
          // the two rows' cosines written so that different values read differently
          const cos = DL.fmtApart([r.naive.mean_cosine[n], r.improved.mean_cosine[n]])[row === "plain" ? 0 : 1];
          el.textContent = [DL.t("sim.ro.dist") + " " + DL.fmt(d.rel_distance[n]), DL.t("sim.ro.cos") + " " + cos,
                            DL.t("sim.ro.rms") + " " + DL.fmt(d.stream_rms[n])].join(" · ");
          el.dataset.distance = d.rel_distance[n];
          el.dataset.cosine = d.mean_cosine[n];
        }
        el.dataset.n = n;
        el.dataset.rms = d.stream_rms[n];
        charts[row + "Rms"].update(range(0, d.stream_rms.length - 1), [d.stream_rms]);
      }
      if (r.kind === "collapse") {
        charts.bottom.update(range(0, n), [r.naive.mean_cosine, r.improved.mean_cosine]);
        $("ro-bottom").textContent = "";
        const [a, b] = DL.fmtApart([r.naive.mean_cosine[n], r.improved.mean_cosine[n]]);
        $("reading-bottom").textContent = DL.t("read.cos", { n, a, b });
      }
      $("reading-sim").textContent = r.kind === "gradient"
        ? DL.t("read.grad", { n, g: g.toFixed(2), a: DL.pow10(r.naive.ratio), b: DL.pow10(r.improved.ratio) })
        : DL.t("read.dist", { n, g: g.toFixed(2), mixer: DL.t("sim.mixer." + (r.request.mixer || "attention")),
                              a: DL.pow10(r.naive.rel_distance[n]),
                              b: DL.pow10(r.improved.rel_distance[n]) });
      const fresh = current && n === current.n && g === current.g &&
        r.request.residual === current.residual && r.request.norm === current.norm &&
        r.request.x0_mix === current.x0 && (r.kind !== "collapse" || r.request.mixer === mixerOf(current));
      status.textContent = fresh ? "" : DL.t("sim.busy");
      if (fresh && DL.perf.t0 != null) {
        const t0 = DL.perf.t0;
        DL.perf.t0 = null;
        requestAnimationFrame(() => DL.perf.samples.push(performance.now() - t0));
      }
    }

    function drawSweep(r) {
      lastSweep = r;
      if (mode !== "gradient") return;
      charts.bottom.update(r.gains, [r.naive, r.improved]);
      const orders = (ys) => {
        const ok = ys.filter((v) => v > 0);
        return ok.length ? Math.log10(Math.max(...ok) / Math.min(...ok)) : null;
      };
      readout($("ro-bottom"), [["sim.ro.orders", orders(r.naive)]]);
      $("reading-bottom").textContent = DL.t("read.sweep", { n: r.request.depth, a: DL.fmt(orders(r.naive), 2),
                                                             b: DL.fmt(orders(r.improved), 2) });
    }

    const err = (e) => {
      status.textContent = DL.t("err.with", { what: DL.t("err"), message: e.message });
      showError(e);
    };
    const sendSim = DL.latestOnly((req) => source.section("simulate", req), drawSim, err);
    const sendSweep = DL.latestOnly((req) => source.section("sweep", req), drawSweep, err);

    return {
      update(st) {
        if (st.mode !== mode) build(st.mode);
        current = st;
        $("improved-formula").textContent = formula(st);
        // a design that computes the plain residual's numbers at init says so
        $("sim-note-init").textContent = DL.hasKey("sim.init." + st.residual) ? DL.t("sim.init." + st.residual) : "";
        $("n-out").textContent = st.n;
        $("g-out").textContent = st.g.toFixed(2);
        ready.then(() => {
          if (current !== st) return; // a newer state is on its way
          for (const el of document.querySelectorAll("#sim-switches [name=sim-residual]")) el.checked = el.value === st.residual;
          if (normFree(st.residual) && st.norm !== "none") { // a link that asks for both
            onSwitch({ norm: "none" });
            return;
          }
          if (st.x0 && !x0Open(st.residual)) { // a link that asks for x0 mixing where it is not
            onSwitch({ x0: false });
            return;
          }
          if ($("t-norm")) Object.assign($("t-norm"), { checked: st.norm === "rmsnorm", disabled: normFree(st.residual) });
          if ($("t-norm-label")) $("t-norm-label").textContent = " " + normLabel(st);
          x0Show(st);
          mixerShow(st);
          $("improved-formula").textContent = formula(st);
          const switches = { residual: st.residual, norm: st.norm, x0_mix: st.x0 };
          // the mixer travels in collapse mode only (gradient mode and the sweep have none)
          const mixer = st.mode === "collapse" ? { mixer: mixerOf(st) } : {};
          sendSim(Object.assign({ mode: st.mode, n: st.n, g: st.g }, switches, mixer));
          if (st.mode === "gradient") sendSweep(Object.assign({ n: st.n }, switches));
        }, () => {}); // a failed meta is shown once, by `ready` above
      },
      // How a switch reaches the state (main.js times it, like a slider).
      onSwitch(fn) {
        onSwitch = fn;
      },
      relabel() {
        const r = DL.state.get().residual;
        $("sim-note-init").textContent = DL.hasKey("sim.init." + r) ? DL.t("sim.init." + r) : "";
        if (spec) buildSwitches(spec, DL.state.get(), (patch) => onSwitch(patch));
        build(mode);
        if (lastSim) drawSim(lastSim);
        if (lastSweep) drawSweep(lastSweep);
      },
    };
  };
})();
