// Overview: the scheduler, SSPs and backends with their state, totals, presence, running
// operations and open incidents; throughput and lag charts over the last hour (the scheduler's
// history, so a reload keeps them) or day; the platform deployment when the scheduler is
// linked to one (a short note when not).
import { api } from '../api.js';
import { lineChart } from '../charts.js';
import { h, fill } from '../dom.js';
import { duration, num } from '../format.js';
import { historySeries, live } from '../live.js';
import { ago, badge, errorBox, kv, poller, progress, table } from '../ui.js';
import { registerPage } from './registry.js';

export function sspRows(ssps) {
  return table([
    { label: 'SSP', cell: (s) => h('a', { href: `/admin/ssps/${encodeURIComponent(s.id)}` }, s.id) },
    { label: 'State', cell: (s) => badge(s.status, s.status) },
    { label: 'Views', num: true, cell: (s) => num(s.query_count) },
    { label: 'Lag (events)', num: true, cell: (s) => num(typeof s.acked_seq === 'number' ? Math.max(0, s.sent_seq - s.acked_seq) : null) },
    { label: 'Queued', num: true, cell: (s) => num(s.queued) },
    { label: 'Memory', num: true, cell: (s) => (s.memory_usage === null ? '–' : `${num(s.memory_usage, 1)} MB`) },
    { label: 'Heartbeat', cell: (s) => (s.last_heartbeat_seconds_ago === null ? '–' : `${num(s.last_heartbeat_seconds_ago, 1)} s ago`) },
  ], ssps, { empty: 'No SSP is registered.' });
}

function render({ root }) {
  const head = h('div.row.between', h('h1', 'Overview'), h('span.muted', { id: 'ov-sampled' }));
  const err = h('div');
  const body = h('div');
  const charts = h('div.grid.wide');
  const incidentsBox = h('div', h('p.muted', 'Loading incidents…'));
  const presenceChart = h('div');
  const cloudBox = h('div', { dataset: { card: 'cloud' } });
  let range = 'hour';
  let dayHistory = null;
  const rangeSel = h('select', { id: 'history-range', 'aria-label': 'Chart range' },
    h('option', { value: 'hour' }, 'last hour'), h('option', { value: 'day' }, 'last day'));
  rangeSel.addEventListener('change', async () => {
    range = rangeSel.value;
    if (range === 'day') {
      try { dayHistory = historySeries((await api.get('/history', { range: 'day' })).samples); } catch (e) { fill(err, errorBox(e, 'History')); }
    }
    if (live.overview) draw(live.overview);
  });
  fill(root, head, err, body, h('div.row.between', h('h2', 'Activity'), rangeSel), charts, cloudBox,
    h('div.grid.wide', h('div.card', h('h3', 'Presence (sample ring)'), presenceChart),
      h('div.card', h('h3', 'Open incidents'), incidentsBox)));

  function draw(ov) {
    fill(err);
    const sch = ov.scheduler;
    const inner = sch.scheduler || {};
    const b = ov.backends || { status: 'none', counts: {}, list: [] };
    const t = ov.totals;
    const jobs = typeof t.jobs === 'object' ? t.jobs : null;
    fill(body,
      h('div.grid',
        h('div.card', { dataset: { card: 'scheduler' } }, h('h3', 'Scheduler'),
          h('div.row', badge(sch.state, sch.state), badge(inner.health || '–', inner.health)),
          h('p.muted', `${sch.id} · v${sch.version} · up ${duration(sch.uptime_seconds * 1000)}`),
          h('p.muted', `replica lag ${num(inner.replica_lag)} events · heartbeat ${inner.heartbeat_ok ? 'ok' : 'failing'}`)),
        h('div.card', { dataset: { card: 'ssps' } }, h('h3', 'SSPs'),
          h('div.stat', `${t.ready_ssps}/${t.ssps}`), h('div.stat-label', 'ready')),
        h('div.card', { dataset: { card: 'backends' } }, h('h3', 'Backends'),
          h('div.row', badge(b.status, b.status)),
          h('p.muted', Object.entries(b.counts || {}).filter(([, n]) => n).map(([k, n]) => `${n} ${k}`).join(' · ') || 'none configured'),
          b.list.filter((x) => x.status !== 'healthy').map((x) =>
            h('div', { dataset: { backend: x.name } }, h('a', { href: `/admin/backends/${encodeURIComponent(x.name)}` }, x.name), ' ',
              badge(x.status, x.status), x.failing_since_ms ? [' failing since ', ago(x.failing_since_ms)] : null))),
        h('div.card', h('h3', 'Live'),
          h('div.stat', num(t.live_views)), h('div.stat-label', `views · ${num(t.users)} users · ${num(t.sessions)} sessions`)),
        h('div.card', h('h3', 'Jobs'),
          jobs ? [h('div.stat', num(jobs.pending + jobs.processing)), h('div.stat-label',
            `waiting or running · ${num(jobs.failed)} failed · ${num(jobs.stalled)} stalled (last hour)`)]
            : h('p.muted', 'not measured (job sampler off)')),
        h('div.card', { dataset: { card: 'incidents' } }, h('h3', 'Incidents'),
          h('div.stat', { class: ov.incidents.open ? 'bad' : '' }, num(ov.incidents.open)),
          h('div.stat-label', `open · ${num(ov.incidents.total)} kept (${ov.incidents.retention_days} days)`),
          ov.incidents.storage_error ? h('div.error', `history not written: ${ov.incidents.storage_error}`) : null)),
      h('h2', 'SSPs'), sspRows(ov.ssps),
      h('h2', 'Running operations'),
      table([
        { label: 'Operation', cell: (o) => h('a', { href: `/admin/operations/${encodeURIComponent(o.id)}` }, o.kind) },
        { label: 'Target', cell: (o) => o.target },
        { label: 'Started', cell: (o) => ago(o.started_at) },
        { label: 'Progress', cell: (o) => progress(o.progress) || o.message },
      ], ov.operations.running, { empty: 'No operation is running.' }));
    fill(document.getElementById('ov-sampled') || h('span'), 'updated ', ago(ov.server_time_ms));
    const hist = range === 'day' && dayHistory ? dayHistory : live.history;
    const span = range === 'day' ? 86400e3 : 3600e3;
    const lagSeries = Object.entries(hist.lag).map(([id, pts]) => ({ name: id, points: pts }));
    fill(charts,
      h('div.card', h('h3', `Ingest throughput (events/s, ${range === 'day' ? 'last day' : 'last hour'})`),
        lineChart([{ name: 'events/s', points: hist.throughput }], { title: 'ingest throughput', area: true, id: 'throughput', span })),
      h('div.card', h('h3', 'SSP lag (events sent, not acknowledged)'),
        lineChart(lagSeries.length ? lagSeries : [{ name: 'no SSP', points: [] }], { title: 'SSP lag', id: 'lag', span })));
  }

  if (live.overview) draw(live.overview);
  const offs = [live.on('overview', draw), live.on('overview-error', (e) => fill(err, errorBox(e, 'Overview')))];
  const stopSide = poller(async () => {
    const [p, inc] = await Promise.all([api.get('/presence'), api.get('/incidents', { state: 'open', limit: 10 })]);
    const pts = (k) => p.samples.map((x) => [x.at, x[k]]);
    fill(presenceChart, lineChart([{ name: 'users', points: pts('users') }, { name: 'sessions', points: pts('sessions') },
                                   { name: 'views', points: pts('views') }], { title: 'presence', id: 'presence' }));
    fill(incidentsBox, table([
      { label: 'Component', cell: (i) => h('a', { href: `/admin/incidents/${encodeURIComponent(i.id)}` }, i.component) },
      { label: 'Kind', cell: (i) => i.kind },
      { label: 'Since', cell: (i) => ago(i.started_at) },
      { label: 'Summary', cell: (i) => (i.events[i.events.length - 1] || {}).summary },
    ], inc.incidents, { empty: 'No open incident.' }));
    return p;
  }, (p) => p.refresh_secs, { onError: (e) => fill(incidentsBox, errorBox(e)) });
  let stopCloud = () => {};
  const notLinked = () => fill(cloudBox, h('p.muted', { dataset: { linked: 'false' } },
    'Not linked to a hosting platform: this scheduler runs on its own.'));
  const watchCloud = () => poller(async () => {
    try {
      const d = await api.get('/cloud/deployment');
      const dep = d.deployment || {};
      fill(cloudBox, h('h2', 'Platform deployment'),
        h('div.card', { dataset: { linked: 'true' } },
          h('div.row', badge(dep.status || 'unknown', dep.status), h('strong', `version ${dep.version ?? '–'}`), h('span.muted.mono', dep.id || '')),
          kv([['Started', ago(Date.parse(dep.started_at) || null)], ['Finished', ago(Date.parse(dep.finished_at) || null)],
              ['Trigger', dep.trigger || '–'], ['Started by', dep.started_by || '–'], dep.error ? ['Error', String(dep.error)] : null])),
        h('h3', 'Instances'),
        table([
          { label: 'Instance', cell: (i) => h('span.mono', i.id) }, { label: 'Role', cell: (i) => i.role },
          { label: 'Kind', cell: (i) => i.kind || '–' }, { label: 'Status', cell: (i) => badge(i.status, i.status) },
          { label: 'URL', cell: (i) => i.url || '–' }, { label: 'Healthy since', cell: (i) => ago(Date.parse(i.healthy_at) || null) },
        ], d.instances || [], { empty: 'No instance.', rowAttrs: (i) => ({ dataset: { instance: i.id, role: i.role } }) }));
    } catch (e) {
      if (e.status === 409 && e.code === 'not_linked') notLinked();
      else fill(cloudBox, h('h2', 'Platform deployment'), errorBox(e, 'The platform'));
    }
  }, () => 30, {});
  let gone = false;
  // only a linked scheduler has a deployment to ask for (the public config says which)
  api.get('/config', null, { auth: false }).then((cfg) => {
    if (gone) return;
    if (cfg && cfg.cloud_linked) stopCloud = watchCloud(); else notLinked();
  }).catch(() => notLinked());
  return () => { gone = true; offs.forEach((f) => f()); stopSide(); stopCloud(); };
}

registerPage({ key: 'overview', title: 'Overview', order: 10, render });
