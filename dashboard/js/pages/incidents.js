// Incidents: the list with the API's filters, a time range (since) and paging, kept live; one
// incident as a timeline of its events (also live), operator actions linked to their operation.
import { api } from '../api.js';
import { h, fill } from '../dom.js';
import { isoTime, num } from '../format.js';
import { live } from '../live.js';
import { ago, badge, errorBox, kv, poller, table } from '../ui.js';
import { registerPage } from './registry.js';

const STATES = ['', 'open', 'recovered', 'interrupted', 'failed', 'recorded'];
const SEVERITIES = ['', 'warning', 'info'];
// the time range: incidents started within the last ... (the API's `since`, epoch ms)
const RANGES = [['', 'any time'], ['15m', 'last 15 min', 15 * 60e3], ['1h', 'last hour', 3600e3],
                ['24h', 'last 24 h', 86400e3], ['7d', 'last 7 days', 7 * 86400e3]];

function listPage({ root, query, navigate }) {
  const limit = Number(query.get('limit') || 50);
  const offset = Number(query.get('offset') || 0);
  const form = h('form.filters', { role: 'search', 'aria-label': 'Filter incidents' },
    h('label', 'Component', h('input', { name: 'component', value: query.get('component') || '' })),
    h('label', 'State', h('select', { name: 'state' }, STATES.map((v) => h('option', { value: v, selected: (query.get('state') || '') === v }, v || 'any')))),
    h('label', 'Severity', h('select', { name: 'severity' }, SEVERITIES.map((v) => h('option', { value: v, selected: (query.get('severity') || '') === v }, v || 'any')))),
    h('label', 'Started', h('select', { name: 'range' }, RANGES.map(([v, l]) => h('option', { value: v, selected: (query.get('range') || '') === v }, l)))),
    h('button', { type: 'submit' }, 'Apply'));
  form.querySelector('select[name=range]').addEventListener('change', () => go());
  const go = (extra) => {
    const q = new URLSearchParams();
    for (const [k, v] of new FormData(form).entries()) if (v) q.set(k, v);
    for (const [k, v] of Object.entries(extra || {})) if (v) q.set(k, String(v));
    navigate(`/admin/incidents${q.toString() ? `?${q}` : ''}`);
  };
  form.addEventListener('submit', (e) => { e.preventDefault(); go(); });
  const body = h('div', h('p.loading', 'Loading incidents…'));
  const updated = h('span.muted', { role: 'status', id: 'incidents-updated' });
  fill(root, h('div.row.between', h('h1', 'Incidents'), updated), form, body);
  const range = RANGES.find(([v]) => v && v === query.get('range'));
  function params() {
    const p = Object.fromEntries(query.entries());
    delete p.range;
    if (range) p.since = String(Date.now() - range[2]);
    return p;
  }
  function draw(b) {
      fill(updated, 'live · updated ', ago(b.server_time_ms || Date.now()));
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
  }
  // live: new incidents and new events appear without a reload
  return poller(() => api.get('/incidents', params()), () => live.refreshSecs(), {
    onData: draw, onError: (e) => fill(body, errorBox(e, 'Incidents')) });
}

function detailPage({ root, params, setTitle }) {
  const id = params.join('/');
  setTitle(`Incident ${id}`);
  const body = h('div', h('p.loading', 'Loading the incident…'));
  fill(root, h('p', h('a', { href: '/admin/incidents' }, '← All incidents')), h('h1', `Incident ${id}`), body);
  function draw({ incident: i }) {
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
          e.operation_id ? h('a', { href: `/admin/operations/${encodeURIComponent(e.operation_id)}` }, `operation ${e.operation_id}`) : h('span.muted', 'system event'),
          e.version ? h('span.muted', `version ${e.version}`) : null),
        h('div', e.summary)))));
  }
  return poller(() => api.get(`/incidents/${encodeURIComponent(id)}`), () => live.refreshSecs(), {
    onData: draw, onError: (e) => fill(body, errorBox(e, 'This incident')) });
}

registerPage({ key: 'incidents', title: 'Incidents', order: 90,
               render: (ctx) => (ctx.params.length ? detailPage(ctx) : listPage(ctx)) });
