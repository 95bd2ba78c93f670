// rocketstore console: the live TPS chart of the overview page (uPlot, served by the console).
(function () {
  "use strict";
  var el = document.getElementById("tps-chart");
  if (!el || typeof uPlot === "undefined") { return; }
  var src = el.getAttribute("data-src");
  var data = [[], [], []];
  var plot = null;

  function size() { return { width: Math.max(320, el.clientWidth - 20), height: 280 }; }

  function make() {
    var s = size();
    plot = new uPlot({
      width: s.width, height: s.height,
      scales: { x: { time: true, range: function (u, min, max) {  // at least the last minute
                     if (min == null || max == null) { var now = Date.now() / 1000; return [now - 60, now]; }
                     return [Math.min(min, max - 60), max]; } },
                y: { range: function (u, min, max) { return [0, Math.max(5, max * 1.15)]; } } },
      series: [{}, { label: "Put TPS", stroke: "#2f80c2", width: 2, fill: "rgba(47,128,194,0.08)" },
                   { label: "Get TPS", stroke: "#1e8e5a", width: 2 }],
      axes: [{}, { label: "messages / s", size: 60 }]
    }, data, el);
    el.setAttribute("data-ready", "1");
  }

  function update(j) {
    if (!j.available) { return; }
    data = [j.t, j.put_tps, j.get_tps];
    if (!plot) { make(); } else { plot.setData(data); }
    var n = j.t.length;
    var puts = document.querySelectorAll("#brokers .put-tps"), gets = document.querySelectorAll("#brokers .get-tps");
    if (n && puts.length === 1 && gets.length === 1) {  // one broker: its live rate
      puts[0].textContent = j.put_tps[n - 1].toFixed(1);
      gets[0].textContent = j.get_tps[n - 1].toFixed(1);
    }
    el.setAttribute("data-points", String(n));
  }

  function poll() {
    fetch(src, { cache: "no-store" }).then(function (r) { return r.json(); }).then(update)
      .catch(function () { /* the broker may be restarting: try again next tick */ });
  }
  window.addEventListener("resize", function () { if (plot) { plot.setSize(size()); } });
  poll();
  setInterval(poll, 2000);
})();
