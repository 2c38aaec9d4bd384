// Operations: live from operations/stream (shared with the frame): restarts, reclone, rehash,
// rolling restarts with their progress; each links to the incident that records it. One
// operation at /admin/operations/<id> (a deep link), kept live by the same stream.
import { h, fill } from '../dom.js';
import { duration, isoTime } from '../format.js';
import { live } from '../live.js';
import { ago, badge, jsonBlock, kv, progress, table } from '../ui.js';
import { registerPage } from './registry.js';

const took = (o) => (o.finished_at ? duration(o.finished_at - o.started_at) : h('span.muted', 'running'));
const opLink = (o, text) => h('a', { href: `/admin/operations/${encodeURIComponent(o.id)}` }, text);

function render({ root }) {
  const body = h('div', h('p.loading', 'Waiting for the operations stream…'));
  fill(root, h('h1', 'Operations'), h('p.muted', 'Live: every change of an operation arrives as it happens.'), body);
  function draw(ops) {
    fill(body, table([
      { label: 'Operation', cell: (o) => [h('strong', { id: o.id }, opLink(o, o.kind)), h('div.why.mono', o.id)] },
      { label: 'Target', cell: (o) => o.target },
      { label: 'Status', cell: (o) => badge(o.status, o.status) },
      { label: 'Asked by', cell: (o) => `${o.requested_by.subject || '–'} (${o.requested_by.mode || '–'})` },
      { label: 'Started', cell: (o) => ago(o.started_at) },
      { label: 'Took', cell: took },
      { label: 'Progress / message', cell: (o) => [progress(o.progress), h('div', o.message)] },
      { label: 'Incident', cell: (o) => h('a', { href: `/admin/incidents?component=${encodeURIComponent(o.target)}` }, 'timeline') },
    ], ops, { empty: 'No operation yet.', rowAttrs: (o) => ({ dataset: { op: o.id, status: o.status } }) }));
  }
  if (live.operations) draw(live.operations);
  return live.on('operations', draw);
}

function detailPage({ root, params, setTitle }) {
  const id = params.join('/');
  setTitle(`Operation ${id}`);
  const body = h('div', h('p.loading', 'Waiting for the operations stream…'));
  fill(root, h('p', h('a', { href: '/admin/operations' }, '← All operations')), h('h1', `Operation ${id}`), body);
  function draw(ops) {
    const o = ops.find((x) => x.id === id);
    if (!o) {
      fill(body, h('p.empty', { dataset: { missing: id } },
        `No operation ${id} among the recent ones (the scheduler keeps the newest 50).`));
      return;
    }
    fill(body,
      h('div.row', { dataset: { op: o.id, status: o.status } }, badge(o.status, o.status), h('strong', o.kind), h('span.muted', o.target)),
      h('div.card', kv([
        ['Kind', o.kind], ['Target', o.target], ['Status', o.status],
        ['Asked by', `${o.requested_by.subject || '–'} (${o.requested_by.mode || '–'})`],
        ['Started', [isoTime(o.started_at), ' (', ago(o.started_at), ')']],
        ['Finished', o.finished_at ? [isoTime(o.finished_at), ' (', ago(o.finished_at), ')'] : 'still running'],
        ['Took', took(o)],
        ['Message', o.message || '–'],
        o.progress ? ['Progress', progress(o.progress)] : null,
      ])),
      o.details ? [h('h2', 'Details'), jsonBlock(o.details)] : null,
      h('p', h('a', { href: `/admin/incidents?component=${encodeURIComponent(o.target)}` }, `Incidents of ${o.target}`)));
  }
  if (live.operations) draw(live.operations);
  return live.on('operations', draw);
}

registerPage({ key: 'operations', title: 'Operations', order: 80,
               render: (ctx) => (ctx.params.length ? detailPage(ctx) : render(ctx)) });
