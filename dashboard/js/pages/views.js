// Views: the API's filters and sort (kept in the URL), slow and large marked; the detail of one
// view at /admin/views/<key> with its query, params, subscribers, percentiles, memory
// attribution and the other sessions running the identical query.
import { api } from '../api.js';
import { h, fill } from '../dom.js';
import { bytes, duration, ms, num } from '../format.js';
import { ago, badge, errorBox, jsonBlock, kv, poller, table } from '../ui.js';
import { registerPage } from './registry.js';

const FILTERS = [
  ['q', 'Search (query, key, user)', 'search'], ['user', 'User', 'text'], ['ssp', 'SSP', 'text'],
  ['slow_ms', 'Slower than (ms, p99)', 'number'], ['limit', 'Limit', 'number'],
];
const SORTS = [['recent', 'Recent activity'], ['rows', 'Rows'], ['subscribers', 'Subscribers'],
               ['slow', 'Slowest'], ['expiry', 'Expiring soonest'], ['user', 'User']];
const FLAGS = [['large', 'Large only'], ['shared', 'Shared only'], ['include_expired', 'Include expired']];

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
  fill(root, h('h1', 'Views'), form, status, err, list);

  const params = Object.fromEntries(query.entries());
  const stop = poller(() => api.get('/views', params), (b) => b.refresh_secs, {
    onData: (b) => {
      fill(err);
      fill(status, `${num(b.returned)} of ${num(b.total)} views · sampled `, ago(b.sampled_at_ms),
        ` · refreshed every ${num(b.refresh_secs, 1)} s`, b.truncated ? ' · the sample was truncated' : '',
        ` · slow ≥ ${num(b.thresholds.slow_ms)} ms, large ≥ ${num(b.thresholds.large_rows)} rows`);
      fill(list, table([
        { label: 'View', cell: (v) => h('a', { href: `/admin/views/${encodeURIComponent(v.key)}` }, v.key) },
        { label: 'User', cell: (v) => v.user || '–' },
        { label: 'SSP', cell: (v) => v.ssp_id || h('span.muted', 'unplaced') },
        { label: 'Rows', num: true, cell: (v) => num(v.rows) },
        { label: 'Subs', num: true, cell: (v) => num(v.subscribers) },
        { label: 'p50', num: true, cell: (v) => ms(v.materialisation.p50) },
        { label: 'p99', num: true, cell: (v) => ms(v.materialisation.p99) },
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

async function detailPage({ root, params, setTitle }) {
  const key = params.join('/');
  setTitle(`View ${key}`);
  const body = h('div', h('p.loading', 'Loading the view…'));
  const refresh = h('button', { type: 'button' }, 'Refresh');
  fill(root, h('p', h('a', { href: '/admin/views' }, '← All views')),
    h('div.row.between', h('h1', `View ${key}`), refresh), body);

  async function load() {
    try {
      const v = await api.get(`/views/${encodeURIComponent(key)}`);
      const m = v.materialisation;
      const mem = v.memory;
      fill(body,
        h('div.row', badge(v.state || 'unknown', v.state), v.slow ? badge('slow', 'warning') : null, v.large ? badge('large', 'info') : null),
        h('div.grid.wide',
          h('div.card', h('h3', 'View'), kv([
            ['Id', v.id], ['User', v.user], ['Client', v.client_id],
            ['SSP', v.ssp_id ? h('a', { href: `/admin/ssps#${v.ssp_id}` }, v.ssp_id) : 'unplaced'],
            ['Rows', num(v.rows)], ['Subscribers', num(v.subscribers)],
            ['Last active', ago(v.last_active_ms)], ['TTL', duration(v.ttl_ms)],
            ['Expires', v.expires_in_ms === null ? '–' : v.expires_in_ms > 0 ? `in ${duration(v.expires_in_ms)}` : 'expired'],
          ])),
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
          { label: 'View', cell: (o) => h('a', { href: `/admin/views/${encodeURIComponent(o.key)}` }, o.key) },
          { label: 'User', cell: (o) => o.user }, { label: 'Client', cell: (o) => o.client_id },
          { label: 'SSP', cell: (o) => o.ssp_id || '–' }, { label: 'Live', cell: (o) => (o.live ? 'yes' : 'no') },
        ], v.identical_sessions, { empty: 'No other session runs this query.' }));
    } catch (e) {
      fill(body, errorBox(e, 'This view'));
    }
  }
  refresh.addEventListener('click', load);
  await load();
}

registerPage({ key: 'views', title: 'Views', order: 30,
               render: (ctx) => (ctx.params.length ? detailPage(ctx) : listPage(ctx)) });
