// venturi dashboard: the dialog, selection, the live indicator and the charts.
// No inline script anywhere (the pages' Content-Security-Policy forbids it).
(function () {
  "use strict";

  function dialog() { return document.getElementById("dialog"); }

  // An action's confirmation or result was swapped into the dialog: show it.
  document.addEventListener("htmx:afterSwap", function (evt) {
    var d = dialog();
    if (d && evt.detail.target && evt.detail.target.id === "dialog-body" && !d.open) {
      d.showModal();
    }
  });

  document.addEventListener("click", function (evt) {
    var t = evt.target;
    if (t instanceof Element && t.closest("[data-close]")) {
      var d = dialog();
      if (d && d.open) { d.close(); }
    }
  });

  // Select every job on the page.
  document.addEventListener("change", function (evt) {
    var t = evt.target;
    if (t instanceof HTMLInputElement && t.id === "select-all") {
      document.querySelectorAll("#selection input[name=ids]").forEach(function (box) {
        box.checked = t.checked;
      });
    }
  });

  function live(state) {
    var dot = document.getElementById("live");
    if (dot) { dot.dataset.state = state; dot.title = "live updates: " + state; }
  }
  document.addEventListener("htmx:sseOpen", function () { live("connected"); });
  document.addEventListener("htmx:sseError", function () { live("reconnecting"); });

  // --- charts ---------------------------------------------------------------------
  var charts = {};
  var PALETTE = ["#2563eb", "#dc2626", "#16a34a", "#d97706", "#7c3aed", "#0891b2", "#db2777",
                 "#4b5563"];

  function width(el) { return Math.max(240, el.clientWidth || 300); }

  function build(id, series, data) {
    var el = document.getElementById(id);
    if (!el || typeof uPlot === "undefined") { return null; }
    el.textContent = "";
    var opts = {
      width: width(el), height: 180,
      series: [{}].concat(series),
      axes: [{}, { size: 50 }],
      legend: { live: false },
      cursor: { drag: { x: false, y: false } },
      // The samples kept (an hour at most), ending at the newest: a young
      // dashboard's few minutes fill the chart instead of a sliver of an hour.
      scales: { x: { time: true, range: function (u) {
        var xs = u.data[0];
        var end = xs.length ? xs[xs.length - 1] : Date.now() / 1000;
        var first = xs.length ? xs[0] : end - 60;
        return [end - Math.min(3600, Math.max(60, end - first)), end];
      } }, y: { range: function (u, min, max) { return [0, Math.max(1, max * 1.1)]; } } }
    };
    return new uPlot(opts, data, el);
  }

  function draw(s) {
    if (!s || !s.x) { return; }
    var tp = [s.x, s.completed, s.dead];
    var lagSeries = s.kinds.map(function (k, i) {
      return { label: k, stroke: PALETTE[i % PALETTE.length], width: 2 };
    });
    var lag = [s.x].concat(s.lag);
    if (!charts.tp) {
      charts.tp = build("chart-throughput",
                        [{ label: "completed/s", stroke: PALETTE[0], width: 2,
                           fill: "rgba(37,99,235,0.08)" },
                         { label: "dead/s", stroke: PALETTE[1], width: 2 }], tp);
    } else {
      charts.tp.setData(tp);
    }
    var key = s.kinds.join("\u0000");
    if (!charts.lag || charts.lagKey !== key) {
      if (charts.lag) { charts.lag.destroy(); }
      charts.lag = build("chart-lag", lagSeries, lag);
      charts.lagKey = key;
    } else {
      charts.lag.setData(lag);
    }
  }

  document.addEventListener("DOMContentLoaded", function () {
    var data = document.getElementById("series-data");
    if (data) {
      try { draw(JSON.parse(data.textContent || "{}")); } catch (e) { /* no chart */ }
    }
  });

  document.addEventListener("htmx:sseMessage", function (evt) {
    if (evt.detail && evt.detail.type === "series") {
      try { draw(JSON.parse(evt.detail.data)); } catch (e) { /* keep the last chart */ }
    }
  });

  window.addEventListener("resize", function () {
    ["tp", "lag"].forEach(function (k) {
      var c = charts[k];
      if (c) { c.setSize({ width: width(c.root.parentNode), height: 180 }); }
    });
  });
})();
