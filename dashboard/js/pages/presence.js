// Presence: live users, sessions and views; a chart of the sampler's ring; heaviest users;
// the split per SSP. Polled at the sampler's own refresh.
import { api } from '../api.js';
import { lineChart } from '../charts.js';
import { h, fill } from '../dom.js';
import { num } from '../format.js';
import { ago, errorBox, poller, table } from '../ui.js';
import { registerPage } from './registry.js';

function render({ root }) {
  const status = h('p.muted', { role: 'status' });
  const err = h('div');
  const body = h('div', h('p.loading', 'Loading presence…'));
  fill(root, h('h1', 'Presence'), status, err, body);
  return poller(() => api.get('/presence'), (p) => p.refresh_secs, {
    onData: (p) => {
      fill(err, p.last_error ? errorBox(p.last_error, 'Last sample') : null);
      fill(status, 'sampled ', ago(p.sampled_at_ms), ` · every ${num(p.refresh_secs, 1)} s · ${num(p.rows_sampled)} rows`,
        p.truncated ? ` (truncated at ${num(p.max_rows)})` : '', p.sample_duration_ms ? ` · took ${num(p.sample_duration_ms, 1)} ms` : '');
      const pts = (k) => p.samples.map((x) => [x.at, x[k]]);
      fill(body,
        h('div.grid',
          h('div.card', h('div.stat', { dataset: { live: 'users' } }, num(p.live.users)), h('div.stat-label', 'live users')),
          h('div.card', h('div.stat', { dataset: { live: 'sessions' } }, num(p.live.sessions)), h('div.stat-label', 'sessions')),
          h('div.card', h('div.stat', { dataset: { live: 'views' } }, num(p.live.views)), h('div.stat-label', 'live views'))),
        h('h2', 'Over time'),
        h('div.card', lineChart([{ name: 'users', points: pts('users') }, { name: 'sessions', points: pts('sessions') },
                                 { name: 'views', points: pts('views') }], { title: 'presence samples', id: 'presence-ring', height: 200 })),
        h('div.grid.wide',
          h('section', h('h2', 'Heaviest users'), table([
            { label: 'User', cell: (u) => h('a', { href: `/admin/views?user=${encodeURIComponent(u.user || '')}` }, u.user || '–') },
            { label: 'Views', num: true, cell: (u) => num(u.views) },
            { label: 'Sessions', num: true, cell: (u) => num(u.sessions) },
            { label: 'Rows', num: true, cell: (u) => num(u.rows) },
          ], p.heaviest_users, { empty: 'Nobody is live.' })),
          h('section', h('h2', 'Per SSP'), table([
            { label: 'SSP', cell: ([id]) => (id === 'unplaced' ? h('span.muted', 'unplaced') : h('a', { href: `/admin/views?ssp=${encodeURIComponent(id)}` }, id)) },
            { label: 'Views', num: true, cell: ([, d]) => num(d.views) },
            { label: 'Users', num: true, cell: ([, d]) => num(d.users) },
            { label: 'Rows', num: true, cell: ([, d]) => num(d.rows) },
          ], Object.entries(p.per_ssp), { empty: 'No live view.' }))));
    },
    onError: (e) => fill(err, errorBox(e, 'Presence')),
  });
}

registerPage({ key: 'presence', title: 'Presence', order: 40, render });
