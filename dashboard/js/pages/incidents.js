// Incidents: the list with the API's filters and paging; one incident as a timeline of its
// events, operator actions linked to their operation.
import { api } from '../api.js';
import { h, fill } from '../dom.js';
import { isoTime, num } from '../format.js';
import { ago, badge, errorBox, kv, table } from '../ui.js';
import { registerPage } from './registry.js';

const STATES = ['', 'open', 'recovered', 'interrupted', 'failed', 'recorded'];
const SEVERITIES = ['', 'warning', 'info'];

async function listPage({ root, query, navigate }) {
  const limit = Number(query.get('limit') || 50);
  const offset = Number(query.get('offset') || 0);
  const form = h('form.filters', { role: 'search', 'aria-label': 'Filter incidents' },
    h('label', 'Component', h('input', { name: 'component', value: query.get('component') || '' })),
    h('label', 'State', h('select', { name: 'state' }, STATES.map((v) => h('option', { value: v, selected: (query.get('state') || '') === v }, v || 'any')))),
    h('label', 'Severity', h('select', { name: 'severity' }, SEVERITIES.map((v) => h('option', { value: v, selected: (query.get('severity') || '') === v }, v || 'any')))),
    h('button', { type: 'submit' }, 'Apply'));
  const go = (extra) => {
    const q = new URLSearchParams();
    for (const [k, v] of new FormData(form).entries()) if (v) q.set(k, v);
    for (const [k, v] of Object.entries(extra || {})) if (v) q.set(k, String(v));
    navigate(`/admin/incidents${q.toString() ? `?${q}` : ''}`);
  };
  form.addEventListener('submit', (e) => { e.preventDefault(); go(); });
  const body = h('div', h('p.loading', 'Loading incidents…'));
  const refresh = h('button', { type: 'button' }, 'Refresh');
  fill(root, h('div.row.between', h('h1', 'Incidents'), refresh), form, body);
  async function load() {
    try {
      const b = await api.get('/incidents', Object.fromEntries(query.entries()));
      fill(body,
        b.storage_error ? h('div.error', `The incident history could not be written: ${b.storage_error}`) : null,
        h('p.muted', `${num(b.total)} incidents · showing ${num(b.offset + (b.incidents.length ? 1 : 0))}–${num(b.offset + b.incidents.length)}`),
        table([
          { label: 'Incident', cell: (i) => h('a', { href: `/admin/incidents/${encodeURIComponent(i.id)}` }, i.kind) },
          { label: 'Component', cell: (i) => i.component },
          { label: 'State', cell: (i) => badge(i.state, i.state) },
          { label: 'Severity', cell: (i) => badge(i.severity, i.severity) },
          { label: 'Started', cell: (i) => ago(i.started_at) },
          { label: 'Events', num: true, cell: (i) => num(i.event_count) },
          { label: 'Latest', cell: (i) => (i.events[i.events.length - 1] || {}).summary },
        ], b.incidents, { empty: 'No incident matches.', rowAttrs: (i) => ({ dataset: { incident: i.id, kind: i.kind, state: i.state } }) }),
        h('div.row',
          h('button', { type: 'button', disabled: offset === 0, on: { click: () => go({ offset: Math.max(0, offset - limit), limit }) } }, '← Newer'),
          h('button', { type: 'button', disabled: offset + b.incidents.length >= b.total, on: { click: () => go({ offset: offset + limit, limit }) } }, 'Older →')));
    } catch (e) { fill(body, errorBox(e, 'Incidents')); }
  }
  refresh.addEventListener('click', load);
  await load();
}

async function detailPage({ root, params, setTitle }) {
  const id = params.join('/');
  setTitle(`Incident ${id}`);
  const body = h('div', h('p.loading', 'Loading the incident…'));
  fill(root, h('p', h('a', { href: '/admin/incidents' }, '← All incidents')), h('h1', `Incident ${id}`), body);
  try {
    const { incident: i } = await api.get(`/incidents/${encodeURIComponent(id)}`);
    fill(body,
      h('div.row', badge(i.state, i.state), badge(i.severity, i.severity), h('strong', i.kind), h('span.muted', i.component)),
      h('div.card', kv([
        ['Started', [isoTime(i.started_at), ' (', ago(i.started_at), ')']],
        ['Ended', i.ended_at ? [isoTime(i.ended_at), ' (', ago(i.ended_at), ')'] : 'still open'],
        ['Events', `${num(i.event_count)}${i.event_count > i.events.length ? ` (first and newest ${i.events.length} kept)` : ''}`],
        ['Recorded by', i.source || '–'],
        i.max_buffered_events ? ['Max buffered events', num(i.max_buffered_events)] : null,
      ])),
      h('h2', 'Timeline'),
      h('ol.timeline', i.events.map((e) => h('li', { dataset: { state: e.state } },
        h('div.row', h('time', { datetime: new Date(e.at).toISOString() }, isoTime(e.at)), badge(e.state, e.state),
          e.operation_id ? h('a', { href: `/admin/operations#${encodeURIComponent(e.operation_id)}` }, `operation ${e.operation_id}`) : h('span.muted', 'system event'),
          e.version ? h('span.muted', `version ${e.version}`) : null),
        h('div', e.summary)))));
  } catch (e) { fill(body, errorBox(e, 'This incident')); }
}

registerPage({ key: 'incidents', title: 'Incidents', order: 90,
               render: (ctx) => (ctx.params.length ? detailPage(ctx) : listPage(ctx)) });
