// Jobs: queue totals and the per-table breakdown live from jobs/stream; filters query the
// database (GET /jobs); one job at /admin/jobs/<id> with kill / retry; clearing finished jobs
// asks first, naming the table and how many rows. Jobs selected in the list are killed or
// retried together after a confirmation naming them; each answer is shown per job, and the
// list shows each accepted action at once ("kill requested", "retry requested", unchecked)
// until a sample or a read shows the job past the status it had when asked.
import { api } from '../api.js';
import { h, fill } from '../dom.js';
import { num } from '../format.js';
import { openStream } from '../sse.js';
import { session } from '../session.js';
import { actionButton, ago, badge, confirmAction, errorBox, jsonBlock, kv, readOnlyNote, table } from '../ui.js';
import { registerPage } from './registry.js';

const STATUSES = ['', 'pending', 'processing', 'completed', 'failed', 'stalled'];
const ORIGINS = ['', 'app', 'schedule', 'workflow'];

// A job's shown status: an action accepted for it wins over a list still showing the status
// it was asked in (samples and the SSPs' relays trail the answer by a moment).
function shownStatus(j, requested) {
  const r = requested && requested.get(j.id);
  const status = j.stalled ? 'stalled' : j.status;
  if (r && r.from === status && Date.now() - r.at < 120000) return [`${r.verb} requested`, 'kill_requested'];
  if (r) requested.delete(j.id);
  return [status, status];
}

function jobsTable(jobs, selection, requested) {
  const why = session.writeBlocked;
  return table([
    selection ? { label: 'Select', cell: (j) => h('input', { type: 'checkbox', 'aria-label': `Select job ${j.id}`,
      checked: selection.has(j.id), disabled: !!why, dataset: { select: j.id },
      on: { change: (e) => selection.toggle(j.id, e.target.checked) } }) } : null,
    { label: 'Job', cell: (j) => h('a', { href: `/admin/jobs/${encodeURIComponent(j.id)}` }, j.id) },
    { label: 'Status', cell: (j) => badge(...shownStatus(j, requested)) },
    { label: 'Path', cell: (j) => h('code', j.path || '') },
    { label: 'Origin', cell: (j) => j.origin.kind },
    { label: 'Attempts', num: true, cell: (j) => num(j.attempts) },
    { label: 'Assignee', cell: (j) => j.assignee || '–' },
    { label: 'Activity', cell: (j) => ago(j.activity_ms) },
  ].filter(Boolean), jobs, { empty: 'No job.', rowAttrs: (j) => ({ dataset: { job: j.id } }) });
}

function listPage({ root, query, navigate }) {
  const filtered = ['status', 'table', 'origin', 'q'].some((k) => query.get(k));
  const form = h('form.filters', { role: 'search', 'aria-label': 'Filter jobs' },
    h('label', 'Status', h('select', { name: 'status' }, STATUSES.map((v) => h('option', { value: v, selected: (query.get('status') || '') === v }, v || 'any')))),
    h('label', 'Table', h('input', { name: 'table', value: query.get('table') || '', size: 10 })),
    h('label', 'Origin', h('select', { name: 'origin' }, ORIGINS.map((v) => h('option', { value: v, selected: (query.get('origin') || '') === v }, v || 'any')))),
    h('label', 'Path contains', h('input', { name: 'q', type: 'search', value: query.get('q') || '' })),
    h('label', 'Limit', h('input', { name: 'limit', type: 'number', min: '1', max: '1000', value: query.get('limit') || '100', size: 5 })),
    h('button', { type: 'submit' }, 'Apply'));
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const q = new URLSearchParams();
    for (const [k, v] of new FormData(form).entries()) if (v !== '' && !(k === 'limit' && v === '100')) q.set(k, v);
    navigate(`/admin/jobs${q.toString() ? `?${q}` : ''}`);
  });
  const status = h('p.muted', { role: 'status' });
  const err = h('div');
  const totals = h('div');
  const out = h('div', { role: 'status', 'aria-live': 'polite' });
  const list = h('div', h('p.loading', 'Loading jobs…'));
  const why = session.writeBlocked;
  const picked = new Set();
  const requested = new Map(); // job id -> { verb, from: status when asked, at }
  let shown = []; // the jobs the list draws now
  const drawList = (jobs) => { shown = jobs; fill(list, jobsTable(jobs, selection, requested)); };
  const bulkOut = h('div', { role: 'status', 'aria-live': 'polite', dataset: { bulkResult: '1' } });
  const bulkKill = h('button', { type: 'button', class: 'danger', dataset: { action: 'bulk-kill' }, disabled: true }, 'Kill selected (0)');
  const bulkRetry = h('button', { type: 'button', dataset: { action: 'bulk-retry' }, disabled: true }, 'Retry selected (0)');
  const selection = {
    has: (id) => picked.has(id),
    toggle: (id, on) => { if (on) picked.add(id); else picked.delete(id); syncBulk(); },
  };
  function syncBulk() {
    for (const [b, verb] of [[bulkKill, 'Kill'], [bulkRetry, 'Retry']]) {
      b.textContent = `${verb} selected (${picked.size})`;
      b.disabled = !!why || picked.size === 0;
      b.title = why || (picked.size ? `${verb} ${picked.size} selected jobs` : 'Select jobs first');
    }
  }
  syncBulk();
  async function bulk(verb) {
    const ids = [...picked];
    if (!ids.length) return;
    const n = `${ids.length} job${ids.length === 1 ? '' : 's'}`;
    const names = ids.slice(0, 10).join(', ') + (ids.length > 10 ? `, and ${ids.length - 10} more` : '');
    const ok = await confirmAction(verb === 'kill'
      ? { title: `Kill ${n}?`, body: `Stops the ${n} selected (${names}) wherever they run; each ends failed. Other jobs are not touched.`, ok: `Kill ${n}` }
      : { title: `Retry ${n}?`, body: `Sends the ${n} selected (${names}) back to pending with their retry budget reset. Other jobs are not touched.`, ok: `Retry ${n}` });
    if (!ok) return;
    bulkKill.disabled = true;
    bulkRetry.disabled = true;
    delete bulkOut.dataset.bulkDone;
    fill(bulkOut, h('span.badge', verb === 'kill' ? 'killing' : 'retrying'), ` ${n}…`);
    const refused = [];
    let done = 0;
    const before = new Map(shown.map((j) => [j.id, j.stalled ? 'stalled' : j.status]));
    for (const id of ids) { // one at a time: each is a cluster call relayed to an SSP
      try {
        await api.post(`/jobs/${encodeURIComponent(id)}/${verb}`);
        done += 1;
        picked.delete(id);
        if (before.has(id)) requested.set(id, { verb, from: before.get(id), at: Date.now() });
      } catch (e) { refused.push(h('li', { dataset: { refused: id } }, `${id}: ${e.text || e.message}`)); }
    }
    drawList(shown); // unchecked, each accepted action shown at once
    bulkOut.dataset.bulkDone = '1';
    fill(bulkOut, h('span.badge', { class: refused.length ? 's-warn' : 's-ok' }, verb === 'kill' ? 'killed' : 'retried'),
      ` ${num(done)} of ${num(ids.length)}`, refused.length ? h('div.error', { role: 'alert' }, 'Refused:', h('ul', refused)) : null);
    syncBulk();
    if (filtered) reload();
  }
  bulkKill.addEventListener('click', () => bulk('kill'));
  bulkRetry.addEventListener('click', () => bulk('retry'));
  fill(root, h('h1', 'Jobs'), form, readOnlyNote(), status, err, totals, out, h('h2', filtered ? 'Matching jobs' : 'Newest activity'),
    h('div.row', bulkKill, bulkRetry), bulkOut, list);
  let reload = () => {};

  function drawTotals(snap) {
    if (!snap || !snap.measured) { fill(totals, h('p.muted', 'Totals not measured (the job sampler is off).')); return; }
    const t = snap.totals;
    fill(totals,
      h('div.grid', ['pending', 'processing', 'stalled', 'completed', 'failed'].map((k) =>
        h('div.card', h('div.stat', { dataset: { total: k } }, num(t[k])), h('div.stat-label', k === 'completed' || k === 'failed' ? `${k} (last hour)` : k)))),
      h('h2', 'Per table'),
      table([
        { label: 'Table', cell: ([name]) => h('a', { href: `/admin/jobs?table=${encodeURIComponent(name)}` }, name) },
        ...['pending', 'processing', 'stalled', 'completed', 'failed'].map((k) => ({ label: k, num: true, cell: ([, c]) => num(c[k]) })),
        { label: 'Clear', cell: ([name, c]) => actionButton('Clear finished', { id: `clear:${name}`, danger: true, out,
          confirm: () => ({ title: `Clear finished jobs of ${name}?`,
            body: `Deletes the terminal jobs (completed and failed) of table ${name}: ${num(c.completed + c.failed)} finished in the last hour by the last sample, and any older ones. Pending and running jobs stay.`,
            ok: `Delete finished jobs of ${name}` }),
          run: () => api.post('/jobs/clear', { table: name, all: true }),
          onDone: (r) => fill(out, h('span.badge.s-ok', 'cleared'), ` ${num(r.cleared)} of ${num(r.total)} jobs`) }) },
      ], Object.entries(snap.per_table || {}), { empty: 'No job table.' }));
  }

  let stream = null;
  if (!filtered) {
    stream = openStream('/jobs/stream', null, {
      onEvent: (name, data) => {
        if (name === 'jobs') {
          fill(err);
          drawTotals(data);
          fill(status, 'live · sampled ', ago(data.sampled_at_ms));
          drawList(data.jobs.slice(0, Number(query.get('limit') || 100)));
        } else if (name === 'gap') fill(status, 'caught up after missing updates');
      },
      onState: (st, extra) => {
        if (st === 'error') {
          fill(err, errorBox(extra.message || 'the job stream was refused'));
          if (extra.status === 501) api.get('/jobs', { limit: query.get('limit') || 100 }).then((b) => { drawTotals(b); drawList(b.jobs); }).catch((e) => fill(err, errorBox(e)));
        } else if (st === 'reconnecting') fill(status, badge('reconnecting', 'reconnecting'), ` ${extra.message || ''}`);
      },
    });
  } else {
    const load = async () => {
      try {
        const b = await api.get('/jobs', Object.fromEntries(query.entries()));
        drawTotals(b);
        fill(status, `${num(b.jobs.length)} jobs from the database · `, h('button', { type: 'button', on: { click: load } }, 'Refresh'));
        drawList(b.jobs);
      } catch (e) { fill(err, errorBox(e, 'Jobs')); }
    };
    reload = load;
    load();
  }
  return () => { if (stream) stream.close(); };
}

async function detailPage({ root, params, setTitle }) {
  const id = params.join('/');
  setTitle(`Job ${id}`);
  const body = h('div', h('p.loading', 'Loading the job…'));
  const out = h('div', { role: 'status', 'aria-live': 'polite' });
  fill(root, h('p', h('a', { href: '/admin/jobs' }, '← All jobs')), h('h1', `Job ${id}`), readOnlyNote(), out, body);
  async function load() {
    try {
      const j = await api.get(`/jobs/${encodeURIComponent(id)}`);
      fill(body,
        h('div.row', badge(j.stalled ? 'stalled' : j.status, j.stalled ? 'stalled' : j.status),
          actionButton('Kill', { id: 'kill', danger: true, out,
            confirm: () => ({ title: `Kill job ${id}?`, body: `Stops 1 job (${id}) wherever it runs; it ends failed.`, ok: 'Kill 1 job' }),
            run: () => api.post(`/jobs/${encodeURIComponent(id)}/kill`), onDone: () => load() }),
          actionButton('Retry', { id: 'retry', out, run: () => api.post(`/jobs/${encodeURIComponent(id)}/retry`), onDone: () => load() })),
        h('div.grid.wide',
          h('div.card', kv([
            ['Table', j.table], ['Path', h('code', j.path || '')], ['Origin', JSON.stringify(j.origin)],
            ['Attempts', `${num(j.retry_budget.attempts ?? 0)} of ${num(j.retry_budget.max_retries)} retries`],
            ['Assignee', j.assignee || '–'], ['Lease until', ago(j.lease_until_ms)],
            ['Created', ago(j.created_at_ms)], ['Started', ago(j.started_at_ms)], ['Finished', ago(j.finished_at_ms)],
            ['Kill requested', j.kill_requested ? 'yes' : 'no'],
          ]))),
        h('h2', 'Payload'), jsonBlock(j.payload), h('h2', 'Result'), jsonBlock(j.result),
        h('h2', 'Errors'), j.errors.length ? jsonBlock(j.errors) : h('p.muted', 'none'));
    } catch (e) { fill(body, errorBox(e, 'This job')); }
  }
  await load();
}

registerPage({ key: 'jobs', title: 'Jobs', order: 70,
               render: (ctx) => (ctx.params.length ? detailPage(ctx) : listPage(ctx)) });
