// SkillOS console: progressive enhancement only (every page works without it).
//  * search as you type: the server renders the results (escaped) and the URL keeps ?q=
//  * interactive charts (uPlot) from /api/runs/<id>/series
//  * a run in progress: server-sent events add each task as it ends and refresh the charts
(function () {
  "use strict";
  const COLORS = ["#2f5fd0", "#d1495b", "#1a7f37", "#edae49", "#7b4fc9", "#00798c", "#8a5a44", "#6c757d"];

  function searchAsYouType() {
    const box = document.querySelector("input[data-search-url]");
    const out = document.getElementById("search-results");
    const list = document.getElementById("skills");
    const modeBox = document.getElementById("mode");
    if (!box || !out) return;
    let timer = null, pending = null;
    function changed() {
      clearTimeout(timer);
      timer = setTimeout(async function () {
        const q = box.value.trim();
        const mode = modeBox ? modeBox.value : "bm25";
        const url = new URL(box.dataset.searchUrl, location.href);
        url.searchParams.set("q", q);
        url.searchParams.set("mode", mode);
        if (pending) pending.abort();
        pending = new AbortController();
        try {
          const resp = await fetch(url, {signal: pending.signal, credentials: "same-origin"});
          if (resp.redirected || resp.status === 401) { location.reload(); return; }
          out.innerHTML = await resp.text();   // server-rendered fragment, escaped by the server
          if (list) list.hidden = q.length > 0;
          const page = new URL(location.href);
          if (q) page.searchParams.set("q", q); else page.searchParams.delete("q");
          if (mode !== "bm25") page.searchParams.set("mode", mode); else page.searchParams.delete("mode");
          page.searchParams.delete("after");
          history.replaceState(null, "", page);
        } catch (e) {
          if (e.name !== "AbortError") console.error(e);
        }
      }, 120);
    }
    box.addEventListener("input", changed);
    if (modeBox) modeBox.addEventListener("change", changed);
  }

  // --- charts ---
  const charts = [];

  function chartWidth(el) { return Math.max(300, el.clientWidth - 16); }

  function makeChart(el, title, yLabel, xs, named) {
    const names = Object.keys(named);
    el.textContent = "";
    const cap = document.createElement("figcaption");
    cap.textContent = title;
    el.appendChild(cap);
    if (!names.length || !xs.length) {
      const p = document.createElement("p");
      p.className = "muted small";
      p.textContent = "No data yet.";
      el.appendChild(p);
      return null;
    }
    const opts = {
      width: chartWidth(el), height: 230,
      scales: {x: {time: false}},
      axes: [{label: xs === null ? "" : (el.dataset.x || "task position in the stream")}, {label: yLabel}],
      series: [{label: el.dataset.x || "position"}].concat(names.map(function (n, i) {
        return {label: n, stroke: COLORS[i % COLORS.length], width: 2, spanGaps: true, points: {show: xs.length < 60}};
      })),
    };
    const data = [xs].concat(names.map(function (n) { return named[n]; }));
    const plot = new uPlot(opts, data, el);
    return {el: el, plot: plot, names: names};
  }

  async function loadCharts(holder) {
    const url = holder && holder.dataset.seriesUrl;
    if (!url || typeof uPlot === "undefined") return;
    const resp = await fetch(url, {credentials: "same-origin"});
    if (!resp.ok) return;
    const s = await resp.json();
    charts.splice(0).forEach(function (c) { c && c.plot.destroy(); });
    const panels = document.querySelector("[data-chart-panels]");
    if (panels) {   // training run: one chart per metric family, x = step
      panels.textContent = "";
      s.panels.forEach(function (p) {
        const fig = document.createElement("figure");
        fig.className = "chart";
        fig.dataset.x = "step";
        panels.appendChild(fig);
        charts.push(makeChart(fig, p.title, "", s.x, p.series));
      });
      return;
    }
    document.querySelectorAll("figure[data-chart]").forEach(function (fig) {
      const series = s[fig.dataset.chart] || {};
      charts.push(makeChart(fig, fig.dataset.title, fig.dataset.y || "", s.x, series));
    });
  }

  function live(holder) {
    const url = holder && holder.dataset.eventsUrl;
    if (!url || typeof EventSource === "undefined") return;
    const rows = document.querySelector("tbody[data-live]");
    const done = document.querySelector("[data-done]");
    const empty = document.getElementById("no-tasks");
    let refresh = null;
    const source = new EventSource(url);
    function onRow(ev) {
      const data = JSON.parse(ev.data);
      if (done) done.textContent = String(data.total);
      if (rows) {
        rows.insertAdjacentHTML("afterbegin", data.html);   // rendered and escaped by the server
        if (empty) empty.remove();
      }
      if (!refresh) refresh = setTimeout(function () { refresh = null; loadCharts(holder); }, 1500);
    }
    source.addEventListener("summary", function (ev) {
      const box = document.getElementById("summary-live");
      if (box) box.outerHTML = JSON.parse(ev.data).html;   // rendered and escaped by the server
    });
    source.addEventListener("task", onRow);
    source.addEventListener("step", onRow);
    source.addEventListener("status", function () {
      source.close();
      setTimeout(function () { location.reload(); }, 500);
    });
  }

  function resize() {
    charts.forEach(function (c) { if (c) c.plot.setSize({width: chartWidth(c.el), height: 230}); });
  }

  document.addEventListener("DOMContentLoaded", function () {
    searchAsYouType();
    const holder = document.getElementById("live");
    if (holder) {
      loadCharts(holder).catch(console.error);
      live(holder);
    }
    let t = null;
    window.addEventListener("resize", function () { clearTimeout(t); t = setTimeout(resize, 150); });
  });
})();
