// Schedules: every definition with its next and last fire, paused / quarantined / disabled
// state, skipped fires, and a chart of run outcomes per schedule (the rollup tallies over the
// retained days); one schedule at /admin/schedules/<name> with its next fires, recent fires
// and outcomes per day. Pause and release ask first; resume and trigger do not (they start
// work the definition already asks for).
import { api } from '../api.js';
import { outcomeBars } from '../charts.js';
import { h, fill } from '../dom.js';
import { duration, isoTime, num } from '../format.js';
import { actionButton, ago, badge, errorBox, kv, poller, readOnlyNote, table } from '../ui.js';
import { registerPage } from './registry.js';

const REFRESH_SECS = 2;
const href = (name) => `/admin/schedules/${encodeURIComponent(name)}`;
const path = (name, verb) => `/schedules/${encodeURIComponent(name)}/${verb}`;

function stateOf(sc) {
  if (sc.quarantined) return 'quarantined';
  if (!sc.enabled) return 'disabled';
  if (sc.paused) return 'paused';
  if (sc.definition_error) return 'error';
  return 'active';
}

function stateBadge(sc) {
  const st = stateOf(sc);
  return h('span', { dataset: { state: st }, title: sc.definition_error || '' },
    badge(st, st === 'active' ? 'ok' : st === 'disabled' ? 'idle' : st));
}

function target(sc) {
  if (sc.target && sc.target.table) return h('span', 'job in ', h('code', sc.target.table));
  const wf = sc.target && sc.target.workflow;
  return wf ? h('span', 'workflow ', h('a', { href: `/admin/workflows?schedule=${encodeURIComponent(sc.name)}` }, wf)) : '–';
}

/** The write controls of one schedule; `done` runs after an accepted action. */
function controls(sc, out, done) {
  const name = sc.name;
  return h('span.row',
    sc.paused
      ? actionButton('Resume', { id: `resume:${name}`, out, run: () => api.post(path(name, 'resume')),
        onDone: (r) => { fill(out, badge('resumed', 'ok'), ` ${r.name}`); done(); } })
      : actionButton('Pause', { id: `pause:${name}`, danger: true, out,
        confirm: () => ({ title: `Pause schedule ${name}?`,
          body: `Stops the fires of 1 schedule (${name}, ${sc.cron} ${sc.timezone}) until it is resumed. Runs already started (${num(sc.running)} running, ${num(sc.queued)} queued) continue.`,
          ok: `Pause ${name}` }),
        run: () => api.post(path(name, 'pause')),
        onDone: (r) => { fill(out, badge('paused', 'paused'), ` ${r.name}`); done(); } }),
    actionButton('Trigger', { id: `trigger:${name}`, out, run: () => api.post(path(name, 'trigger')),
      onDone: (r) => { fill(out, badge('triggered', 'ok'), ` ${r.name} at ${isoTime(r.triggered_at)}`); done(); } }),
    sc.quarantined ? actionButton('Release', { id: `release:${name}`, danger: true, out,
      confirm: () => ({ title: `Release schedule ${name} from quarantine?`,
        body: `Lets 1 schedule (${name}) fire again after ${num(sc.quarantined.failures)} failed fires in a row; its next fire runs the same target that kept failing.`,
        ok: `Release ${name}` }),
      run: () => api.post(path(name, 'release')),
      onDone: (r) => { fill(out, badge('released', 'ok'), ` ${r.name}`); done(); } }) : null);
}

function listPage({ root }) {
  const err = h('div');
  const status = h('p.muted', { role: 'status' });
  const out = h('div', { role: 'status', 'aria-live': 'polite' });
  const chart = h('div');
  const list = h('div', h('p.loading', 'Loading schedules…'));
  fill(root, h('h1', 'Schedules'), readOnlyNote(), status, err, out, list,
    h('h2', 'Run outcomes per schedule'), h('p.muted', 'Succeeded, failed and skipped fires over the retained days; reruns count under (ad-hoc).'), chart);
  let lastSig = null;
  function draw(b) {
    const sig = JSON.stringify(b);
    if (sig === lastSig) return;  // unchanged: keep the controls as they are
    lastSig = sig;
    fill(status, `${num(b.schedules.length)} schedules · engine `, badge(b.engine, b.engine === 'ready' ? 'ok' : 'warn'));
    fill(list, table([
      { label: 'Schedule', cell: (sc) => h('a', { href: href(sc.name) }, sc.name) },
      { label: 'When', cell: (sc) => h('span', h('code', sc.cron || '–'), ' ', h('span.muted', sc.timezone || '')) },
      { label: 'Target', cell: target },
      { label: 'State', cell: stateBadge },
      { label: 'Next fire', cell: (sc) => ago(sc.next_fire_at) },
      { label: 'Last fire', cell: (sc) => ago(sc.last_fire_at) },
      { label: 'Last run', cell: (sc) => (sc.last_run_status ? badge(sc.last_run_status) : '–') },
      { label: 'Skipped', num: true, cell: (sc) => h('span', { dataset: { skipped: String(sc.skipped_fires) } }, num(sc.skipped_fires)) },
      { label: 'In flight', num: true, cell: (sc) => `${num(sc.running)}${sc.queued ? ` + ${num(sc.queued)} queued` : ''}` },
      { label: 'Actions', cell: (sc) => controls(sc, out, () => { lastSig = null; }) },
    ], b.schedules, { empty: h('span', { dataset: { emptySchedules: '1' } }, 'No schedule: add ', h('code', 'schedules:'), ' to ', h('code', 'project.yml'), ' and run ', h('code', 'svc workflows apply'), '.'),
                      rowAttrs: (sc) => ({ dataset: { schedule: sc.name, state: stateOf(sc) } }) }));
    const rows = b.schedules.map((sc) => ({ label: sc.name, ...sc.rollup }));
    const adhoc = b.ad_hoc || {};
    if (adhoc.success + adhoc.failure + adhoc.skipped) rows.push({ label: '(ad-hoc)', ...adhoc });
    fill(chart, rows.length ? outcomeBars(rows, { id: 'schedule-outcomes', title: 'Run outcomes per schedule' })
      : h('p.empty', 'No outcome yet.'));
  }
  return poller(async () => draw(await api.get('/schedules')), () => REFRESH_SECS, {
    onData: () => fill(err), onError: (e) => fill(err, errorBox(e, 'Schedules')) });
}

function detailPage({ root, params, setTitle }) {
  const name = params.join('/');
  setTitle(`Schedule ${name}`);
  const err = h('div');
  const out = h('div', { role: 'status', 'aria-live': 'polite' });
  const body = h('div', h('p.loading', 'Loading the schedule…'));
  fill(root, h('p', h('a', { href: '/admin/schedules' }, '← All schedules')), h('h1', `Schedule ${name}`),
    readOnlyNote(), err, out, body);
  let lastSig = null;
  function draw(sc) {
    const sig = JSON.stringify(sc);
    if (sig === lastSig) return;
    lastSig = sig;
    const days = [...sc.rollup.days].reverse().map((d) => ({ label: d.day, success: d.success, failure: d.failure, skipped: d.skipped }));
    fill(body,
      h('div.row', stateBadge(sc), controls(sc, out, () => { lastSig = null; })),
      h('div.grid.wide',
        h('div.card', kv([
          ['When', h('span', h('code', sc.cron), ' in ', sc.timezone)], ['Target', target(sc)],
          ['Concurrency', sc.concurrency], ['Catch-up', sc.catch_up], ['Quarantine after', sc.quarantine_after ? `${sc.quarantine_after} failed fires` : '–'],
          ['Next fire', ago(sc.next_fire_at)], ['Last fire', ago(sc.last_fire_at)],
          ['Last run', sc.last_run_status ? h('span', badge(sc.last_run_status), ' ', ago(sc.last_run_at)) : '–'],
          ['Last error', sc.last_error || '–'], ['Failures in a row', num(sc.failures)],
          ['Quarantined', sc.quarantined ? `since fire ${sc.quarantined.key} (${num(sc.quarantined.failures)} failures)` : 'no'],
          ['Skipped fires', h('span', { dataset: { skipped: String(sc.skipped_fires) } }, num(sc.skipped_fires))],
          sc.definition_error ? ['Definition error', sc.definition_error] : null,
        ])),
        h('div.card', h('h3', 'Next fires'), sc.next_fires.length
          ? h('ol', { dataset: { nextFires: String(sc.next_fires.length) } }, sc.next_fires.map((t) => h('li', isoTime(t), ' (', ago(t), ')')))
          : h('p.muted', 'none (paused, quarantined or disabled)'),
        h('h3', 'Outcomes'), h('p', `${num(sc.rollup.success)} succeeded, ${num(sc.rollup.failure)} failed, ${num(sc.rollup.skipped)} skipped`))),
      h('h2', 'Outcomes per day'),
      days.length ? outcomeBars(days, { id: 'schedule-days', title: `Run outcomes of ${name} per day`, labelWidth: 90 })
        : h('p.empty', 'No outcome yet.'),
      h('h2', 'Recent fires'),
      table([
        { label: 'Due', cell: (f) => h('span', { title: isoTime(f.due_at) }, ago(f.due_at)) },
        { label: 'Status', cell: (f) => badge(f.status) },
        { label: 'Trigger', cell: (f) => `${f.trigger || '–'}${f.catch_up ? ' (catch-up)' : ''}${f.retried ? ' (retried)' : ''}` },
        { label: 'Lateness', num: true, cell: (f) => (f.lateness_ms === null || f.lateness_ms === undefined ? '–' : duration(f.lateness_ms)) },
        { label: 'Run / job', cell: (f) => (f.run ? h('a', { href: `/admin/workflows/${encodeURIComponent(f.run.replace(/^_00_workflow_run:/, ''))}` }, f.run)
          : f.job ? h('a', { href: `/admin/jobs/${encodeURIComponent(f.job)}` }, f.job) : '–') },
        { label: 'Error', cell: (f) => (f.error ? h('code', { title: f.error.message || '' }, f.error.code) : '') },
      ], sc.recent_fires, { empty: 'No fire yet.', rowAttrs: (f) => ({ dataset: { fire: f.id, status: f.status } }) }));
  }
  return poller(async () => draw((await api.get(`/schedules/${encodeURIComponent(name)}`)).schedule), () => REFRESH_SECS, {
    onData: () => fill(err), onError: (e) => fill(err, errorBox(e, 'This schedule')) });
}

registerPage({ key: 'schedules', title: 'Schedules', order: 74,
               render: (ctx) => (ctx.params.length ? detailPage(ctx) : listPage(ctx)) });
