// Logs: live lines of the scheduler or of one SSP (SSE), a visible gap marker when the stream
// fell behind (the server's `gap` event) or the connection dropped, pause/resume (resumes after
// the last line seen: Last-Event-ID), backfill (how many earlier lines to load), a level
// filter (that level and above), a text search, and a download of what the filter shows.
import { h, fill } from '../dom.js';
import { isoTime } from '../format.js';
import { live } from '../live.js';
import { openStream } from '../sse.js';
import { badge, errorBox } from '../ui.js';
import { registerPage } from './registry.js';

const MAX_LINES = 3000;
const LEVELS = ['debug', 'info', 'warning', 'error', 'critical'];
const rank = (lvl) => { const i = LEVELS.indexOf(String(lvl || '').toLowerCase()); return i < 0 ? 1 : i; };

function render({ root, query, navigate }) {
  const source = query.get('source') || 'scheduler';
  const backfill = Math.min(10000, Math.max(0, Number(query.get('backfill') || 200)));
  const ssps = live.overview ? live.overview.ssps.map((s) => s.id) : [];
  if (!live.overview) { // a deep link: the SSP list arrives with the first overview
    const off = live.on('overview', (ov) => {
      off();
      for (const sp of ov.ssps) if (![...sel.options].some((o) => o.value === `ssp:${sp.id}`)) sel.append(h('option', { value: `ssp:${sp.id}` }, `SSP ${sp.id}`));
    });
  }
  const sel = h('select', { name: 'source', id: 'log-source' },
    [['scheduler', 'scheduler'], ...ssps.map((id) => [`ssp:${id}`, `SSP ${id}`])]
      .concat(source !== 'scheduler' && !ssps.includes(source.slice(4)) ? [[source, source]] : [])
      .map(([v, l]) => h('option', { value: v, selected: v === source }, l)));
  const bf = h('input', { type: 'number', name: 'backfill', min: '0', max: '10000', value: String(backfill), size: 6 });
  const form = h('form.filters', { 'aria-label': 'Log source' },
    h('label', 'Source', sel), h('label', 'Backfill (lines)', bf), h('button', { type: 'submit' }, 'Load'));
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    navigate(`/admin/logs?source=${encodeURIComponent(sel.value)}&backfill=${encodeURIComponent(bf.value || '0')}`);
  });
  let minLevel = LEVELS.includes(query.get('level')) ? query.get('level') : 'debug';
  let needle = (query.get('q') || '').toLowerCase();
  const levelSel = h('select', { id: 'log-level', name: 'level' },
    LEVELS.map((l) => h('option', { value: l, selected: l === minLevel }, l === 'debug' ? 'all levels' : `${l} and above`)));
  const search = h('input', { type: 'search', id: 'log-search', name: 'q', value: query.get('q') || '', placeholder: 'text in the line', size: 20 });
  const shown = h('span.muted', { id: 'log-shown' });
  const download = h('button', { type: 'button', id: 'log-download' }, 'Download shown lines');
  const filterBar = h('div.filters', { role: 'search', 'aria-label': 'Filter log lines' },
    h('label', 'Level', levelSel), h('label', 'Search', search), download, shown);
  const pauseBtn = h('button', { type: 'button', id: 'log-pause', 'aria-pressed': 'false' }, 'Pause');
  const state = h('span', { role: 'status', id: 'log-state' });
  const count = h('span.muted');
  const gapCount = h('span', { id: 'log-gaps' });
  const box = h('div.logbox', { role: 'log', 'aria-live': 'off', 'aria-label': `log lines of ${source}`, tabindex: '0' });
  const err = h('div');
  fill(root, h('h1', 'Logs'), form, filterBar, h('div.row', pauseBtn, state, count, gapCount), err, box);

  const matches = (el) => rank(el.dataset.level) >= rank(minLevel)
    && (!needle || el.textContent.toLowerCase().includes(needle));
  let shownCount = 0;
  function refilter() {
    shownCount = 0;
    for (const el of box.querySelectorAll(':scope > .logline')) {
      el.hidden = !matches(el);
      if (!el.hidden) shownCount += 1;
    }
    showCount();
  }
  function showCount() {
    const filtering = minLevel !== 'debug' || needle;
    shown.textContent = filtering ? `${shownCount} of ${box.querySelectorAll(':scope > .logline').length} lines match` : '';
    shown.dataset.shown = String(shownCount);
  }
  levelSel.addEventListener('change', () => { minLevel = levelSel.value; refilter(); });
  search.addEventListener('input', () => { needle = search.value.trim().toLowerCase(); refilter(); });
  download.addEventListener('click', () => {
    // what the filter shows, as plain text lines (gap markers included, where they fell)
    const text = [...box.children].filter((el) => !el.hidden).map((el) => el.textContent).join('\n');
    const url = URL.createObjectURL(new Blob([`${text}\n`], { type: 'text/plain' }));
    const stamp = new Date().toISOString().replace(/[:.]/g, '-');
    const a = h('a', { href: url, download: `${source.replace(':', '-')}-${stamp}.log` });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
  });

  let stream = null;
  let paused = false;
  let lines = 0;
  let lastId = null;

  function stick() { return box.scrollTop + box.clientHeight >= box.scrollHeight - 30; }
  function add(node) {
    const atBottom = stick();
    if (node.classList.contains('logline')) {
      node.hidden = !matches(node);
      if (!node.hidden) shownCount += 1;
    }
    box.append(node);
    // Trim the oldest lines, never a gap marker: it stays above the lines that came after it.
    while (box.childElementCount > MAX_LINES) {
      const oldest = box.querySelector(':scope > .logline');
      if (!oldest) break;
      if (!oldest.hidden) shownCount -= 1;
      oldest.remove();
    }
    showCount();
    if (atBottom) box.scrollTop = box.scrollHeight;
  }
  let gaps = 0;
  function gap(text) {
    gaps += 1;
    fill(gapCount, badge(`${gaps} gap${gaps > 1 ? 's' : ''}`, 'warning'));
    gapCount.title = text;
    add(h('div.loggap', { role: 'note', dataset: { gap: '1' } }, `⚠ ${new Date().toLocaleTimeString()}: ${text}`));
  }

  function line(data) {
    lines += 1;
    count.textContent = `${lines} lines`;
    if (typeof data === 'object' && data) {
      return h('div.logline', { dataset: { level: String(data.level || '').toLowerCase() } }, h('span.ts', isoTime(data.at)), ' ', h('span', { class: `lvl-${data.level}` }, (data.level || '').toUpperCase()),
        ' ', h('span.muted', data.logger || ''), ' ', data.message);
    }
    return h('div.logline', { dataset: { level: 'info' } }, String(data));
  }

  // One stream at a time. `after` (the last line shown) resumes after it with Last-Event-ID:
  // the server sends a gap event first when lines logged meanwhile already left its buffer.
  function open(after) {
    stream = openStream('/logs', { source, backfill, tail: 'true' }, {
      resume: true,
      lastEventId: after,
      onEvent: (name, data, id) => {
        if (name === 'gap') gap((data && data.message) || 'lines were dropped before this viewer read them');
        else if (name === 'reconnected') gap(`connection lost for ${Math.round(data.down_ms / 1000)} s; resumed after the last line seen`);
        else if (name === 'error') add(h('div.loggap', `stream error: ${(data && data.message) || data}`));
        else { if (id !== null) lastId = id; add(line(data)); }
      },
      onState: (st, extra) => {
        fill(state, badge(st, st), extra && extra.message ? h('span.why', ` ${extra.message}`) : null);
        if (st === 'error') fill(err, errorBox((extra && extra.message) || 'the log stream was refused'));
      },
    });
  }

  pauseBtn.addEventListener('click', () => {
    paused = !paused;
    pauseBtn.setAttribute('aria-pressed', String(paused));
    pauseBtn.textContent = paused ? 'Resume' : 'Pause';
    if (paused) {
      stream.close();
      stream = null;
      fill(state, badge('paused', 'idle'));
    } else {
      open(lastId);
    }
  });

  open(null);
  return () => { if (stream) stream.close(); };
}

registerPage({ key: 'logs', title: 'Logs', order: 60, render });
