// Hand-written SVG charts: a time-series line chart and a probe-history strip. Each chart is an
// <svg role="img"> with an aria-label that says what it shows and its latest values.
import { h, s } from './dom.js';
import { num } from './format.js';

const W = 640;

function niceMax(v) {
  if (!(v > 0)) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

function ago(msv) {
  const sec = Math.round(msv / 1000);
  if (sec < 60) return `-${sec}s`;
  if (sec < 3600) return `-${Math.round(sec / 60)}m`;
  return `-${(sec / 3600).toFixed(1)}h`;
}

/**
 * lineChart(series, opts): series = [{name, points: [[tMs, value|null], ...]}]
 * opts: {title, height, format(v), now, span (ms shown), area}
 */
export function lineChart(series, opts = {}) {
  const H = opts.height || 160;
  const pad = { l: 44, r: 8, t: 8, b: 20 };
  const fmt = opts.format || ((v) => num(v, v < 1 ? 2 : v < 10 ? 1 : 0));
  const now = opts.now || Date.now();
  const all = series.flatMap((sr) => sr.points);
  const t0 = opts.span ? now - opts.span : Math.min(...all.map((p) => p[0]), now - 60000);
  const span = Math.max(1, now - t0);
  const vmax = niceMax(Math.max(0, ...all.map((p) => p[1] ?? 0)));
  const x = (t) => pad.l + ((t - t0) / span) * (W - pad.l - pad.r);
  const y = (v) => pad.t + (1 - v / vmax) * (H - pad.t - pad.b);
  const latest = series.map((sr) => {
    const last = [...sr.points].reverse().find((p) => p[1] !== null && p[1] !== undefined);
    return `${sr.name} ${last ? fmt(last[1]) : 'no data'}`;
  });
  const label = `${opts.title || 'chart'}: ${latest.join(', ')}`;
  const svg = s('svg', { viewBox: `0 0 ${W} ${H}`, class: 'chart', role: 'img', 'aria-label': label,
                         preserveAspectRatio: 'none' },
    s('title', {}, label));
  for (let i = 0; i <= 4; i++) {
    const v = (vmax * i) / 4;
    svg.append(s('line', { x1: pad.l, x2: W - pad.r, y1: y(v), y2: y(v), class: i ? 'grid-line' : 'axis' }),
               s('text', { x: pad.l - 4, y: y(v) + 3, 'text-anchor': 'end' }, fmt(v)));
  }
  for (let i = 0; i <= 4; i++) {
    const t = t0 + (span * i) / 4;
    svg.append(s('text', { x: x(t), y: H - 5, 'text-anchor': i === 0 ? 'start' : i === 4 ? 'end' : 'middle' },
                 i === 4 ? 'now' : ago(now - t)));
  }
  series.forEach((sr, i) => {
    const cls = `c${i % 6}`;
    const pts = sr.points.filter((p) => p[0] >= t0);
    let d = '';
    let pen = false;
    for (const [t, v] of pts) {
      if (v === null || v === undefined) { pen = false; continue; }
      d += `${pen ? 'L' : 'M'}${x(t).toFixed(1)},${y(v).toFixed(1)}`;
      pen = true;
    }
    if (!d) return;
    if (opts.area && pts.length > 1) {
      const first = pts.find((p) => p[1] !== null);
      const last = [...pts].reverse().find((p) => p[1] !== null);
      svg.append(s('path', { d: `${d}L${x(last[0])},${y(0)}L${x(first[0])},${y(0)}Z`, class: `area ${cls}` }));
    }
    svg.append(s('path', { d, class: `line ${cls}` }));
    if (pts.length === 1) svg.append(s('circle', { cx: x(pts[0][0]), cy: y(pts[0][1]), r: 2.5, class: cls }));
  });
  const legend = h('div.legend', series.map((sr, i) => h('span', h(`i.c${i % 6}`), sr.name)));
  const times = all.filter((p) => p[1] !== null && p[1] !== undefined).map((p) => p[0]);
  return h('figure.chart-figure', { 'data-chart': opts.id || '', 'data-points': String(times.length),
                                    'data-oldest': times.length ? String(Math.min(...times)) : null }, svg, legend);
}

/** A strip of probes (oldest left): bar height = latency, colour = outcome. */
export function probeStrip(history, opts = {}) {
  const H = opts.height || 90;
  const n = Math.max(history.length, 1);
  const bw = Math.max(1, (W - 4) / n);
  const maxLat = niceMax(Math.max(1, ...history.map((p) => p.latency_ms || 0)));
  const bad = history.filter((p) => !p.ok).length;
  const label = `${history.length} probes, ${bad} failed; latest ${history.length ? (history[history.length - 1].ok ? 'ok' : 'failed') : 'none'}`;
  const svg = s('svg', { viewBox: `0 0 ${W} ${H}`, class: 'chart', role: 'img', 'aria-label': label,
                         preserveAspectRatio: 'none' }, s('title', {}, label));
  history.forEach((p, i) => {
    const v = p.ok ? Math.max(2, ((p.latency_ms || 0) / maxLat) * (H - 16)) : H - 16;
    svg.append(s('rect', { x: 2 + i * bw, y: H - 14 - v, width: Math.max(1, bw - 1), height: v,
                           class: p.ok ? 'probe-ok' : 'probe-bad' },
      s('title', {}, `${new Date(p.at).toLocaleTimeString()}: ${p.ok ? `ok, ${p.latency_ms} ms` : p.error || 'failed'}`)));
  });
  svg.append(s('text', { x: 2, y: H - 2 }, 'oldest'), s('text', { x: W - 2, y: H - 2, 'text-anchor': 'end' }, 'newest'),
             s('text', { x: W - 2, y: 10, 'text-anchor': 'end' }, `max ${num(maxLat)} ms`));
  return h('figure.chart-figure', { 'data-chart': opts.id || 'probes' }, svg,
    h('div.legend', h('span', h('i.c1'), 'ok (height: latency)'), h('span', h('i.c2'), 'failed')));
}

const OUTCOMES = [['success', 'succeeded'], ['failure', 'failed'], ['skipped', 'skipped']];

/**
 * Run outcomes as horizontal stacked bars, one bar per row: rows = [{label, success, failure,
 * skipped}] (the rollup tallies). The widest total spans the chart; each segment carries its
 * count in a <title> and the bar's data-* attributes (what the tests and screen readers read).
 */
export function outcomeBars(rows, opts = {}) {
  const rowH = 22;
  const padL = opts.labelWidth || 150;
  const padR = 60;
  const H = Math.max(1, rows.length) * rowH + 18;
  const max = niceMax(Math.max(1, ...rows.map((r) => r.success + r.failure + r.skipped)));
  const x = (v) => (v / max) * (W - padL - padR);
  const label = `${opts.title || 'Run outcomes'}: ${rows.map((r) =>
    `${r.label} ${r.success} succeeded, ${r.failure} failed, ${r.skipped} skipped`).join('; ') || 'none'}`;
  const svg = s('svg', { viewBox: `0 0 ${W} ${H}`, class: 'chart', role: 'img', 'aria-label': label },
    s('title', {}, label));
  rows.forEach((r, i) => {
    const y = 4 + i * rowH;
    const g = s('g', { 'data-bar': r.label, 'data-success': r.success, 'data-failure': r.failure,
                       'data-skipped': r.skipped },
      s('text', { x: padL - 6, y: y + 13, 'text-anchor': 'end' }, r.label.length > 24 ? `${r.label.slice(0, 23)}…` : r.label));
    let at = padL;
    for (const [k, word] of OUTCOMES) {
      const w = x(r[k]);
      if (w > 0) {
        g.append(s('rect', { x: at, y, width: w, height: rowH - 6, class: `o-${k}` },
          s('title', {}, `${r.label}: ${r[k]} ${word}`)));
        at += w;
      }
    }
    g.append(s('text', { x: at + 4, y: y + 13 }, num(r.success + r.failure + r.skipped)));
    svg.append(g);
  });
  svg.append(s('line', { x1: padL, x2: padL, y1: 0, y2: H - 14, class: 'axis' }),
             s('text', { x: W - padR, y: H - 2, 'text-anchor': 'end' }, `scale: ${num(max)} runs`));
  return h('figure.chart-figure', { 'data-chart': opts.id || 'outcomes' }, svg,
    h('div.legend', OUTCOMES.map(([k, word]) => h('span', h(`i.o-${k}`), word))));
}
