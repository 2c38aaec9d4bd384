// Workflow runs: the list (filters sent to GET workflows/runs; totals of work in flight plus
// the last hour), a selection of running runs cancelled in bulk after a confirmation that
// names how many and which (one request for the whole selection, answered per run); one run
// at /admin/workflows/<key> with its step DAG, its steps and cancel / retry / rerun.
import { api } from '../api.js';
import { dagView } from '../dag.js';
import { h, fill } from '../dom.js';
import { num } from '../format.js';
import { session } from '../session.js';
import { actionButton, ago, badge, confirmAction, errorBox, jsonBlock, kv, poller, readOnlyNote,
  table } from '../ui.js';
import { registerPage } from './registry.js';

const STATUSES = ['', 'running', 'completed', 'failed', 'killed'];
const FILTERS = ['name', 'schedule', 'status', 'rerun_of', 'limit'];
const REFRESH_SECS = 2;

const runHref = (key) => `/admin/workflows/${encodeURIComponent(key)}`;
const keyOf = (id) => (id && id.startsWith('_00_workflow_run:') ? id.slice('_00_workflow_run:'.length) : id);

function stepCounts(c) {
  const parts = Object.entries(c || {}).map(([k, v]) => `${v} ${k}`);
  return parts.length ? parts.join(', ') : '–';
}

function listPage({ root, query, navigate }) {
  const form = h('form.filters', { role: 'search', 'aria-label': 'Filter workflow runs' },
    h('label', 'Workflow', h('input', { name: 'name', value: query.get('name') || '', size: 12 })),
    h('label', 'Schedule', h('input', { name: 'schedule', value: query.get('schedule') || '', size: 12 })),
    h('label', 'Status', h('select', { name: 'status' }, STATUSES.map((v) =>
      h('option', { value: v, selected: (query.get('status') || '') === v }, v || 'any')))),
    h('label', 'Rerun of', h('input', { name: 'rerun_of', value: query.get('rerun_of') || '', size: 14 })),
    h('label', 'Limit', h('input', { name: 'limit', type: 'number', min: '1', max: '500', value: query.get('limit') || '50', size: 5 })),
    h('button', { type: 'submit' }, 'Apply'));
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const q = new URLSearchParams();
    for (const [k, v] of new FormData(form).entries()) if (v !== '' && !(k === 'limit' && v === '50')) q.set(k, v);
    navigate(`/admin/workflows${q.toString() ? `?${q}` : ''}`);
  });
  const selected = new Set();
  let runs = [];
  const status = h('p.muted', { role: 'status' });
  const err = h('div');
  const totals = h('div');
  const out = h('div', { role: 'status', 'aria-live': 'polite', dataset: { bulkResult: '1' } });
  const list = h('div', h('p.loading', 'Loading workflow runs…'));
  const why = session.writeBlocked;
  const bulk = h('button', { type: 'button', class: 'danger', dataset: { action: 'bulk-cancel' }, disabled: true,
                             title: why || 'Select running runs first' }, 'Cancel selected (0)');
  const selectAll = h('button', { type: 'button', dataset: { action: 'select-running' }, disabled: !!why, title: why || '' },
    'Select all running');
  fill(root, h('h1', 'Workflow runs'), form, readOnlyNote(), status, err, totals,
    h('div.row', bulk, selectAll, out), list);

  function syncBulk() {
    for (const k of [...selected]) if (!runs.some((r) => r.key === k && r.status === 'running')) selected.delete(k);
    bulk.textContent = `Cancel selected (${selected.size})`;
    bulk.disabled = !!why || selected.size === 0;
    bulk.title = why || (selected.size ? `Cancel ${selected.size} running runs` : 'Select running runs first');
  }

  let lastSig = null;
  function draw(b) {
    // Redrawn only when something changed: a poll must not replace a control being used.
    const sig = JSON.stringify(b);
    if (sig === lastSig) return;
    lastSig = sig;
    runs = b.runs;
    fill(totals, h('div.grid', ['running', 'completed', 'failed', 'killed'].map((k) =>
      h('div.card', h('div.stat', { dataset: { total: k } }, num(b.totals[k])),
        h('div.stat-label', k === 'running' ? 'running' : `${k} (last hour)`)))));
    fill(list, table([
      { label: h('span.visually-hidden', 'Select'), cell: (r) => (r.status === 'running'
        ? h('input', { type: 'checkbox', 'aria-label': `Select run ${r.key}`, checked: selected.has(r.key), disabled: !!why,
                       dataset: { select: r.key },
                       on: { change: (e) => { if (e.target.checked) selected.add(r.key); else selected.delete(r.key); syncBulk(); } } })
        : '') },
      { label: 'Run', cell: (r) => h('a', { href: runHref(r.key) }, r.key) },
      { label: 'Workflow', cell: (r) => h('a', { href: `/admin/workflows?name=${encodeURIComponent(r.workflow || '')}` }, r.workflow || '–') },
      { label: 'Status', cell: (r) => h('span.row', badge(r.status),
        r.kill_requested && r.status === 'running' ? badge('kill requested', 'kill_requested') : null) },
      { label: 'Trigger', cell: (r) => r.trigger || '–' },
      { label: 'Schedule', cell: (r) => (r.schedule ? h('a', { href: `/admin/schedules/${encodeURIComponent(r.schedule)}` }, r.schedule) : '–') },
      { label: 'Steps', cell: (r) => stepCounts(r.step_counts) },
      { label: 'Created', cell: (r) => ago(r.created_at) },
      { label: 'Finished', cell: (r) => ago(r.finished_at) },
      { label: 'Error', cell: (r) => (r.error ? h('code', { title: r.error.message || '' }, r.error.code) : '') },
    ], runs, { empty: 'No workflow run matches.', rowAttrs: (r) => ({ dataset: { run: r.key, status: r.status } }) }));
    fill(status, `${num(runs.length)} runs, newest first · changed `, ago(Date.now()));
    syncBulk();
  }

  const load = async () => draw(await api.get('/workflows/runs', Object.fromEntries(
    FILTERS.filter((k) => query.get(k)).map((k) => [k, query.get(k)]))));
  selectAll.addEventListener('click', () => {
    for (const r of runs) if (r.status === 'running') selected.add(r.key);
    for (const box of list.querySelectorAll('input[data-select]')) box.checked = true;
    syncBulk();
  });
  bulk.addEventListener('click', async () => {
    const keys = [...selected];
    if (!keys.length) return;
    const shown = keys.slice(0, 10).join(', ') + (keys.length > 10 ? `, and ${keys.length - 10} more` : '');
    const ok = await confirmAction({
      title: `Cancel ${keys.length} workflow run${keys.length === 1 ? '' : 's'}?`,
      body: `Cancels the ${keys.length} running run${keys.length === 1 ? '' : 's'} selected on this page (${shown}). `
        + 'The job of every dispatched step is killed; each run ends killed once its jobs are terminal. Other runs are not touched.',
      ok: `Cancel ${keys.length} run${keys.length === 1 ? '' : 's'}` });
    if (!ok) return;
    bulk.disabled = true;
    const done = { killed: 0, kill_requested: 0 };
    const refused = [];
    delete out.dataset.bulkDone;
    fill(out, h('span.badge', 'cancelling'), ` ${num(keys.length)} runs…`);
    // ONE request for the whole selection: the scheduler answers per run
    try {
      const res = await api.post('/workflows/runs/cancel', { ids: keys });
      for (const r of res.results) {
        if (r.ok) done[r.status] = (done[r.status] || 0) + 1;
        else refused.push(`${r.id}: ${r.error}`);
        selected.delete(r.id);
      }
    } catch (e) { refused.push(e.message); }
    out.dataset.bulkDone = '1';
    fill(out, h('span.badge.s-ok', 'cancelled'),
      ` ${num(done.killed + done.kill_requested)} of ${num(keys.length)} (${num(done.killed)} killed, ${num(done.kill_requested)} waiting for their jobs)`,
      refused.length ? h('div.error', { role: 'alert' }, `Refused: ${refused.join('; ')}`) : null);
    lastSig = null;
    try { await load(); } catch (e) { fill(err, errorBox(e, 'Workflow runs')); }
  });
  return poller(load, () => REFRESH_SECS, {
    onData: () => fill(err),
    onError: (e) => fill(err, errorBox(e, 'Workflow runs')),
  });
}

function stepsTable(steps) {
  return table([
    { label: 'Step', cell: (st) => st.name },
    { label: 'Status', cell: (st) => badge(st.status || '–', st.status) },
    { label: 'Table', cell: (st) => st.table || '–' },
    { label: 'Depends on', cell: (st) => (st.depends_on.length ? st.depends_on.join(', ') : '–') },
    { label: 'Attempt', num: true, cell: (st) => num(st.attempt ?? 0) },
    { label: 'Job', cell: (st) => (st.job ? h('a', { href: `/admin/jobs/${encodeURIComponent(st.job)}` }, st.job) : '–') },
    { label: 'Created', cell: (st) => ago(st.created_at) },
    { label: 'Started', cell: (st) => ago(st.started_at) },
    { label: 'Finished', cell: (st) => ago(st.finished_at) },
    { label: 'Error', cell: (st) => (st.error ? h('code', { title: st.error.message || '' }, st.error.code) : '') },
  ], steps, { empty: 'No step.', rowAttrs: (st) => ({ dataset: { step: st.name, status: st.status || '' } }) });
}

function detailPage({ root, params, setTitle, navigate }) {
  const key = keyOf(params.join('/'));
  setTitle(`Run ${key}`);
  const out = h('div', { role: 'status', 'aria-live': 'polite' });
  const head = h('div');
  const err = h('div');
  const graph = h('div', h('p.loading', 'Loading the run…'));
  const steps = h('div');
  const hide = h('input', { type: 'checkbox', dataset: { toggle: 'hide-completed' } });
  let last = null;
  hide.addEventListener('change', () => { if (last) fill(graph, dagView(last, { hideCompleted: hide.checked })); });
  fill(root, h('p', h('a', { href: '/admin/workflows' }, '← All workflow runs')), h('h1', `Workflow run ${key}`),
    readOnlyNote(), err, head, out, h('h2', 'Steps'),
    h('label.check', hide, 'Hide completed steps'), graph, steps);

  let lastSig = null;
  function draw(run) {
    const sig = JSON.stringify(run);
    if (sig === lastSig) return;  // unchanged: keep the controls as they are
    lastSig = sig;
    last = run;
    const running = run.steps.filter((st) => st.status === 'running').length;
    fill(head,
      h('div.row', { dataset: { runStatus: run.status } }, badge(run.status),
        run.kill_requested && run.status === 'running' ? badge('kill requested', 'kill_requested') : null,
        run.status === 'running' ? actionButton('Cancel', { id: 'cancel', danger: true, out,
          confirm: () => ({ title: `Cancel run ${key}?`,
            body: `Cancels 1 run (${key}, workflow ${run.workflow}): the jobs of its ${running} running step${running === 1 ? '' : 's'} are killed; it ends killed once they are terminal.`,
            ok: 'Cancel 1 run' }),
          run: () => api.post(`/workflows/runs/${encodeURIComponent(key)}/cancel`),
          onDone: (r) => { fill(out, badge(r.status), ` run ${r.run}`); refresh(); } }) : null,
        run.status === 'failed' || run.status === 'killed' ? actionButton('Retry', { id: 'retry', out,
          confirm: () => ({ title: `Retry run ${key}?`,
            body: `Runs again the failed and skipped steps of 1 run (${key}); its ${run.steps.filter((st) => st.status === 'completed').length} completed steps are kept.`,
            ok: 'Retry 1 run' }),
          run: () => api.post(`/workflows/runs/${encodeURIComponent(key)}/retry`),
          onDone: (r) => { fill(out, h('span.badge.s-ok', 'retrying'), ` ${r.reset.length} steps reset, ${r.kept.length} kept (retry ${r.retry_count})`); refresh(); } }) : null,
        actionButton('Rerun', { id: 'rerun', out,
          run: () => api.post(`/workflows/runs/${encodeURIComponent(key)}/rerun`),
          onDone: (r) => navigate(runHref(keyOf(r.run))) })),
      h('div.card', kv([
        ['Workflow', h('a', { href: `/admin/workflows?name=${encodeURIComponent(run.workflow || '')}` }, run.workflow)],
        ['Trigger', run.trigger],
        ['Schedule', run.schedule ? h('a', { href: `/admin/schedules/${encodeURIComponent(run.schedule)}` }, run.schedule) : '–'],
        ['Rerun of', run.rerun_of ? h('a', { href: runHref(keyOf(run.rerun_of)), dataset: { rerunOf: keyOf(run.rerun_of) } }, keyOf(run.rerun_of)) : '–'],
        ['Reruns', h('a', { href: `/admin/workflows?rerun_of=${encodeURIComponent(key)}` }, 'list')],
        ['Retries', run.retry_count ? `${run.retry_count} (last ${new Date(run.last_retry_at).toISOString()})` : '–'],
        ['Created', ago(run.created_at)], ['Finished', ago(run.finished_at)], ['Deadline', ago(run.deadline_at)],
        ['Error', run.error ? jsonBlock(run.error) : '–'],
      ])));
    fill(graph, dagView(run, { hideCompleted: hide.checked }));
    fill(steps, stepsTable(run.steps));
  }

  const load = async () => draw((await api.get(`/workflows/runs/${encodeURIComponent(key)}`)).run);
  let stop = poller(load, () => REFRESH_SECS, { onData: () => fill(err), onError: (e) => fill(err, errorBox(e, 'This run')) });
  function refresh() { stop(); stop = poller(load, () => REFRESH_SECS, { onData: () => fill(err), onError: (e) => fill(err, errorBox(e, 'This run')) }); }
  return () => stop();
}

registerPage({ key: 'workflows', title: 'Workflow runs', order: 72,
               render: (ctx) => (ctx.params.length ? detailPage(ctx) : listPage(ctx)) });
