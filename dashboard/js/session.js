// The bearer and who it speaks for, in localStorage per endpoint (spec, Authentication 8):
// the key names this origin, so two schedulers on two ports keep two sessions. Never a cookie.

const KEY = `svc-admin:${location.origin}:session`;
const listeners = new Set();
let current = load();

function load() {
  try {
    const v = JSON.parse(localStorage.getItem(KEY) || 'null');
    return v && typeof v.token === 'string' ? v : null;
  } catch { return null; }
}

export const session = {
  get() { return current; },
  get token() { return current ? current.token : null; },
  /** {token, subject, mode, scope, kind, expires_at_ms} */
  set(s) {
    current = s;
    localStorage.setItem(KEY, JSON.stringify(s));
    listeners.forEach((fn) => fn(current, null));
  },
  /** Forget the bearer; `reason` is shown on the sign-in page. */
  clear(reason = null) {
    const had = current !== null;
    current = null;
    localStorage.removeItem(KEY);
    if (had || reason) listeners.forEach((fn) => fn(null, reason));
  },
  get canWrite() { return !!current && current.scope === 'full'; },
  /** Why a write control is disabled, or null when it is not. */
  get writeBlocked() {
    if (!current) return 'Not signed in';
    if (current.scope !== 'full') return 'Read-only session: this needs a full-scope sign-in or token';
    return null;
  },
  onChange(fn) { listeners.add(fn); return () => listeners.delete(fn); },
  storageKey: KEY,
};

// Another tab signing out (or in) on the same endpoint.
window.addEventListener('storage', (e) => {
  if (e.key !== KEY) return;
  const next = load();
  if (!next && current) { current = null; listeners.forEach((fn) => fn(null, 'Signed out in another tab')); }
  else if (next && (!current || next.token !== current.token)) { current = next; listeners.forEach((fn) => fn(current, null)); }
});
