// Backends: status of each; one backend's probe history (about 30 minutes) as a chart, its
// health-check URL and its env with the values masked.
import { api } from '../api.js';
import { lineChart, probeStrip } from '../charts.js';
import { h, fill } from '../dom.js';
import { num } from '../format.js';
import { live } from '../live.js';
import { ago, badge, errorBox, kv, poller, table } from '../ui.js';
import { registerPage } from './registry.js';

function listPage({ root }) {
  const err = h('div');
  const body = h('div', h('p.loading', 'Loading backends…'));
  fill(root, h('h1', 'Backends'), err, body);
  return poller(() => api.get('/backends'), () => live.refreshSecs(), {
    onData: (b) => {
      fill(err);
      fill(body, h('div.row', 'Overall ', badge(b.status, b.status)), h('p'), table([
        { label: 'Backend', cell: (x) => h('a', { href: `/admin/backends/${encodeURIComponent(x.name)}` }, x.name) },
        { label: 'Status', cell: (x) => badge(x.status, x.status) },
        { label: 'Checked', cell: (x) => ago(x.last_checked_ms) },
        { label: 'Last ok', cell: (x) => ago(x.last_ok_ms) },
        { label: 'Failing since', cell: (x) => (x.failing_since_ms ? ago(x.failing_since_ms) : '–') },
        { label: 'Failures', num: true, cell: (x) => num(x.consecutive_failures) },
        { label: 'Incident', cell: (x) => (x.incident_open ? h('a', { href: `/admin/incidents?component=${encodeURIComponent(x.name)}&state=open` }, badge('open', 'open')) : '–') },
        { label: 'Last error', cell: (x) => x.last_error || '–' },
      ], b.list, { empty: 'No backend is configured (SVC_BACKENDS).', rowAttrs: (x) => ({ dataset: { backend: x.name, status: x.status } }) }));
    },
    onError: (e) => fill(err, errorBox(e, 'Backends')),
  });
}

function detailPage({ root, params, setTitle }) {
  const name = params.join('/');
  setTitle(`Backend ${name}`);
  const err = h('div');
  const body = h('div', h('p.loading', 'Loading…'));
  fill(root, h('p', h('a', { href: '/admin/backends' }, '← All backends')), h('h1', `Backend ${name}`), err, body);
  return poller(() => api.get(`/backends/${encodeURIComponent(name)}`), (b) => Math.max(b.interval_secs || 5, live.refreshSecs()), {
    onData: (b) => {
      fill(err);
      fill(body,
        h('div.row', badge(b.status, b.status), b.incident_open ? badge('incident open', 'open') : null),
        h('div.grid.wide',
          h('div.card', h('h3', 'Health check'), kv([
            ['URL', h('code', b.health_check_url || '–')], ['Every', `${num(b.interval_secs, 1)} s`],
            ['Last checked', ago(b.last_checked_ms)], ['Last ok', ago(b.last_ok_ms)],
            ['Failing since', b.failing_since_ms ? ago(b.failing_since_ms) : '–'],
            ['Consecutive failures', num(b.consecutive_failures)], ['Last error', b.last_error || '–'],
            ['Runs on', b.run_on || '–'],
          ])),
          h('div.card', h('h3', 'Environment (masked)'), Object.keys(b.env || {}).length
            ? kv(Object.entries(b.env).map(([k, v]) => [h('code', k), h('code', v)])) : h('p.muted', 'none'))),
        h('h2', 'Probe history'),
        h('div.card', probeStrip(b.history || [], { id: 'probes' })),
        h('div.card', lineChart([{ name: 'latency ms', points: (b.history || []).map((p) => [p.at, p.ok ? p.latency_ms : null]) }],
          { title: 'probe latency', id: 'probe-latency', height: 140 })));
    },
    onError: (e) => fill(err, errorBox(e, `Backend ${name}`)),
  });
}

registerPage({ key: 'backends', title: 'Backends', order: 50,
               render: (ctx) => (ctx.params.length ? detailPage(ctx) : listPage(ctx)) });
