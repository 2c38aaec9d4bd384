// A workflow run's step DAG as SVG: columns by depth (a step sits one column right of its
// deepest dependency), one box per step coloured by its state, an arrow for each depends_on.
// Each box links to the step's job when it has one. Drawn from GET workflows/runs/:id (`dag`
// and `steps`); nothing is computed that the API does not say.
import { h, s } from './dom.js';
import { stateClass } from './format.js';

const NODE_W = 150;
const NODE_H = 42;
const GAP_X = 56;
const GAP_Y = 14;
const PAD = 10;

/** Column of each step: 0 for a root, else 1 + the deepest dependency's (order is topological). */
function columns(order, deps) {
  const col = new Map();
  for (const n of order) col.set(n, Math.max(-1, ...(deps.get(n) || []).map((d) => col.get(d) ?? -1)) + 1);
  return col;
}

/**
 * dagView(run, {hideCompleted}) -> <figure> with the SVG. `run.dag = {nodes, edges, order}`,
 * `run.steps = [{name, status, job, table, depends_on, ...}]`. Hidden (completed) steps keep
 * the columns of the whole graph, so toggling does not move the others around.
 */
export function dagView(run, { hideCompleted = false } = {}) {
  const steps = new Map(run.steps.map((st) => [st.name, st]));
  const order = run.dag.order.filter((n) => steps.has(n));
  const deps = new Map(order.map((n) => [n, steps.get(n).depends_on || []]));
  const col = columns(order, deps);
  const shown = order.filter((n) => !(hideCompleted && steps.get(n).status === 'completed'));
  const rows = new Map();
  const pos = new Map();
  for (const n of shown) {
    const c = col.get(n);
    const r = rows.get(c) || 0;
    rows.set(c, r + 1);
    pos.set(n, { x: PAD + c * (NODE_W + GAP_X), y: PAD + r * (NODE_H + GAP_Y) });
  }
  const ncols = Math.max(1, ...[...col.values()].map((c) => c + 1));
  const nrows = Math.max(1, ...rows.values());
  const W = PAD * 2 + ncols * NODE_W + (ncols - 1) * GAP_X;
  const H = PAD * 2 + nrows * NODE_H + (nrows - 1) * GAP_Y;
  const counts = {};
  for (const st of steps.values()) counts[st.status] = (counts[st.status] || 0) + 1;
  const label = `Step graph of run ${run.key}: ${order.length} steps, ${
    Object.entries(counts).map(([k, v]) => `${v} ${k}`).join(', ')}${hideCompleted ? ' (completed steps hidden)' : ''}`;
  const svg = s('svg', { viewBox: `0 0 ${W} ${H}`, width: W, height: H, class: 'dag', role: 'img',
                         'aria-label': label },
    s('title', {}, label),
    s('defs', {}, s('marker', { id: 'dag-arrow', viewBox: '0 0 8 8', refX: 8, refY: 4, markerWidth: 7,
                                markerHeight: 7, orient: 'auto-start-reverse' },
      s('path', { d: 'M0,0 L8,4 L0,8 Z', class: 'dag-arrowhead' }))));
  for (const [from, to] of run.dag.edges) {
    const a = pos.get(from);
    const b = pos.get(to);
    if (!a || !b) continue;
    const x1 = a.x + NODE_W;
    const y1 = a.y + NODE_H / 2;
    const x2 = b.x;
    const y2 = b.y + NODE_H / 2;
    const mx = (x1 + x2) / 2;
    svg.append(s('path', { d: `M${x1},${y1} C${mx},${y1} ${mx},${y2} ${x2 - 1},${y2}`, class: 'dag-edge',
                           'marker-end': 'url(#dag-arrow)', 'data-from': from, 'data-to': to }));
  }
  for (const n of shown) {
    const st = steps.get(n);
    const p = pos.get(n);
    const box = s('g', { class: `dag-node ${stateClass(st.status)}`, 'data-step': n, 'data-status': st.status || '' },
      s('title', {}, `${n}: ${st.status}${st.job ? ` · job ${st.job}` : ''}${st.error ? ` · ${st.error.code}` : ''}`),
      s('rect', { x: p.x, y: p.y, width: NODE_W, height: NODE_H, rx: 6 }),
      s('text', { x: p.x + 8, y: p.y + 17, class: 'dag-name' }, n.length > 20 ? `${n.slice(0, 19)}…` : n),
      s('text', { x: p.x + 8, y: p.y + 33, class: 'dag-status' }, `${st.status || '–'}${st.attempt ? ` · try ${st.attempt + 1}` : ''}`));
    svg.append(st.job ? s('a', { href: `/admin/jobs/${encodeURIComponent(st.job)}` }, box) : box);
  }
  const legend = h('div.legend', ['blocked', 'running', 'completed', 'failed', 'skipped', 'killed'].map((k) =>
    h('span', h('span', { class: `badge ${stateClass(k)}` }, k))));
  return h('figure.chart-figure.dag-figure', { dataset: { chart: 'dag' } }, h('div.dag-scroll', svg), legend);
}
