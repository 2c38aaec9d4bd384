// Machine pools: each pool's status, sizing, pause and breaker state, machines by state, busy
// slots and jobs waiting, with pause / resume; one pool's machines (newest first, terminal ones
// included) with drain.
import { api } from '../api.js';
import { h, fill } from '../dom.js';
import { num } from '../format.js';
import { live } from '../live.js';
import { actionButton, ago, badge, errorBox, kv, poller, readOnlyNote, table } from '../ui.js';
import { registerPage } from './registry.js';

const seg = (v) => encodeURIComponent(v);

function machineCounts(byState) {
  const entries = Object.entries(byState || {});
  if (!entries.length) return h('span.muted', 'none');
  return entries.map(([state, n]) => h('span', { dataset: { machines: state } }, badge(`${n} ${state}`, state), ' '));
}

function breakerBadge(b) {
  const state = b.state === 'closed' ? 'ok' : b.state === 'open' ? 'failed' : 'pending';
  return badge(`breaker ${b.state}`, state);
}

function pauseButton(p, refresh, out) {
  return p.paused
    ? actionButton('Resume', { id: 'resume', out, onDone: refresh,
                               run: () => api.post(`/pools/${seg(p.name)}/resume`) })
    : actionButton('Pause', {
      id: 'pause', out, onDone: refresh,
      run: () => api.post(`/pools/${seg(p.name)}/pause`),
      confirm: () => ({ title: `Pause pool ${p.name}?`,
                        body: 'No job is handed out and no machine is booted until it is resumed; '
                              + `the ${p.busy_slots} running jobs finish. Kept across scheduler restarts.`,
                        ok: 'Pause' }) });
}

function listPage({ root }) {
  const err = h('div');
  const body = h('div', h('p.loading', 'Loading pools…'));
  fill(root, h('h1', 'Machine pools'), readOnlyNote(), err, body);
  let stop = null;
  const load = () => api.get('/pools');
  const draw = (b) => {
    fill(err);
    fill(body, table([
      { label: 'Pool', cell: (p) => h('a', { href: `/admin/pools/${seg(p.name)}` }, p.name) },
      { label: 'Status', cell: (p) => badge(p.status, p.status) },
      { label: 'Paused', cell: (p) => (p.paused ? badge('paused', 'pending') : '–') },
      { label: 'Breaker', cell: (p) => [breakerBadge(p.breaker),
        p.breaker.incident_id ? [' ', h('a', { href: `/admin/incidents/${seg(p.breaker.incident_id)}` }, 'incident')] : null] },
      { label: 'Machines', cell: (p) => machineCounts(p.machines) },
      { label: 'Busy slots', num: true, cell: (p) => h('span', { dataset: { busy: String(p.busy_slots) } }, `${num(p.busy_slots)} / ${num(p.total_slots)}`) },
      { label: 'Jobs waiting', num: true, cell: (p) => h('span', { dataset: { waiting: String(p.jobs_waiting) } }, num(p.jobs_waiting)) },
      { label: 'Sizing', cell: (p) => `${p.sizing.provider}: ${p.sizing.min_machines}–${p.sizing.max_machines} × ${p.sizing.slots} slots` },
      { label: '', cell: (p) => { const out = h('span'); return [pauseButton(p, refresh, out), ' ', out]; } },
    ], b.pools, { empty: 'No machine pool is configured (SVC_POOLS, or a backend with run_on).',
                  rowAttrs: (p) => ({ dataset: { pool: p.name, status: p.status, paused: String(p.paused) } }) }));
  };
  // An error before the first answer must not leave "Loading" on screen for ever.
  const onError = (e) => { fill(err, errorBox(e, 'Pools')); if (body.querySelector('p.loading')) fill(body); };
  function refresh() { load().then(draw, onError); }
  stop = poller(load, () => live.refreshSecs(), { onData: draw, onError });
  return () => stop && stop();
}

function detailPage({ root, params, setTitle }) {
  const name = params.join('/');
  setTitle(`Pool ${name}`);
  const err = h('div');
  const head = h('div');
  const body = h('div', h('p.loading', 'Loading…'));
  fill(root, h('p', h('a', { href: '/admin/pools' }, '← All pools')), h('h1', `Pool ${name}`),
       readOnlyNote(), err, head, body);
  const load = () => Promise.all([api.get('/pools'), api.get(`/pools/${seg(name)}/machines`)]);
  const draw = ([all, m]) => {
    fill(err);
    const p = all.pools.find((x) => x.name === name);
    if (p) {
      const out = h('span');
      fill(head, h('div.row', badge(p.status, p.status), ' ', breakerBadge(p.breaker), ' ',
                   p.paused ? badge('paused', 'pending') : null, ' ', pauseButton(p, refresh, out), ' ', out),
        h('div.card', kv([
          ['Provider', p.sizing.provider], ['Machines', `${p.sizing.min_machines}–${p.sizing.max_machines}`],
          ['Slots per machine', num(p.sizing.slots)], ['Tables', (p.sizing.tables || []).join(', ') || '–'],
          ['Busy slots', `${num(p.busy_slots)} / ${num(p.total_slots)}`], ['Jobs waiting', num(p.jobs_waiting)],
          ['Breaker', [breakerBadge(p.breaker), p.breaker.last_error ? ` · ${p.breaker.last_error}` : '']],
          ['Last sweep error', p.last_sweep_error || '–'],
        ])));
    }
    fill(body, h('h2', 'Machines'), table([
      { label: 'Machine', cell: (x) => h('span.mono', x.id) },
      { label: 'State', cell: (x) => badge(x.state, x.state === 'lost' ? 'failed' : x.state === 'destroyed' ? 'idle' : x.state) },
      { label: 'Slots in use', num: true, cell: (x) => `${num(x.slots_in_use)} / ${num(x.slots)}` },
      { label: 'Created', cell: (x) => ago(x.created_at) },
      { label: 'Last contact', cell: (x) => ago(x.last_contact_at) },
      { label: 'Removed', cell: (x) => (x.removed_at ? [ago(x.removed_at), h('div.why', x.removal_reason || '')] : '–') },
      { label: '', cell: (x) => {
        if (!['booting', 'ready'].includes(x.state)) return x.state === 'draining' ? h('span.muted', x.drain_reason || 'draining') : '';
        const out = h('span');
        return [actionButton('Drain', {
          id: 'drain', danger: true, out, onDone: refresh,
          run: () => api.post(`/machines/${seg(x.id)}/drain`),
          confirm: () => ({ title: `Drain machine ${x.id}?`,
                            body: `It takes no new job, finishes its ${x.slots_in_use} running jobs, then is destroyed.`,
                            ok: 'Drain' }) }), ' ', out];
      } },
    ], m.machines, { empty: 'No machine yet.', rowAttrs: (x) => ({ dataset: { machine: x.id, state: x.state } }) }));
  };
  const onError = (e) => fill(err, errorBox(e, `Pool ${name}`));
  function refresh() { load().then(draw, onError); }
  const stop = poller(load, () => Math.min(2, live.refreshSecs()), { onData: draw, onError });
  return stop;
}

registerPage({ key: 'pools', title: 'Pools', order: 75,
               render: (ctx) => (ctx.params.length ? detailPage(ctx) : listPage(ctx)) });
