// The sign-in page: roster (username or email + password), break-glass (password only, when the
// scheduler allows it) and an access token (a minted read or full token pasted as is).
import { api } from './api.js';
import { h, fill } from './dom.js';
import { session } from './session.js';
import { errorBox } from './ui.js';

// The way this tab last signed in (roster, break-glass or token), so the form comes back on it
// after a sign-out, an expiry or a reload. sessionStorage: per tab, gone with it, never a secret.
const MODE_KEY = `svc-admin:${location.origin}:signin-mode`;

function rememberedMode() {
  try { return sessionStorage.getItem(MODE_KEY); } catch { return null; }
}

export function renderSignIn(root, config, reason) {
  const tabs = [['roster', 'User'], ...(config && config.breakglass_available ? [['breakglass', 'Break-glass']] : []),
                ['token', 'Access token']];
  const kept = rememberedMode();
  let mode = tabs.some(([m]) => m === kept) ? kept : 'roster';
  const out = h('div', { role: 'status', 'aria-live': 'polite' });
  const formBox = h('div');
  const tabBar = h('div.tabs', { role: 'tablist', 'aria-label': 'How to sign in' });

  function select(m) {
    mode = m;
    try { sessionStorage.setItem(MODE_KEY, m); } catch { /* storage off: the form starts on User */ }
    for (const b of tabBar.children) b.setAttribute('aria-selected', String(b.dataset.mode === m));
    fill(formBox, form(m));
    fill(out);
  }
  for (const [m, label] of tabs) {
    tabBar.append(h('button', { type: 'button', role: 'tab', dataset: { mode: m }, on: { click: () => select(m) } }, label));
  }

  function form(m) {
    const fields = {
      roster: [field('username', 'Username or email', 'text', 'username'), field('password', 'Password', 'password', 'current-password')],
      breakglass: [field('password', 'Break-glass password (SVC_ADMIN_PASSWORD)', 'password', 'current-password')],
      token: [field('token', 'Access token', 'password', 'off')],
    }[m];
    const f = h('form', { id: `signin-${m}`, on: { submit: (e) => { e.preventDefault(); submit(f); } } },
      fields,
      m === 'breakglass' ? h('p.why', 'For emergencies: the session is flagged as break-glass.') : null,
      m === 'token' ? h('p.why', 'A token minted on the Access page (read or full scope).') : null,
      h('button.primary', { type: 'submit' }, 'Sign in'));
    return f;
  }

  async function submit(f) {
    const data = Object.fromEntries(new FormData(f).entries());
    fill(out, h('p.muted', 'Signing in…'));
    try {
      if (mode === 'token') {
        const token = String(data.token || '').trim();
        const who = await fetchMe(token);
        session.set({ token, ...who });
      } else {
        const body = mode === 'roster' ? { username: data.username, password: data.password } : { password: data.password };
        const s = await api.post('/session', body, { auth: false });
        session.set({ token: s.token, subject: s.subject, mode: s.mode, scope: s.scope, kind: 'session',
                      expires_at_ms: s.expires_at_ms });
      }
    } catch (e) {
      fill(out, errorBox(e.status === 401 ? new Error('Sign-in failed: check what you typed (after 10 failures the address waits 5 minutes).') : e));
    }
  }

  fill(root,
    h('div.signin.card',
      h('h1', 'Sign in'),
      h('p.muted', config ? `Scheduler ${config.scheduler_id} · version ${config.version}` : 'Scheduler unreachable'),
      reason ? h('div.notice', { role: 'alert' }, reason) : null,
      tabBar, formBox, out));
  select(mode);
  const first = formBox.querySelector('input');
  if (first) first.focus();
}

async function fetchMe(token) {
  const r = await fetch('/admin/api/me', { headers: { Authorization: `Bearer ${token}` }, cache: 'no-store', credentials: 'omit' });
  if (!r.ok) throw new Error(r.status === 401 ? 'This token is unknown, expired or revoked.' : `HTTP ${r.status}`);
  return r.json();
}

function field(name, label, type, autocomplete) {
  return h('label', label, h('input', { name, type, autocomplete, required: true, spellcheck: 'false' }));
}
