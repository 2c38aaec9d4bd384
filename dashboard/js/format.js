// Numbers, times and states as people read them.

export function num(v, digits = 0) {
  if (v === null || v === undefined || Number.isNaN(v)) return '–';
  if (typeof v !== 'number') return String(v);
  return v.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: 0 });
}

export function ms(v) {
  if (v === null || v === undefined) return '–';
  if (v < 1) return `${num(v, 2)} ms`;
  if (v < 1000) return `${num(v, v < 10 ? 1 : 0)} ms`;
  return duration(v);
}

export function duration(msv) {
  if (msv === null || msv === undefined) return '–';
  const neg = msv < 0;
  let s = Math.abs(msv) / 1000;
  let out;
  if (s < 60) out = `${num(s, s < 10 ? 1 : 0)} s`;
  else if (s < 3600) out = `${Math.floor(s / 60)} min ${Math.round(s % 60)} s`;
  else if (s < 86400) out = `${Math.floor(s / 3600)} h ${Math.round((s % 3600) / 60)} min`;
  else out = `${Math.floor(s / 86400)} d ${Math.round((s % 86400) / 3600)} h`;
  return neg ? `-${out}` : out;
}

export function bytes(v) {
  if (v === null || v === undefined) return '–';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (Math.abs(v) >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return `${num(v, i ? 1 : 0)} ${units[i]}`;
}

/** "12 s ago" / "in 4 min" relative to now; the clock ticker refreshes these every second. */
export function relative(atMs, now = Date.now()) {
  if (atMs === null || atMs === undefined) return '–';
  const d = atMs - now;
  const a = Math.abs(d) / 1000;
  let t;
  if (a < 5) return d <= 0 ? 'just now' : 'in a moment';
  if (a < 60) t = `${Math.round(a)} s`;
  else if (a < 3600) t = `${Math.round(a / 60)} min`;
  else if (a < 86400) t = `${Math.round(a / 3600)} h`;
  else t = `${Math.round(a / 86400)} d`;
  return d < 0 ? `${t} ago` : `in ${t}`;
}

export function isoTime(atMs) {
  return atMs ? new Date(atMs).toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z') : '–';
}

/** The colour class of a state word. */
export function stateClass(state) {
  switch (String(state || '').toLowerCase()) {
    case 'ready': case 'healthy': case 'done': case 'recovered': case 'completed': case 'live': case 'ok':
      return 's-ok';
    case 'lagging': case 'degraded': case 'stalled': case 'interrupted': case 'warning': case 'reconnecting':
    case 'pending': case 'unknown':
      return 's-warn';
    case 'failed': case 'unhealthy': case 'unavailable': case 'open': case 'error': case 'offline':
      return 's-bad';
    case 'bootstrapping': case 'replaying': case 'running': case 'processing': case 'cloning':
    case 'restoring': case 'info':
      return 's-info';
    case 'flagged':
      return 's-special';
    default:
      return 's-idle';
  }
}
