// SSPs: state, views, lag, memory, version; restart / clean / reload each; a rolling restart of
// all with live {done, total, current}; the scheduler's restart, reclone and rehash. One SSP at
// /admin/ssps/<id> (a deep link): its figures, actions, lag chart, its views and its logs.
import { api } from '../api.js';
import { lineChart } from '../charts.js';
import { h, fill } from '../dom.js';
import { duration, num } from '../format.js';
import { live } from '../live.js';
import { actionButton, ago, badge, errorBox, kv, progress, readOnlyNote, table } from '../ui.js';
import { registerPage } from './registry.js';

const lagOf = (s) => (typeof s.acked_seq === 'number' ? Math.max(0, s.sent_seq - s.acked_seq) : null);
const plural = (n, one, many) => `${n} ${n === 1 ? one : many}`;
// The SSP's own account of its last bootstrap (heartbeat `start`): a warm start from its
// snapshot reads no bootstrap page; a cold one says why it could not start warm.
const startText = (st) => (st.mode === 'warm'
  ? `warm from seq ${num(st.from_seq)} (${num(st.events)} events caught up, ${num(st.secs, 1)} s)`
  : `cold (${num(st.pages_read)} pages, ${num(st.secs, 1)} s)${st.why ? `: ${st.why}` : ''}`);

function sspActions(s, out) {
  return h('div.row',
    actionButton('Restart', { id: `restart:${s.id}`, out,
      run: () => api.post(`/ssps/${encodeURIComponent(s.id)}/restart`, { mode: 'restart' }) }),
    actionButton('Clean restart', { id: `clean:${s.id}`, out, danger: true,
      confirm: () => ({ title: `Clean restart of ${s.id}?`,
        body: `This wipes the snapshot and arena of 1 SSP (${s.id}); its ${plural(s.query_count, 'view is', 'views are')} rebuilt from the replica while it re-bootstraps.`,
        ok: 'Clean restart 1 SSP' }),
      run: () => api.post(`/ssps/${encodeURIComponent(s.id)}/restart`, { mode: 'clean' }) }),
    actionButton('Reload', { id: `reload:${s.id}`, out,
      run: () => api.post(`/ssps/${encodeURIComponent(s.id)}/restart`, { mode: 'reload' }) }));
}

function detailPage({ root, params, setTitle }) {
  const id = params.join('/');
  setTitle(`SSP ${id}`);
  const body = h('div', h('p.loading', 'Waiting for the overview…'));
  const out = h('div', { role: 'status', 'aria-live': 'polite' });
  const chart = h('div');
  let actions = null;
  const actionsBox = h('div');
  fill(root, h('p', h('a', { href: '/admin/ssps' }, '← All SSPs')), h('h1', `SSP ${id}`), readOnlyNote(),
    actionsBox, out, body, h('h2', 'Lag (events sent, not acknowledged)'), chart,
    h('p', h('a', { href: `/admin/views?ssp=${encodeURIComponent(id)}` }, 'Views on this SSP'), ' · ',
      h('a', { href: `/admin/logs?source=${encodeURIComponent(`ssp:${id}`)}` }, 'Logs of this SSP'), ' · ',
      h('a', { href: `/admin/incidents?component=${encodeURIComponent(id)}` }, 'Incidents of this SSP')));
  function draw(ov) {
    const s = ov.ssps.find((x) => x.id === id);
    if (!s) {
      fill(body, h('p.empty', { dataset: { missing: id } }, `No SSP ${id} is registered now (it may have stopped or not registered yet).`));
      return;
    }
    if (!actions) { actions = sspActions(s, out); fill(actionsBox, actions); }
    fill(body, h('div.row', badge(s.status, s.status), s.flagged ? h('span.why', s.flagged) : null),
      h('div.card', { dataset: { ssp: s.id } }, kv([
        ['Id', s.id], ['URL', s.url], ['State', s.state], ['Views', num(s.query_count)],
        ['Lag', `${num(lagOf(s))} events`], ['Queued', `${num(s.queued)} events`],
        ['Sent through', `seq ${num(s.sent_seq)}`], ['Acknowledged through', s.acked_seq === null ? '–' : `seq ${num(s.acked_seq)}`],
        ['Send failures', num(s.send_failures)],
        ['CPU', s.cpu_usage === null ? '–' : `${num(s.cpu_usage, 1)} %`],
        ['Memory', s.memory_usage === null ? '–' : `${num(s.memory_usage, 1)} MB`],
        ['Version', s.version || '–'],
        ['Last heartbeat', s.last_heartbeat_seconds_ago === null ? '–' : `${duration(s.last_heartbeat_seconds_ago * 1000)} ago`],
        ['Registered', ago(s.registered_at_ms)],
        s.bootstrap_progress ? ['Bootstrap', `${s.bootstrap_progress.tables_done}/${s.bootstrap_progress.tables_total} tables`] : null,
        s.start ? ['Last start', startText(s.start)] : null,
      ])));
    fill(chart, lineChart([{ name: id, points: live.history.lag[id] || [] }], { title: `lag of ${id}`, id: 'ssp-lag' }));
  }
  if (live.overview) draw(live.overview);
  const offs = [live.on('overview', draw), live.on('overview-error', (e) => fill(body, errorBox(e, `SSP ${id}`)))];
  return () => offs.forEach((f) => f());
}

function render({ root }) {
  const err = h('div');
  const list = h('div');
  const rollBox = h('div', { id: 'roll' });
  const schedBox = h('div');
  const chart = h('div');
  const out = h('div', { role: 'status', 'aria-live': 'polite' });
  fill(root, h('h1', 'SSPs'), readOnlyNote(), err, out, list,
    h('h2', 'Every SSP'), rollBox, h('h2', 'Lag'), chart, h('h2', 'Scheduler'), schedBox);

  let rollButtons = null;
  function draw(ov) {
    fill(err);
    const ssps = ov.ssps;
    fill(list, table([
      { label: 'SSP', cell: (s) => h('a', { id: s.id, href: `/admin/ssps/${encodeURIComponent(s.id)}` }, h('strong', s.id)) },
      { label: 'State', cell: (s) => [badge(s.status, s.status), s.flagged ? h('div.why', s.flagged) : null,
                                       s.bootstrap_progress && s.state === 'bootstrapping'
                                         ? h('div.why', `${s.bootstrap_progress.tables_done}/${s.bootstrap_progress.tables_total} tables`) : null] },
      { label: 'Views', num: true, cell: (s) => num(s.query_count) },
      { label: 'Lag (events)', num: true, cell: (s) => num(lagOf(s)) },
      { label: 'Queued (events)', num: true, cell: (s) => num(s.queued) },
      { label: 'CPU', num: true, cell: (s) => (s.cpu_usage === null ? '–' : `${num(s.cpu_usage, 1)} %`) },
      { label: 'Memory', num: true, cell: (s) => (s.memory_usage === null ? '–' : `${num(s.memory_usage, 1)} MB`) },
      { label: 'Version', cell: (s) => s.version || '–' },
      { label: 'Registered', cell: (s) => ago(s.registered_at_ms) },
      { label: 'Actions', cell: (s) => sspActions(s, out) },
    ], ssps, { empty: 'No SSP is registered.' }));
    if (!rollButtons) {
      const n = () => (live.overview ? live.overview.ssps.length : 0);
      rollButtons = h('div.row',
        actionButton('Rolling restart', { id: 'restart-all', danger: true, out,
          confirm: () => ({ title: n() === 1 ? 'Restart the only SSP?' : `Restart all ${n()} SSPs?`,
            body: n() === 1
              ? 'The 1 SSP restarts; its views are not served until it is Ready again (no other SSP can take them).'
              : `Every SSP (${n()}) restarts one at a time, each waited to Ready before the next; views stay served by the others.`,
            ok: `Restart ${plural(n(), 'SSP', 'SSPs')}` }),
          run: () => api.post('/ssps/restart-all', { mode: 'restart', rolling: true }) }),
        actionButton('Rolling clean restart', { id: 'clean-all', danger: true, out,
          confirm: () => ({ title: n() === 1 ? 'Clean restart of the only SSP?' : `Clean restart of all ${n()} SSPs?`,
            body: n() === 1
              ? 'The 1 SSP wipes its snapshot and arena and re-bootstraps; its views are not served meanwhile.'
              : `Every SSP (${n()}) wipes its snapshot and arena and re-bootstraps, one at a time.`,
            ok: `Clean restart ${plural(n(), 'SSP', 'SSPs')}` }),
          run: () => api.post('/ssps/restart-all', { mode: 'clean', rolling: true }) }));
      const cfg = ov.scheduler;
      fill(schedBox, h('div.row',
        actionButton('Restart scheduler', { id: 'scheduler-restart', danger: true, out,
          confirm: () => ({ title: 'Restart the scheduler?', body: 'The scheduler process exits and its supervisor starts it again; SSPs reconnect.', ok: 'Restart the scheduler' }),
          run: () => api.post('/scheduler/restart', { mode: 'restart' }) }),
        actionButton('Reclone replica', { id: 'reclone', danger: true, out,
          confirm: () => ({ title: 'Re-clone the replica?', body: `The replica is cloned again from the database and ${n() === 1 ? 'the 1 SSP re-bootstraps' : `all ${n()} SSPs re-bootstrap`} (clean).`, ok: `Reclone and re-bootstrap ${plural(n(), 'SSP', 'SSPs')}` }),
          run: () => api.post('/scheduler/restart', { mode: 'reclone' }) }),
        actionButton('Rehash replica', { id: 'rehash', danger: true, out,
          confirm: () => ({ title: 'Rehash the replica?', body: 'Recounts and rehashes every table of the replica (1 scheduler), then checks drift against the database.', ok: 'Rehash 1 replica' }),
          run: () => api.post('/scheduler/restart', { mode: 'rehash' }) })),
        cfg.supervised ? null : h('p.why', 'Restart needs a supervisor (SVC_SUPERVISED=1, as under ops/run): without one the scheduler refuses it.'));
    }
    fill(chart, lineChart(Object.entries(live.history.lag).map(([id, pts]) => ({ name: id, points: pts })),
      { title: 'SSP lag', id: 'ssp-lag' }));
  }

  function drawRoll(ops) {
    const roll = (ops || []).find((o) => o.kind === 'ssps_restart_all');
    fill(rollBox, rollButtons,
      roll ? h('div.card', { dataset: { roll: roll.status } },
        h('div.row', badge(roll.status, roll.status), h('span', roll.message), ago(roll.started_at)),
        progress(roll.progress)) : null);
  }

  if (live.overview) draw(live.overview);
  drawRoll(live.operations);
  const offs = [
    live.on('overview', (ov) => { draw(ov); drawRoll(live.operations); }),
    live.on('operations', (ops) => { drawRoll(ops); }),
    live.on('overview-error', (e) => fill(err, errorBox(e, 'SSPs'))),
  ];
  return () => offs.forEach((f) => f());
}

registerPage({ key: 'ssps', title: 'SSPs', order: 20,
               render: (ctx) => (ctx.params.length ? detailPage(ctx) : render(ctx)) });
