// Views: the API's filters and sort (kept in the URL), slow, large and stale marked, each with
// its freshness (time since its last publication, events behind the feed); the detail of one
// view at /admin/views/<key>, kept live, with its query, params, subscribers, percentiles,
// freshness, memory attribution, the other sessions running the identical query, and its
// unregistration (asks first).
import { api } from '../api.js';
import { h, fill } from '../dom.js';
import { bytes, duration, ms, num } from '../format.js';
import { live } from '../live.js';
import { actionButton, ago, badge, errorBox, jsonBlock, kv, poller, readOnlyNote, table } from '../ui.js';
import { registerPage } from './registry.js';

const FILTERS = [
  ['q', 'Search (query, key, user)', 'search'], ['user', 'User', 'text'], ['ssp', 'SSP', 'text'],
  ['slow_ms', 'Slower than (ms, p99)', 'number'], ['limit', 'Limit', 'number'],
];
const SORTS = [['recent', 'Recent activity'], ['rows', 'Rows'], ['subscribers', 'Subscribers'],
               ['slow', 'Slowest'], ['stale', 'Least fresh (stale, slow, behind)'], ['expiry', 'Expiring soonest'],
               ['user', 'User']];
const FLAGS = [['large', 'Large only'], ['shared', 'Shared only'], ['include_expired', 'Include expired']];

/** Freshness as people read it: since the last publication, and the lag behind the feed. */
function freshnessCell(f) {
  if (!f) return '–';
  const lag = f.lag_events === null ? 'lag unknown' : `${num(f.lag_events)} event${f.lag_events === 1 ? '' : 's'} behind`;
  return h('span', { dataset: { fresh: f.stale ? 'stale' : 'fresh', lag: f.lag_events === null ? '' : String(f.lag_events) } },
    f.stale ? [badge(f.served ? 'stale' : 'not served', 'warning'), ' '] : null,
    f.last_publish_at_ms ? ['published ', ago(f.last_publish_at_ms)] : h('span.muted', 'not published yet'),
    h('div.why', lag));
}

function listPage({ root, query, navigate }) {
  const form = h('form.filters', { role: 'search', 'aria-label': 'Filter views' },
    FILTERS.map(([name, label, type]) => h('label', label,
      h('input', { name, type, value: query.get(name) || '', min: type === 'number' ? '0' : null, size: type === 'number' ? 6 : 16 }))),
    h('label', 'Sort', h('select', { name: 'sort' },
      SORTS.map(([v, l]) => h('option', { value: v, selected: (query.get('sort') || 'recent') === v }, l)))),
    FLAGS.map(([name, label]) => h('label.check', h('input', { type: 'checkbox', name, checked: query.get(name) === 'true' }), label)),
    h('button', { type: 'submit' }, 'Apply'));
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const q = new URLSearchParams();
    for (const [k, v] of new FormData(form).entries()) if (v !== '') q.set(k, v === 'on' ? 'true' : v);
    navigate(`/admin/views${q.toString() ? `?${q}` : ''}`);
  });
  const status = h('p.muted', { role: 'status' });
  const err = h('div');
  const list = h('div', h('p.loading', 'Loading views…'));
  const gone = query.get('unregistered');
  fill(root, h('h1', 'Views'),
    gone ? h('p', { role: 'status', dataset: { unregistered: gone } }, badge('unregistered', 'done'), ` View query:${gone} was unregistered.`) : null,
    form, status, err, list);

  const params = Object.fromEntries(query.entries());
  delete params.unregistered;
  const stop = poller(() => api.get('/views', params), (b) => b.refresh_secs, {
    onData: (b) => {
      fill(err);
      fill(status, `${num(b.returned)} of ${num(b.total)} views · sampled `, ago(b.sampled_at_ms),
        ` · refreshed every ${num(b.refresh_secs, 1)} s`, b.truncated ? ' · the sample was truncated' : '',
        ` · slow ≥ ${num(b.thresholds.slow_ms)} ms, large ≥ ${num(b.thresholds.large_rows)} rows`);
      fill(list, table([
        { label: 'View', cell: (v) => h('a', { href: `/admin/views/${encodeURIComponent(v.key)}` }, v.id) },
        { label: 'User', cell: (v) => v.user || '–' },
        { label: 'SSP', cell: (v) => (v.ssp_id ? h('a', { href: `/admin/ssps/${encodeURIComponent(v.ssp_id)}` }, v.ssp_id) : h('span.muted', 'unplaced')) },
        { label: 'Rows', num: true, cell: (v) => num(v.rows) },
        { label: 'Subs', num: true, cell: (v) => num(v.subscribers) },
        { label: 'p50', num: true, cell: (v) => ms(v.materialisation.p50) },
        { label: 'p99', num: true, cell: (v) => ms(v.materialisation.p99) },
        { label: 'Freshness', cell: (v) => freshnessCell(v.freshness) },
        { label: 'Expires', cell: (v) => (v.expired ? badge('expired', 'idle') : `in ${duration(v.expires_in_ms)}`) },
        { label: 'Marks', cell: (v) => [v.slow ? badge('slow', 'warning') : null, ' ', v.large ? badge('large', 'info') : null,
                                         ' ', v.identical_sessions > 0 ? badge(`shared ×${v.identical_sessions + 1}`, 'idle') : null] },
        { label: 'Query', cell: (v) => h('code', v.query) },
      ], b.views, { empty: 'No view matches.', rowAttrs: (v) => ({ dataset: { view: v.key } }) }));
    },
    onError: (e) => fill(err, errorBox(e, 'Views')),
  });
  return stop;
}

function detailPage({ root, params, setTitle, navigate }) {
  const key = params.join('/');
  const viewId = `query:${key}`;
  setTitle(`View ${viewId}`);
  const body = h('div', h('p.loading', 'Loading the view…'));
  const status = h('span.muted', { role: 'status', id: 'view-updated' });
  const out = h('div', { role: 'status', 'aria-live': 'polite' });
  const unregister = actionButton('Unregister', { id: 'unregister', danger: true, out,
    confirm: () => ({ title: `Unregister view ${viewId}?`,
      body: `Deletes the registration of 1 view (${viewId}): its SSP drops it and its subscribers stop receiving updates. A client still running it registers it again.`,
      ok: 'Unregister 1 view' }),
    run: () => api.del(`/views/${encodeURIComponent(key)}`),
    onDone: () => navigate(`/admin/views?unregistered=${encodeURIComponent(key)}`) });
  fill(root, h('p', h('a', { href: '/admin/views' }, '← All views')),
    h('div.row.between', h('h1', `View ${viewId}`), h('div.row', status, unregister)), readOnlyNote(), out, body);

  function draw(v) {
    const m = v.materialisation;
    const mem = v.memory;
    const f = v.freshness;
    fill(status, 'live · updated ', ago(Date.now()));
    fill(body,
      h('div.row', badge(v.state || 'unknown', v.state), v.slow ? badge('slow', 'warning') : null, v.large ? badge('large', 'info') : null,
        f && f.stale ? badge('stale', 'warning') : null),
      h('div.grid.wide',
        h('div.card', h('h3', 'View'), kv([
          ['Id', v.id], ['User', v.user], ['Client', v.client_id],
          ['SSP', v.ssp_id ? h('a', { href: `/admin/ssps/${encodeURIComponent(v.ssp_id)}` }, v.ssp_id) : 'unplaced'],
          ['Rows', h('span', { dataset: { figure: 'rows' } }, num(v.rows))], ['Subscribers', num(v.subscribers)],
          ['Last active', ago(v.last_active_ms)], ['TTL', duration(v.ttl_ms)],
          ['Expires', v.expires_in_ms === null ? '–' : v.expires_in_ms > 0 ? `in ${duration(v.expires_in_ms)}` : 'expired'],
        ])),
        h('div.card', { dataset: { card: 'freshness' } }, h('h3', 'Freshness'), f ? kv([
          ['Last publication', f.last_publish_at_ms ? ago(f.last_publish_at_ms) : 'not published yet'],
          ['Behind the feed', h('span', { dataset: { figure: 'lag' } }, f.lag_events === null ? 'unknown (no report from its SSP yet)' : `${num(f.lag_events)} events`)],
          ['SSP state', f.ssp_state || 'unplaced'],
          ['Served', f.served ? 'yes' : 'no'],
        ]) : h('p.muted', 'unknown')),
        h('div.card', h('h3', 'Materialisation'), kv([
          ['p50', ms(m.p50)], ['p99', ms(m.p99)], ['max', ms(m.max)], ['samples', num(m.samples)],
          ['initial', ms(m.initial_ms)], ['updates', num(m.updates)], ['edge operations', num(m.edge_ops)],
          ['last publish', ago(m.last_publish_at_ms)],
        ])),
        h('div.card', h('h3', 'Memory on its SSP'), mem ? kv([
          ['SSP', mem.ssp_id], ['reachable', mem.reachable ? 'yes' : 'no'], ['members', num(mem.members)],
          ['estimated', bytes(mem.estimated_bytes)], ['SSP rows', num(mem.ssp_rows)],
          ['SSP row bytes', bytes(mem.ssp_row_bytes)], ['SSP views', num(mem.ssp_views)],
          mem.error ? ['error', mem.error] : null,
        ]) : h('p.muted', 'Not placed on an SSP.'))),
      h('h2', 'Query'), h('pre', { dataset: { query: '1' } }, v.query || ''),
      h('h2', 'Params'), jsonBlock(v.params),
      h('h2', 'Identical sessions'),
      table([
        { label: 'View', cell: (o) => h('a', { href: `/admin/views/${encodeURIComponent(o.key)}` }, `query:${o.key}`) },
        { label: 'User', cell: (o) => o.user }, { label: 'Client', cell: (o) => o.client_id },
        { label: 'SSP', cell: (o) => o.ssp_id || '–' }, { label: 'Live', cell: (o) => (o.live ? 'yes' : 'no') },
      ], v.identical_sessions, { empty: 'No other session runs this query.' }));
  }
  // live: polled at the presence sampler's cadence (the metrics the SSPs flush move no faster)
  return poller(() => api.get(`/views/${encodeURIComponent(key)}`), () => live.refreshSecs(), {
    onData: draw,
    onError: (e) => fill(body, errorBox(e, 'This view')),
  });
}

registerPage({ key: 'views', title: 'Views', order: 30,
               render: (ctx) => (ctx.params.length ? detailPage(ctx) : listPage(ctx)) });
