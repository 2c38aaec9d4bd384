// What every page shares while signed in: the overview (polled at the presence sampler's
// refresh, never faster), the operations stream (SSE, the whole list on each change), the
// connection state, and the histories for the charts (throughput, lag): seeded from the
// scheduler's own ring (GET /history, a sample every 10 s for the last hour) so a reload keeps
// them, then extended by each overview. Pages subscribe; nothing here renders.
import { api } from './api.js';
import { openStream } from './sse.js';
import { poller } from './ui.js';

const HISTORY = 360; // points per series (an hour at 10 s)
const subs = new Map(); // topic -> Set(fn)

export const live = {
  overview: null,
  overviewError: null,
  operations: null,
  connection: { state: 'connecting', message: null },
  history: { throughput: [], lag: {}, queued: {} },
  on(topic, fn) {
    if (!subs.has(topic)) subs.set(topic, new Set());
    subs.get(topic).add(fn);
    return () => subs.get(topic).delete(fn);
  },
  emit(topic, value) { (subs.get(topic) || []).forEach((fn) => fn(value)); },
  refreshSecs() {
    const r = this.overview && this.overview.presence && this.overview.presence.refresh_secs;
    return Math.max(1, Number(r) || 5);
  },
  /** Ask for a fresh overview now (after an action), without waiting for the next tick. */
  async refresh() {
    try { record(await api.get('/overview')); } catch (e) { live.overviewError = e; live.emit('overview-error', e); }
  },
};

let lastIngest = null;

function push(arr, point) {
  arr.push(point);
  if (arr.length > HISTORY) arr.splice(0, arr.length - HISTORY);
}

function record(ov) {
  const t = ov.server_time_ms || Date.now();
  const ingested = ov.scheduler && typeof ov.scheduler.ingested === 'number' ? ov.scheduler.ingested : null;
  if (ingested !== null) {
    if (lastIngest && t > lastIngest.t && ingested >= lastIngest.n) {
      push(live.history.throughput, [t, ((ingested - lastIngest.n) * 1000) / (t - lastIngest.t)]);
    } else if (lastIngest && ingested < lastIngest.n) {
      push(live.history.throughput, [t, null]); // the scheduler restarted: a break in the line
    }
    lastIngest = { t, n: ingested };
  }
  for (const sp of ov.ssps || []) {
    const lag = typeof sp.acked_seq === 'number' ? Math.max(0, sp.sent_seq - sp.acked_seq) : null;
    push(live.history.lag[sp.id] || (live.history.lag[sp.id] = []), [t, lag]);
    push(live.history.queued[sp.id] || (live.history.queued[sp.id] = []), [t, sp.queued]);
  }
  live.overview = ov;
  live.overviewError = null;
  live.emit('overview', ov);
}

/** Samples of GET /history as chart series: {throughput, lag: {id: points}, queued: {...}}. */
export function historySeries(samples) {
  const out = { throughput: [], lag: {}, queued: {} };
  for (const x of samples) {
    out.throughput.push([x.t, x.ingest_per_sec]);
    for (const [id, sp] of Object.entries(x.ssps || {})) {
      (out.lag[id] || (out.lag[id] = [])).push([x.t, sp.lag]);
      (out.queued[id] || (out.queued[id] = [])).push([x.t, sp.queued]);
    }
  }
  return out;
}

async function seedHistory() {
  try {
    const b = await api.get('/history', { range: 'hour' });
    const seeded = historySeries(b.samples);
    // what the overview polls added meanwhile is newer than the ring: keep it after
    const since = b.samples.length ? b.samples[b.samples.length - 1].t : 0;
    const newer = (pts) => (pts || []).filter((p) => p[0] > since);
    live.history.throughput = [...seeded.throughput, ...newer(live.history.throughput)].slice(-HISTORY);
    for (const k of ['lag', 'queued']) {
      const ids = new Set([...Object.keys(seeded[k]), ...Object.keys(live.history[k])]);
      const next = {};
      for (const id of ids) next[id] = [...(seeded[k][id] || []), ...newer(live.history[k][id])].slice(-HISTORY);
      live.history[k] = next;
    }
    live.emit('history', live.history);
    if (live.overview) live.emit('overview', live.overview);
  } catch (e) {
    console.warn('the chart history could not be loaded', e);
  }
}

let stops = [];

export function startLive() {
  stopLive();
  seedHistory();
  stops.push(poller(() => api.get('/overview'), () => live.refreshSecs(), {
    onData: record,
    onError: (e) => { live.overviewError = e; live.emit('overview-error', e); },
  }));
  const stream = openStream('/operations/stream', null, {
    onEvent: (name, data) => {
      if (name === 'operations') { live.operations = data.operations; live.emit('operations', data.operations); }
      else if (name === 'reconnected') { live.emit('reconnected', data); live.refresh(); }
    },
    onState: (state, extra) => { live.connection = { state, ...extra }; live.emit('connection', live.connection); },
  });
  stops.push(() => stream.close());
}

export function stopLive() {
  stops.forEach((fn) => fn());
  stops = [];
  live.overview = null;
  live.operations = null;
  lastIngest = null;
  live.history = { throughput: [], lag: {}, queued: {} };
}
