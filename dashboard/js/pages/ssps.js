// SSPs: state, views, lag, memory, version; restart / clean / reload each; a rolling restart of
// all with live {done, total, current}; the scheduler's restart, reclone and rehash.
import { api } from '../api.js';
import { lineChart } from '../charts.js';
import { h, fill } from '../dom.js';
import { num } from '../format.js';
import { live } from '../live.js';
import { actionButton, ago, badge, errorBox, progress, readOnlyNote, table } from '../ui.js';
import { registerPage } from './registry.js';

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
      { label: 'SSP', cell: (s) => h('strong', { id: s.id }, s.id) },
      { label: 'State', cell: (s) => [badge(s.status, s.status), s.flagged ? h('div.why', s.flagged) : null,
                                       s.bootstrap_progress && s.state === 'bootstrapping'
                                         ? h('div.why', `${s.bootstrap_progress.tables_done}/${s.bootstrap_progress.tables_total} tables`) : null] },
      { label: 'Views', num: true, cell: (s) => num(s.query_count) },
      { label: 'Lag', num: true, cell: (s) => num(typeof s.acked_seq === 'number' ? Math.max(0, s.sent_seq - s.acked_seq) : null) },
      { label: 'Queued', num: true, cell: (s) => num(s.queued) },
      { label: 'CPU', num: true, cell: (s) => (s.cpu_usage === null ? '–' : `${num(s.cpu_usage, 1)} %`) },
      { label: 'Memory', num: true, cell: (s) => (s.memory_usage === null ? '–' : `${num(s.memory_usage, 1)} MB`) },
      { label: 'Version', cell: (s) => s.version || '–' },
      { label: 'Registered', cell: (s) => ago(s.registered_at_ms) },
      { label: 'Actions', cell: (s) => h('div.row',
        actionButton('Restart', { id: `restart:${s.id}`, out,
          run: () => api.post(`/ssps/${encodeURIComponent(s.id)}/restart`, { mode: 'restart' }) }),
        actionButton('Clean restart', { id: `clean:${s.id}`, out, danger: true,
          confirm: () => ({ title: `Clean restart of ${s.id}?`,
            body: `This wipes the snapshot and arena of 1 SSP (${s.id}); its ${s.query_count} views are rebuilt from the replica while it re-bootstraps.`,
            ok: `Clean restart 1 SSP` }),
          run: () => api.post(`/ssps/${encodeURIComponent(s.id)}/restart`, { mode: 'clean' }) }),
        actionButton('Reload', { id: `reload:${s.id}`, out,
          run: () => api.post(`/ssps/${encodeURIComponent(s.id)}/restart`, { mode: 'reload' }) })) },
    ], ssps, { empty: 'No SSP is registered.' }));
    if (!rollButtons) {
      const n = () => (live.overview ? live.overview.ssps.length : 0);
      rollButtons = h('div.row',
        actionButton('Rolling restart', { id: 'restart-all', danger: true, out,
          confirm: () => ({ title: `Restart all ${n()} SSPs?`,
            body: `Every SSP (${n()}) restarts one at a time, each waited to Ready before the next; views stay served by the others.`,
            ok: `Restart ${n()} SSPs` }),
          run: () => api.post('/ssps/restart-all', { mode: 'restart', rolling: true }) }),
        actionButton('Rolling clean restart', { id: 'clean-all', danger: true, out,
          confirm: () => ({ title: `Clean restart of all ${n()} SSPs?`,
            body: `Every SSP (${n()}) wipes its snapshot and arena and re-bootstraps, one at a time.`,
            ok: `Clean restart ${n()} SSPs` }),
          run: () => api.post('/ssps/restart-all', { mode: 'clean', rolling: true }) }));
      const cfg = ov.scheduler;
      fill(schedBox, h('div.row',
        actionButton('Restart scheduler', { id: 'scheduler-restart', danger: true, out,
          confirm: () => ({ title: 'Restart the scheduler?', body: 'The scheduler process exits and its supervisor starts it again; SSPs reconnect.', ok: 'Restart the scheduler' }),
          run: () => api.post('/scheduler/restart', { mode: 'restart' }) }),
        actionButton('Reclone replica', { id: 'reclone', danger: true, out,
          confirm: () => ({ title: 'Re-clone the replica?', body: `The replica is cloned again from the database and all ${n()} SSPs re-bootstrap (clean).`, ok: `Reclone and re-bootstrap ${n()} SSPs` }),
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

registerPage({ key: 'ssps', title: 'SSPs', order: 20, render });
