// Backups: object storage status, "back up now", the catalog with a restore button per backup,
// the local registry, and the restores with their stage shown live (queued -> running ->
// main_db -> replica -> done, or failed at a stage). A failed restore that holds the scheduler
// in Restoring shows a banner with the way out (a new restore, or the release).
import { api } from '../api.js';
import { h, fill } from '../dom.js';
import { bytes, num } from '../format.js';
import { live } from '../live.js';
import { actionButton, ago, badge, errorBox, kv, poller, readOnlyNote, section, table } from '../ui.js';
import { registerPage } from './registry.js';

const STAGES = ['queued', 'running', 'main_db', 'replica', 'done'];
const STAGE_TEXT = {
  queued: 'queued', running: 'download and check', main_db: 'database wiped and re-imported',
  replica: 'replica re-cloned, SSPs re-bootstrap', done: 'done',
};

/** The stage pipeline of one restore: each step done, current, failed or to come. */
function stages(r) {
  const failedAt = r.stage === 'failed' ? (r.failed_stage || 'queued') : null;
  const at = failedAt || r.stage;
  const idx = STAGES.indexOf(at);
  return h('ol.stages', { dataset: { restoreStage: r.stage, restore: r.restore_id }, 'aria-label': 'restore stages' },
    STAGES.map((s, i) => {
      let state = 'todo';
      if (failedAt && s === failedAt) state = 'failed';
      else if (i < idx || r.stage === 'done') state = 'done';
      else if (i === idx) state = 'current';
      return h('li', { class: `stage ${state}`, dataset: { stage: s, state }, title: STAGE_TEXT[s] },
        badge(s, state === 'current' ? 'running' : state === 'todo' ? 'idle' : state));
    }));
}

function step(p) {
  if (!p) return null;
  const parts = [p.step];
  if (p.rows_total) parts.push(`${num(p.rows_done)}/${num(p.rows_total)} rows`);
  else if (p.rows) parts.push(`${num(p.rows)} rows`);
  if (p.bytes) parts.push(bytes(p.bytes));
  if (p.table) parts.push(p.table);
  return h('div.why.mono', parts.filter(Boolean).join(' · '));
}

function render({ root }) {
  const err = h('div');
  const out = h('div', { role: 'status', 'aria-live': 'polite' });
  const held = h('div');
  const storage = h('div');
  const catalog = h('div', h('p.loading', 'Loading backups…'));
  const restores = h('div');
  const local = h('div');
  const name = h('input', { type: 'text', placeholder: 'name (optional)', maxlength: '200',
                            'aria-label': 'Backup name', id: 'backup-name' });
  let busy = false;
  let stop = null;

  const create = actionButton('Back up now', { id: 'backup-create', out,
    run: () => api.post('/backups', name.value.trim() ? { name: name.value.trim() } : {}),
    onDone: () => refresh() });

  fill(root, h('h1', 'Backups'), readOnlyNote(), err, held, out,
    section('Object storage', storage, h('div.row', name, create)),
    section('Restores', h('p.muted', 'Stages: queued → running (download, check) → main_db (database wiped and re-imported) → replica (replica re-cloned, every SSP re-bootstraps) → done.'), restores),
    section('Catalog', catalog),
    section('This scheduler’s backups', local));

  function draw(b) {
    fill(err);
    busy = (b.restores || []).some((r) => !['done', 'failed'].includes(r.stage))
      || (b.local || []).some((x) => ['queued', 'running'].includes(x.status));
    const s = b.storage || {};
    fill(storage, kv([
      ['Configured', s.configured ? badge('yes', 'ok') : badge('no (OBJSTORE_*)', 'unknown')],
      ['Endpoint', s.endpoint], ['Bucket', s.bucket], ['Prefix', s.prefix],
      ['Reachable', s.reachable === null || s.reachable === undefined ? '–'
        : badge(s.reachable ? 'reachable' : 'unreachable', s.reachable ? 'ok' : 'failed')],
      s.error ? ['Error', s.error] : null,
      ['Scheduled backups', b.linked ? 'on the hosted platform' : 'not linked to the hosted platform'],
    ]));
    create.disabled = create.disabled || !s.configured;
    fill(held, b.held ? h('div.error', { role: 'alert', dataset: { held: b.held.restore_id } },
      h('strong', 'The scheduler is Restoring: '),
      `restore ${b.held.restore_id} of ${b.held.backup_id} stopped at ${b.held.failed_stage}`,
      b.held.error ? ` (${b.held.error})` : '',
      '. Ingest and reclone answer 503 until a new restore succeeds or the database is accepted as it is.',
      h('div.row', actionButton('Accept the database as it is', { id: 'restore-release', danger: true, out,
        confirm: () => ({ title: 'Leave Restoring with the database as it is?',
          body: 'The replica is re-cloned from the database as it stands now (possibly half-restored) and every SSP re-bootstraps.',
          ok: 'Re-clone and leave Restoring' }),
        run: () => api.post('/restore/release', {}), onDone: () => refresh() }))) : null);
    fill(restores, table([
      { label: 'Restore', cell: (r) => [h('strong', r.restore_id), h('div.why', `of ${r.backup_id}`)] },
      { label: 'Stage', cell: (r) => [stages(r), step(r.progress)] },
      { label: 'Started', cell: (r) => ago(r.started_at_ms) },
      { label: 'Finished', cell: (r) => ago(r.finished_at_ms) },
      { label: 'Error / warnings', cell: (r) => [r.error ? h('div.why', r.error) : null,
        ...(r.warnings || []).map((w) => h('div.why', w))] },
    ], b.restores || [], { empty: 'No restore yet.', rowAttrs: (r) => ({ dataset: { restoreRow: r.restore_id, stage: r.stage } }) }));
    if (b.catalog_error) fill(catalog, errorBox(b.catalog_error, 'Catalog'));
    else if (!b.catalog) fill(catalog, h('p.empty', 'No object storage is configured: there is no catalog.'));
    else {
      fill(catalog, table([
        { label: 'Backup', cell: (e) => [h('strong', e.name || e.backup_id), h('div.why.mono', e.backup_id)] },
        { label: 'Made', cell: (e) => ago(e.created_at_ms) },
        { label: 'Rows', num: true, cell: (e) => num(e.rows) },
        { label: 'Size', num: true, cell: (e) => bytes(e.bytes) },
        { label: 'Deleted', cell: (e) => (e.deleted_at_ms ? ago(e.deleted_at_ms) : '–') },
        { label: 'Actions', cell: (e) => actionButton('Restore', { id: `restore:${e.backup_id}`, danger: true, out,
          confirm: () => ({ title: `Restore ${e.name || e.backup_id}?`,
            body: `The main database is wiped and replaced by this backup (${num(e.rows)} rows); the replica is re-cloned and every SSP (${live.overview ? live.overview.ssps.length : '?'}) re-bootstraps. Writes made since the backup are lost.`,
            ok: 'Wipe and restore' }),
          run: () => api.post(`/backups/${encodeURIComponent(e.backup_id)}/restore`, {}),
          onDone: () => refresh() }) },
      ], b.catalog, { empty: 'No backup in the catalog yet.', rowAttrs: (e) => ({ dataset: { backup: e.backup_id } }) }));
    }
    fill(local, table([
      { label: 'Backup', cell: (x) => [h('strong', x.name), h('div.why.mono', x.backup_id)] },
      { label: 'Status', cell: (x) => [badge(x.status, x.status), step(x.progress)] },
      { label: 'Made', cell: (x) => ago(x.created_at_ms) },
      { label: 'Rows', num: true, cell: (x) => num(x.rows) },
      { label: 'Size', num: true, cell: (x) => bytes(x.bytes) },
      { label: 'Error', cell: (x) => x.error || '–' },
    ], b.local || [], { empty: 'No backup made by this scheduler.', rowAttrs: (x) => ({ dataset: { localBackup: x.backup_id, status: x.status } }) }));
  }

  function refresh() {
    if (stop) stop();
    // Every second while a backup or a restore runs (the stage moves), else the samplers' pace.
    stop = poller(() => api.get('/backups'), () => (busy ? 1 : live.refreshSecs()), {
      onData: draw, onError: (e) => fill(err, errorBox(e, 'Backups')) });
  }
  refresh();
  const off = live.on('operations', (ops) => {
    if (!busy && (ops || []).some((o) => ['backup', 'restore', 'restore_release'].includes(o.kind) && o.status === 'running')) refresh();
  });
  return () => { if (stop) stop(); off(); };
}

registerPage({ key: 'backups', title: 'Backups', order: 85, render });
