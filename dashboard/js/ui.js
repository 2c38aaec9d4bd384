// Shared pieces of pages: badges, relative times, tables, errors, confirmations, write buttons,
// and the poller that never asks faster than the server's samplers refresh.
import { api, ApiError } from './api.js';
import { h, fill } from './dom.js';
import { relative, isoTime, stateClass } from './format.js';
import { session } from './session.js';

export function badge(text, state = text) {
  return h('span', { class: `badge ${stateClass(state)}` }, text ?? '–');
}

export function dot(state) {
  return h('span', { class: `dot ${stateClass(state)}`, 'aria-hidden': 'true' });
}

/** A relative time that keeps itself current (see startClock). */
export function ago(atMs) {
  if (!atMs) return h('span.muted', '–');
  return h('time', { datetime: new Date(atMs).toISOString(), title: isoTime(atMs), dataset: { at: String(atMs) } },
    relative(atMs));
}

export function startClock() {
  setInterval(() => {
    const now = Date.now();
    for (const el of document.querySelectorAll('time[data-at]')) {
      const t = relative(Number(el.dataset.at), now);
      if (el.textContent !== t) el.textContent = t;
    }
  }, 1000);
}

export function errorBox(err, where = '') {
  const text = err instanceof ApiError ? err.text : String((err && err.message) || err);
  return h('div.error', { role: 'alert' }, where ? `${where}: ${text}` : text);
}

/** A table: columns = [{label, cell(row) -> node|text, num?}]; rows may be empty. */
export function table(columns, rows, { empty = 'Nothing to show.', caption, rowAttrs } = {}) {
  if (!rows.length) return h('div.table-wrap', h('p.empty', empty));
  return h('div.table-wrap',
    h('table',
      caption ? h('caption.muted', { class: 'visually-hidden' }, caption) : null,
      h('thead', h('tr', columns.map((c) => h('th', { scope: 'col', class: c.num ? 'num' : '' }, c.label)))),
      h('tbody', rows.map((r) => h('tr', rowAttrs ? rowAttrs(r) : {},
        columns.map((c) => h('td', { class: c.num ? 'num' : '' }, c.cell(r))))))));
}

export function progress(p) {
  if (!p || !p.total) return null;
  const pct = Math.round((100 * p.done) / p.total);
  const bar = h('div.progress', { role: 'progressbar', 'aria-valuemin': '0', 'aria-valuemax': String(p.total),
                                  'aria-valuenow': String(p.done), 'aria-label': 'progress' },
    h('span'));
  bar.firstChild.style.width = `${pct}%`;
  return h('div.row', bar, h('span.mono', { dataset: { progress: `${p.done}/${p.total}` } },
    `${p.done}/${p.total}${p.current ? ` · ${p.current}` : p.done === p.total ? ' · done' : ''}`));
}

const dialog = () => document.getElementById('confirm');

/** Ask before a destructive action; the text states scope and count. Resolves true on OK. */
export function confirmAction({ title, body, ok }) {
  const d = dialog();
  fill(document.getElementById('confirm-title'), title);
  fill(document.getElementById('confirm-body'), body);
  fill(document.getElementById('confirm-ok'), ok);
  d.returnValue = '';
  return new Promise((resolve) => {
    d.addEventListener('close', () => resolve(d.returnValue === 'ok'), { once: true });
    d.showModal();
    document.getElementById('confirm-cancel').focus();
  });
}

/**
 * A button for a write action: disabled with the reason for a read-only session. `confirm`
 * (a function returning {title, body, ok}) makes it ask first. `run` does the request; its
 * answer or error is written into `out` (an element next to the button) by default.
 */
export function actionButton(label, { run, confirm, danger = false, out, id, onDone } = {}) {
  const why = session.writeBlocked;
  const btn = h('button', { type: 'button', class: danger ? 'danger' : '', disabled: !!why, title: why || '',
                            'aria-disabled': why ? 'true' : null, dataset: { action: id || label } }, label);
  btn.addEventListener('click', async () => {
    if (confirm && !(await confirmAction(confirm()))) return;
    btn.disabled = true;
    try {
      const res = await run();
      // an operation's id (routes answer the operation itself, or {operation, ...}) links to its page
      const op = res && (res.operation && res.operation.id ? res.operation.id : res.id);
      if (out) {
        fill(out, h('span.badge.s-ok', 'accepted'), ' ',
          op ? h('a', { href: `/admin/operations/${encodeURIComponent(op)}`, dataset: { operation: op } }, `operation ${op}`) : '',
          res && res.backup_id ? ` · backup ${res.backup_id}` : '');
      }
      onDone && onDone(res);
    } catch (e) {
      if (out) fill(out, errorBox(e)); else alert(e.message);
    } finally {
      btn.disabled = !!session.writeBlocked;
    }
  });
  return btn;
}

/** The reason write controls on this page are disabled, shown once near them. */
export function readOnlyNote() {
  const why = session.writeBlocked;
  return why ? h('p.why', { role: 'note', dataset: { readonly: '1' } }, why) : null;
}

/**
 * Poll `fn` (async, returns the body) every `period(body)` seconds (at least 1 s; the pages
 * pass the server's refresh_secs, so never faster than the samplers). Pauses while the tab is
 * hidden; errors back off to 15 s and are reported through onError. Returns stop().
 */
export function poller(fn, period, { onError, onData } = {}) {
  let stopped = false;
  let timer = null;
  let failures = 0;
  async function tick() {
    if (stopped) return;
    if (document.hidden) { document.addEventListener('visibilitychange', tick, { once: true }); return; }
    let wait;
    try {
      const body = await fn();
      failures = 0;
      onData && onData(body);
      wait = Math.max(1, Number(period(body)) || 5);
    } catch (e) {
      failures += 1;
      onError && onError(e);
      wait = Math.min(15, 2 ** failures);
    }
    if (!stopped) timer = setTimeout(tick, wait * 1000);
  }
  tick();
  return () => { stopped = true; clearTimeout(timer); };
}

export function section(title, ...children) {
  return h('section', h('h2', title), ...children);
}

export function kv(pairs) {
  return h('dl.kv', pairs.filter(Boolean).flatMap(([k, v]) => [h('dt', k), h('dd', v ?? '–')]));
}

export function link(href, text) {
  return h('a', { href }, text);
}

export function jsonBlock(v) {
  return h('pre', JSON.stringify(v, null, 2));
}

export { api };
