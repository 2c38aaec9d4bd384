// Server-sent events read with fetch (EventSource cannot send the bearer). Reconnects with
// backoff (1 s doubling to 15 s), resumes with Last-Event-ID like EventSource does, reports its
// state, and passes the server's `gap` events on. A 401 ends the session; a stream that ends or
// breaks (a scheduler restart) is reopened.
import { api } from './api.js';
import { session } from './session.js';

export function openStream(path, query, { onEvent, onState, resume = false, lastEventId = null } = {}) {
  let closed = false;
  let ctrl = null;
  let lastId = lastEventId;
  let delay = 1000;
  let timer = null;
  let wasLive = false;
  let downSince = null;

  const state = (name, extra = {}) => onState && onState(name, extra);

  async function connect() {
    if (closed) return;
    ctrl = new AbortController();
    state(wasLive ? 'reconnecting' : 'connecting');
    const headers = { Accept: 'text/event-stream', Authorization: `Bearer ${session.token}` };
    if (resume && lastId !== null) headers['Last-Event-ID'] = lastId;
    let resp;
    try {
      resp = await fetch(api.url(path, query), { headers, signal: ctrl.signal, cache: 'no-store', credentials: 'omit' });
    } catch (e) {
      if (closed) return;
      return retry(`cannot reach the scheduler (${e.message || e})`);
    }
    if (resp.status === 401) {
      session.clear('Your session ended (signed out, expired or revoked): sign in again.');
      closed = true;
      state('closed');
      return;
    }
    if (!resp.ok) {
      let msg = `HTTP ${resp.status}`;
      try { const b = await resp.json(); msg = b.message || msg; } catch { /* not JSON */ }
      if (resp.status >= 400 && resp.status < 500) { state('error', { message: msg, status: resp.status }); closed = true; return; }
      return retry(msg);
    }
    if (wasLive && downSince !== null) onEvent && onEvent('reconnected', { down_ms: Date.now() - downSince }, null);
    wasLive = true;
    downSince = null;
    delay = 1000;
    state('live');
    try {
      await read(resp.body.getReader());
    } catch (e) {
      if (closed) return;
      return retry(`the stream broke (${e.message || e})`);
    }
    if (!closed) retry('the stream ended');
  }

  async function read(reader) {
    const dec = new TextDecoder();
    let buf = '';
    let ev = { event: null, data: [], id: null };
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buf += dec.decode(value, { stream: true });
      let nl;
      while ((nl = buf.search(/\r\n|\n|\r/)) >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + (buf[nl] === '\r' && buf[nl + 1] === '\n' ? 2 : 1));
        if (line === '') {
          if (ev.data.length) dispatch(ev);
          ev = { event: null, data: [], id: null };
          continue;
        }
        if (line[0] === ':') continue;
        const i = line.indexOf(':');
        const field = i < 0 ? line : line.slice(0, i);
        const val = i < 0 ? '' : line.slice(i + 1).replace(/^ /, '');
        if (field === 'data') ev.data.push(val);
        else if (field === 'event') ev.event = val;
        else if (field === 'id') { ev.id = val; lastId = val; }
        else if (field === 'retry' && /^\d+$/.test(val)) delay = Math.max(1000, Number(val));
      }
    }
  }

  function dispatch(ev) {
    const raw = ev.data.join('\n');
    let data = raw;
    try { data = JSON.parse(raw); } catch { /* a plain text line */ }
    onEvent && onEvent(ev.event || 'message', data, ev.id);
  }

  function retry(why) {
    if (closed) return;
    if (downSince === null) downSince = Date.now();
    const wait = delay;
    delay = Math.min(delay * 2, 15000);
    state('reconnecting', { message: why, retry_in_ms: wait });
    timer = setTimeout(connect, wait);
  }

  connect();
  return {
    close() { closed = true; clearTimeout(timer); if (ctrl) ctrl.abort(); state('closed'); },
    get lastId() { return lastId; },
  };
}
