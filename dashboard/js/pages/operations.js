// Operations: live from operations/stream (shared with the frame): restarts, reclone, rehash,
// rolling restarts with their progress; each links to the incident that records it.
import { h, fill } from '../dom.js';
import { duration } from '../format.js';
import { live } from '../live.js';
import { ago, badge, progress, table } from '../ui.js';
import { registerPage } from './registry.js';

function render({ root }) {
  const body = h('div', h('p.loading', 'Waiting for the operations stream…'));
  fill(root, h('h1', 'Operations'), h('p.muted', 'Live: every change of an operation arrives as it happens.'), body);
  function draw(ops) {
    fill(body, table([
      { label: 'Operation', cell: (o) => [h('strong', { id: o.id }, o.kind), h('div.why.mono', o.id)] },
      { label: 'Target', cell: (o) => o.target },
      { label: 'Status', cell: (o) => badge(o.status, o.status) },
      { label: 'Asked by', cell: (o) => `${o.requested_by.subject || '–'} (${o.requested_by.mode || '–'})` },
      { label: 'Started', cell: (o) => ago(o.started_at) },
      { label: 'Took', cell: (o) => (o.finished_at ? duration(o.finished_at - o.started_at) : h('span.muted', 'running')) },
      { label: 'Progress / message', cell: (o) => [progress(o.progress), h('div', o.message)] },
      { label: 'Incident', cell: (o) => h('a', { href: `/admin/incidents?component=${encodeURIComponent(o.target)}` }, 'timeline') },
    ], ops, { empty: 'No operation yet.', rowAttrs: (o) => ({ dataset: { op: o.id, status: o.status } }) }));
    if (location.hash) { const el = document.getElementById(location.hash.slice(1)); if (el) el.scrollIntoView(); }
  }
  if (live.operations) draw(live.operations);
  return live.on('operations', draw);
}

registerPage({ key: 'operations', title: 'Operations', order: 80, render });
