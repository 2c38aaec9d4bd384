// The admin JSON API: every request carries the bearer; errors come back as ApiError with the
// listener's body ({error, code?, message?}). A 401 ends the session (back to sign-in); any
// other error is the caller's to show where it happened.
import { session } from './session.js';

export const BASE = '/admin/api';

export class ApiError extends Error {
  constructor(status, body, path) {
    const msg = (body && body.message) || (status === 0 ? 'the scheduler cannot be reached' : `HTTP ${status}`);
    super(msg);
    this.status = status;
    this.error = body && body.error;
    this.code = body && body.code;
    this.path = path;
  }
  get text() {
    if (this.status === 0) return `Cannot reach the scheduler (${this.message}).`;
    return `${this.message}${this.code ? ` (${this.code})` : ''} — HTTP ${this.status}`;
  }
}

function url(path, query) {
  const u = new URL(BASE + path, location.origin);
  for (const [k, v] of Object.entries(query || {})) {
    if (v !== undefined && v !== null && v !== '' && v !== false) u.searchParams.set(k, String(v));
  }
  return u.pathname + u.search;
}

export async function request(method, path, { query, body, auth = true, signal } = {}) {
  const headers = { Accept: 'application/json' };
  if (auth && session.token) headers.Authorization = `Bearer ${session.token}`;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  let resp;
  try {
    resp = await fetch(url(path, query), {
      method, headers, body: body === undefined ? undefined : JSON.stringify(body), signal,
      cache: 'no-store', credentials: 'omit',
    });
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    throw new ApiError(0, { message: String(e.message || e) }, path);
  }
  const text = await resp.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { data = { message: text.slice(0, 300) }; }
  if (!resp.ok) {
    const err = new ApiError(resp.status, data, path);
    if (resp.status === 401 && auth) session.clear('Your session ended (signed out, expired or revoked): sign in again.');
    throw err;
  }
  return data;
}

export const api = {
  get: (path, query, opts = {}) => request('GET', path, { ...opts, query }),
  post: (path, body, opts = {}) => request('POST', path, { ...opts, body: body ?? {} }),
  del: (path, body, opts = {}) => request('DELETE', path, { ...opts, body }),
  url,
};
