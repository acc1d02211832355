// The dashboard's script: it follows the page's event stream (server-sent
// events), puts each fragment it carries (HTML the server rendered and
// escaped with the page's own templates) in the element of that id, draws
// the charts with uPlot, and sends the job page's actions with the
// session's CSRF token. No framework, no build step.
(function () {
  'use strict';
  var body = document.body;
  var meta = document.querySelector('meta[name=csrf]');
  var csrf = meta ? meta.content : '';
  var live = document.getElementById('live');
  var hasPlot = typeof window.uPlot === 'function';
  var nocharts = document.getElementById('nocharts');
  if (nocharts && hasPlot) nocharts.hidden = true;
  var charts = {};
  var es = null;

  function setLive(text, bad) {
    if (!live) return;
    live.textContent = text;
    live.className = bad ? 'live bad' : 'live';
  }

  function apply(u) {
    if (u.error) { setLive('error: ' + u.error, true); return; }
    var html = u.html || {};
    Object.keys(html).forEach(function (id) {
      var el = document.getElementById(id);
      if (el) el.innerHTML = html[id];
    });
    if (u.charts && hasPlot) drawCharts(u.charts);
    if (u.step) body.setAttribute('data-step', u.step);
    if (!window.scavFirstUpdate) window.scavFirstUpdate = performance.now(); // the benchmark reads it
    setLive('live ' + new Date().toLocaleTimeString(), false);
  }

  function connect(url) {
    if (es) es.close();
    es = new EventSource(url);
    es.addEventListener('update', function (e) { apply(JSON.parse(e.data)); });
    es.onerror = function () { setLive('reconnecting…', true); };
  }
  if (body.getAttribute('data-events')) connect(body.getAttribute('data-events'));

  // The jobs page's filters: the table follows them without a reload.
  var filters = document.getElementById('filters');
  if (filters) {
    var refilter = function () {
      var q = new URLSearchParams();
      new FormData(filters).forEach(function (v, k) { if (v) q.set(k, v); });
      var s = q.toString();
      history.replaceState(null, '', '/ui/' + (s ? '?' + s : ''));
      connect('/ui/events/jobs?' + s);
    };
    var timer = null;
    filters.addEventListener('submit', function (e) { e.preventDefault(); refilter(); });
    filters.addEventListener('change', refilter);
    filters.addEventListener('input', function () { clearTimeout(timer); timer = setTimeout(refilter, 300); });
  }

  // The job page's actions: a first click on Stop arms it, a second sends it.
  var result = document.getElementById('act-result');
  Array.prototype.forEach.call(document.querySelectorAll('form.act'), function (f) {
    f.addEventListener('submit', function (e) {
      e.preventDefault();
      var btn = f.querySelector('button');
      if (f.hasAttribute('data-confirm') && !btn.classList.contains('armed')) {
        btn.classList.add('armed');
        btn.textContent = 'Click again to stop';
        result.textContent = f.getAttribute('data-confirm');
        setTimeout(function () { btn.classList.remove('armed'); btn.textContent = 'Stop'; }, 5000);
        return;
      }
      btn.disabled = true;
      result.textContent = 'sending…';
      fetch(f.action, { method: 'POST', body: new FormData(f), credentials: 'same-origin',
        headers: { 'X-CSRF-Token': csrf, 'Accept': 'application/json' } })
        .then(function (r) { return r.json().catch(function () { return { ok: false, message: r.status + ' ' + r.statusText }; }); })
        .then(function (j) { result.textContent = j.message; result.className = j.ok ? 'ok' : 'err'; })
        .catch(function (err) { result.textContent = String(err); result.className = 'err'; })
        .then(function () { btn.disabled = false; });
    });
  });

  // Charts.
  var palette = { rate: '#1f77b4', step: '#d62728', loss: '#2ca02c', noise: '#9467bd' };

  function drawMarks(u) {
    var marks = u.marks || [];
    var ctx = u.ctx, top = u.bbox.top, h = u.bbox.height;
    ctx.save();
    ctx.strokeStyle = '#888';
    ctx.setLineDash([4, 3]);
    ctx.fillStyle = '#555';
    ctx.font = (10 * devicePixelRatio) + 'px sans-serif';
    marks.forEach(function (m) {
      var x = Math.round(u.valToPos(m.t, 'x', true));
      if (x < u.bbox.left || x > u.bbox.left + u.bbox.width) return;
      ctx.beginPath(); ctx.moveTo(x, top); ctx.lineTo(x, top + h); ctx.stroke();
      ctx.fillText(m.label.replace(/^attempt (\d+):.*/, '#$1'), x + 3, top + 10 * devicePixelRatio);
    });
    ctx.restore();
  }

  function size(el, h) { return { width: Math.max(200, el.clientWidth), height: h }; }

  // si writes an axis value in at most a few characters: 950, 12k, 3.4M.
  function si(x) {
    if (x == null) return null; // a log axis' unlabelled tick
    var a = Math.abs(x);
    if (a >= 1e6) return +(x / 1e6).toFixed(1) + 'M';
    if (a >= 1e3) return +(x / 1e3).toFixed(1) + 'k';
    if (a > 0 && a < 0.01) return x.toExponential(0);
    return String(+x.toFixed(3));
  }
  function siAxis(u, v) { return v.map(si); }

  function lineChart(id, label, color, s, marks) {
    var el = document.getElementById(id);
    if (!el) return;
    var data = [s[0] || [], s[1] || []];
    var c = charts[id];
    if (c) { c.marks = marks; c.setData(data); return; }
    var opts = Object.assign(size(el, 130), {
      legend: { show: false },
      scales: { x: { time: false } },
      series: [{ label: 's' }, { label: label, stroke: color, width: 1.5, points: { show: data[0].length < 40 } }],
      axes: [{ size: 28, values: function (u, v) { return v.map(function (x) { return x == null ? null : x + 's'; }); } }, { size: 44, values: siAxis }],
      hooks: { draw: [drawMarks] }
    });
    c = new uPlot(opts, data, el);
    c.marks = marks;
    charts[id] = c;
  }

  function frontChart(f) {
    var el = document.getElementById('c-front');
    if (!el) return;
    if (!f.time || !f.time.length || f.no_price) {
      el.hidden = true;
      return;
    }
    el.hidden = false;
    var n = f.time.length, front = [], chosen = [], current = [];
    for (var i = 0; i < n; i++) { front.push(null); chosen.push(null); current.push(null); }
    f.front.forEach(function (i) { front[i] = f.cost[i]; });
    if (f.chosen >= 0) chosen[f.chosen] = f.cost[f.chosen];
    if (f.current >= 0) current[f.current] = f.cost[f.current];
    var data = [f.time, f.cost, front, chosen, current];
    var c = charts.front;
    if (c) { c.setData(data); return; }
    var none = function () { return null; };
    var opts = Object.assign(size(el, 190), {
      legend: { show: true, live: false },
      scales: { x: { time: false, distr: 3 }, y: { distr: 3 } },
      series: [
        { label: 'time to finish (s)' },
        { label: 'candidate', stroke: '#999', paths: none, points: { show: true, size: 6, fill: '#bbb' } },
        { label: 'front', stroke: '#111', width: 1.5, spanGaps: true, points: { show: true, size: 5 } },
        { label: 'chosen', stroke: '#d62728', paths: none, points: { show: true, size: 12, width: 2, fill: '#d62728' } },
        { label: 'current', stroke: '#1f77b4', paths: none, points: { show: true, size: 16, width: 2, fill: 'transparent' } }
      ],
      axes: [{ size: 28, values: function (u, v) { return v.map(function (x) { return x == null ? null : si(x) + 's'; }); } },
        { size: 56, values: function (u, v) { return v.map(function (x) { return x == null ? null : '$' + si(x); }); } }]
    });
    charts.front = new uPlot(opts, data, el);
  }

  function drawCharts(c) {
    lineChart('c-rate', 'samples/s', palette.rate, c.rate, c.marks);
    lineChart('c-step', 'step time (s)', palette.step, c.step_time, c.marks);
    lineChart('c-loss', 'loss', palette.loss, c.loss, c.marks);
    lineChart('c-noise', 'noise scale', palette.noise, c.noise, c.marks);
    frontChart(c.front);
  }

  window.addEventListener('resize', function () {
    Object.keys(charts).forEach(function (id) {
      var el = charts[id].root.parentNode;
      charts[id].setSize({ width: Math.max(200, el.clientWidth), height: charts[id].height });
    });
  });
})();
