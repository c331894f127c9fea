// The sluice dashboard: the history and the live samples of
// /admin/v1/events, drawn with uPlot. Everything it computes is a
// rearrangement of the samples; the status line comes from the server.
"use strict";
(function () {
  const MAX = 900; // 15 minutes of one-second samples, as the server keeps
  const palette = ["#4fc3f7", "#ffb74d", "#81c784", "#e57373", "#ba68c8", "#fff176", "#4db6ac", "#f06292", "#a1887f", "#90a4ae"];
  const state = { meta: null, samples: [], charts: {} };
  window.sluice = state; // for the browser test and for a curious on-call engineer's console

  const css = getComputedStyle(document.documentElement);
  const grid = css.getPropertyValue("--grid").trim() || "#263041";
  const muted = css.getPropertyValue("--muted").trim() || "#8b96a8";

  const $ = (id) => document.getElementById(id);
  const fmt = (v, d) => (v == null || !isFinite(v) ? "–" : v.toFixed(d === undefined ? 1 : d));

  // Each chart maps the samples to series. keys name the series; when they
  // change (a new model, a new refusal reason) the chart is built anew.
  const charts = [
    {
      id: "goodput", title: "Goodput and capacity", why: "answers/s; a gap under capacity with refusals means shedding",
      series: (m, ss) => [
        { label: "goodput", get: (s) => s.goodput },
        { label: "capacity", get: (s) => (s.capacity > 0 ? s.capacity : null), dash: [6, 4] },
      ],
    },
    {
      id: "inflight", title: "In flight and the concurrency limit", why: "slots",
      series: () => [
        { label: "in flight", get: (s) => s.in_flight },
        // Learnt from the provider's answers when none is configured.
        { label: "concurrency", get: (s) => s.concurrency, dash: [6, 4] },
        // With replicas leasing on Redis, concurrency is this replica's
        // lease of the cluster's.
        { label: "cluster", get: (s) => (s.cluster ? s.cluster : null), dash: [2, 3] },
      ],
    },
    {
      id: "depth", title: "Queue depth by rank", why: "requests waiting",
      series: (m, ss) => ranksShown(m, ss).map((r) => ({ label: rankLabel(m, r), get: (s) => (s.depth ? s.depth[r] : null) })),
    },
    {
      id: "wait", title: "Estimated wait by rank, against each class's default deadline", why: "seconds",
      series: (m, ss) => {
        const out = ranksShown(m, ss).map((r) => ({ label: "wait " + rankLabel(m, r), get: (s) => (s.wait_ms ? s.wait_ms[r] / 1000 : null) }));
        for (const [name, c] of classes(m)) {
          out.push({ label: "deadline " + name, get: () => c.default_timeout_ms / 1000, dash: [3, 5], width: 1, deadline: true });
        }
        return out;
      },
      // Up to the tightest deadline at least, so that the wait that matters
      // first is not flattened by a batch deadline of minutes; longer
      // deadlines come into view as waits approach them.
      range: (series, data) => {
        let wait = 0;
        let tightest = Infinity;
        series.forEach((se, i) => {
          for (const v of data[i + 1]) {
            if (v == null) continue;
            if (se.deadline) tightest = Math.min(tightest, v);
            else wait = Math.max(wait, v);
          }
        });
        return [0, Math.max(wait * 1.2, isFinite(tightest) ? tightest * 1.15 : 1)];
      },
    },
    {
      id: "refusals_reason", title: "Refusals by reason", why: "per second",
      series: (m, ss) => keysOf(ss, "refused_reason").map((k) => ({ label: k, get: (s) => perSecond(s, s.refused_reason[k] || 0) })),
    },
    {
      id: "would_refuse", title: "Would refuse (observe mode)", why: "per second: let through, refused when enforced",
      series: (m, ss) => keysOf(ss, "would_refuse_reason").map((k) => ({ label: k, get: (s) => perSecond(s, (s.would_refuse_reason || {})[k] || 0) })),
    },
    {
      id: "refusals_class", title: "Refusals by class", why: "per second",
      series: (m, ss) => keysOf(ss, "refused_class").map((k) => ({ label: k, get: (s) => perSecond(s, s.refused_class[k] || 0) })),
    },
    {
      id: "service", title: "Service time by model", why: "seconds, p50 and p95",
      series: (m, ss) => keysOf(ss, "service_ms").flatMap((k) => [
        { label: k + " p50", get: (s) => (s.service_ms[k] ? s.service_ms[k][0] / 1000 : null) },
        { label: k + " p95", get: (s) => (s.service_ms[k] ? s.service_ms[k][1] / 1000 : null), dash: [6, 4], same: true },
      ]),
    },
    {
      id: "retry", title: "Retry budget", why: "retries it would allow now",
      series: () => [{ label: "tokens", get: (s) => (s.retry_budget == null ? null : s.retry_budget) }],
    },
    {
      id: "spend", title: "Spend rate against the ceiling's stages", why: "USD/hour", spend: true,
      series: (m, ss) => {
        const out = [{ label: "global", get: (s) => (s.spend ? s.spend.rate_per_hour : null), width: 2 }];
        for (const k of keysOf(ss, "spend.tenants")) out.push({ label: "tenant " + k, get: (s) => (s.spend && s.spend.tenants ? s.spend.tenants[k] : null), width: 1 });
        const sp = m.spend || {};
        const flat = [["shed speculative", sp.shed_speculative_at], ["degrade", sp.degrade_at], ["reject", sp.reject_at], ["ceiling", sp.ceiling_per_hour], ["alert", sp.alert_per_hour]];
        for (const [label, v] of flat) if (v > 0) out.push({ label, get: () => v, dash: [3, 5], width: 1 });
        return out;
      },
    },
    {
      id: "wasted", title: "Wasted spend", why: "USD/hour of answers nobody received", spend: true,
      series: () => [{ label: "wasted", get: (s) => (s.spend ? s.spend.wasted_per_hour : null) }],
    },
  ];

  // The interval's count as a rate: samples are about a second apart.
  function perSecond(s, n) {
    const i = state.samples.indexOf(s);
    const prev = i > 0 ? state.samples[i - 1] : null;
    const dt = prev ? (s.t - prev.t) / 1000 : 1;
    return dt > 0 ? n / dt : n;
  }

  function classes(m) {
    return Object.entries(m.classes || {}).sort((a, b) => b[1].rank - a[1].rank);
  }

  // The ranks worth a line: those of a class, and any that held a queue.
  function ranksShown(m, ss) {
    const set = new Set(classes(m).map(([, c]) => c.rank));
    for (const s of ss) (s.depth || []).forEach((d, r) => { if (d > 0) set.add(r); });
    return [...set].sort((a, b) => b - a);
  }

  function rankLabel(m, r) {
    const names = classes(m).filter(([, c]) => c.rank === r).map(([n]) => n);
    return "rank " + r + (names.length ? " (" + names.join(", ") + ")" : "");
  }

  function keysOf(ss, path) {
    const set = new Set();
    for (const s of ss) {
      let o = s;
      for (const p of path.split(".")) o = o ? o[p] : null;
      if (o) Object.keys(o).forEach((k) => set.add(k));
    }
    return [...set].sort();
  }

  const main = $("charts");
  for (const c of charts) {
    const box = document.createElement("section");
    box.className = "chart";
    box.id = "chart-" + c.id;
    const h = document.createElement("h2");
    h.textContent = c.title + " ";
    const why = document.createElement("span");
    why.className = "why";
    why.textContent = "(" + c.why + ")";
    h.appendChild(why);
    box.appendChild(h);
    const plot = document.createElement("div");
    box.appendChild(plot);
    main.appendChild(box);
    c.box = box;
    c.plot = plot;
    c.sig = null;
  }

  function width(c) {
    return Math.max(300, c.box.clientWidth - 16);
  }

  function draw() {
    const m = state.meta;
    if (!m) return;
    const ss = state.samples;
    const xs = ss.map((s) => s.t / 1000);
    for (const c of charts) {
      if (c.spend && !m.spend) {
        c.box.hidden = true;
        continue;
      }
      const series = c.series(m, ss);
      const sig = series.map((s) => s.label).join("\u0000");
      c.shown = series;
      const data = [xs].concat(series.map((se) => ss.map((s) => {
        const v = se.get(s);
        return v == null || !isFinite(v) ? null : v;
      })));
      if (sig !== c.sig) {
        if (c.u) c.u.destroy();
        c.sig = sig;
        let color = 0;
        const opts = {
          width: width(c), height: 190,
          scales: { x: { time: true }, y: { range: c.range ? (u) => c.range(c.shown, u.data) : (u, lo, hi) => [0, hi > 0 ? hi * 1.1 : 1] } },
          axes: [
            { stroke: muted, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid } },
            { stroke: muted, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid }, size: 55 },
          ],
          legend: { live: true },
          series: [{}].concat(series.map((se) => {
            const stroke = palette[(se.same ? color - 1 : color++) % palette.length];
            return { label: se.label, stroke, width: se.width || 1.5, dash: se.dash, points: { show: false }, spanGaps: false };
          })),
        };
        c.u = new uPlot(opts, data, c.plot);
        state.charts[c.id] = c.u;
      } else {
        c.u.setData(data);
      }
    }
  }

  function showNumbers(s) {
    $("numbers").dataset.t = String(s.t);
    $("n-goodput").textContent = fmt(s.goodput);
    $("n-capacity").textContent = s.capacity > 0 ? fmt(s.capacity) : "–";
    $("n-in-flight").textContent = String(s.in_flight);
    $("n-concurrency").textContent = String(s.concurrency) + (s.learned ? " (learnt)" : "");
    $("n-queued").textContent = String(s.queued);
    $("n-served").textContent = String(s.served);
    $("n-refused").textContent = String(s.refused);
    $("n-retry-budget").textContent = s.retry_budget == null ? "off" : fmt(s.retry_budget);
    if (s.spend) {
      $("num-spend").hidden = false;
      $("n-spend-rate").textContent = fmt(s.spend.rate_per_hour, 2);
    }
    showStore(s.store);
    showPools(s.pools || []);
    const st = s.status || { level: "ok", text: "" };
    $("status").dataset.level = st.level;
    $("status-text").textContent = st.text;
    const ul = $("status-details");
    ul.replaceChildren(...(st.details || []).map((d) => {
      const li = document.createElement("li");
      li.textContent = d;
      return li;
    }));
  }

  // showStore says Redis's state (store.redis) and since when, in the
  // page's local time (the full time in its title); hidden without Redis.
  function showStore(st) {
    const box = $("num-store");
    box.hidden = !st;
    if (!st) return;
    const since = new Date(st.since);
    box.dataset.state = st.state;
    box.title = "since " + since.toISOString();
    $("n-store").textContent = st.state + " since " + since.toLocaleTimeString();
  }

  // showPools fills the table of (deployment, model) pools; hidden with one
  // upstream, which has none.
  function showPools(pools) {
    $("pools").hidden = pools.length === 0;
    $("pools-body").replaceChildren(...pools.map((p) => {
      const tr = document.createElement("tr");
      tr.dataset.down = p.down ? "true" : "false";
      const cells = [p.name, p.in_flight + " / " + p.concurrency, String(p.queued),
        p.tokens == null ? "–" : fmt(p.tokens), p.down ? "down" : "up"];
      for (const c of cells) {
        const td = document.createElement("td");
        td.textContent = c;
        tr.appendChild(td);
      }
      return tr;
    }));
  }

  function add(s) {
    state.samples.push(s);
    if (state.samples.length > MAX) state.samples.splice(0, state.samples.length - MAX);
  }

  let pending = false;
  function redraw() {
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => {
      pending = false;
      draw();
    });
  }

  const conn = $("conn");
  const es = new EventSource("/admin/v1/events");
  es.addEventListener("history", (e) => {
    const h = JSON.parse(e.data);
    state.meta = h.meta;
    state.samples = [];
    for (const s of h.samples || []) add(s);
    if (state.samples.length) showNumbers(state.samples[state.samples.length - 1]);
    redraw();
  });
  es.onmessage = (e) => {
    const s = JSON.parse(e.data);
    add(s);
    showNumbers(s);
    redraw();
  };
  es.onopen = () => {
    conn.dataset.state = "open";
    conn.textContent = "live";
  };
  es.onerror = () => {
    // EventSource reconnects by itself; the history event then refills.
    conn.dataset.state = "closed";
    conn.textContent = "disconnected: retrying";
  };
  window.addEventListener("resize", () => {
    for (const c of charts) if (c.u) c.u.setSize({ width: width(c), height: 190 });
  });
})();
