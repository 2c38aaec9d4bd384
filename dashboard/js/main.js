// Boot, routing and the frame around pages. URLs: /admin/ (overview), /admin/<page>[/<param>...]
// [?query]; the server answers index.html for every such path, so a deep link reloads to the
// same page. Links inside the app are handled here (history API), not by a full reload.
import { api } from './api.js';
import { h, fill } from './dom.js';
import { live, startLive, stopLive } from './live.js';
import { getPage, navPages } from './pages/registry.js';
import './pages/all.js';
import { session } from './session.js';
import { renderSignIn } from './signin.js';
import { badge, errorBox, startClock } from './ui.js';

const ROOT = '/admin';
const main = document.getElementById('main');
const nav = document.getElementById('nav');
let config = null;
let dispose = null;
let rendering = 0;

function route() {
  const rest = location.pathname.startsWith(ROOT) ? location.pathname.slice(ROOT.length) : '/';
  const parts = rest.split('/').filter(Boolean).map(decodeURIComponent);
  return { key: parts[0] || 'overview', params: parts.slice(1), query: new URLSearchParams(location.search) };
}

export function navigate(url, { replace = false } = {}) {
  const u = new URL(url, location.origin);
  if (u.pathname + u.search === location.pathname + location.search) return render();
  history[replace ? 'replaceState' : 'pushState']({}, '', u.pathname + u.search + u.hash);
  return render();
}

function closeNav() {
  nav.classList.remove('open');
  document.getElementById('nav-toggle').setAttribute('aria-expanded', 'false');
}

function drawNav(current) {
  fill(nav, navPages().map((p) => h('a', { href: p.key === 'overview' ? `${ROOT}/` : `${ROOT}/${p.key}`,
                                           'aria-current': p.key === current ? 'page' : null,
                                           dataset: { page: p.key } }, p.title)));
}

function drawHeader() {
  const s = session.get();
  const top = document.getElementById('top');
  top.hidden = !s;
  nav.hidden = !s;
  document.getElementById('breakglass-banner').hidden = !(s && s.mode === 'breakglass');
  document.body.classList.toggle('breakglass', !!(s && s.mode === 'breakglass'));
  if (!s) return;
  fill(document.getElementById('who'),
    h('span.subject', s.subject),
    s.mode === 'breakglass' ? h('span.badge.breakglass', { title: 'Signed in with the break-glass password' }, 'BREAK-GLASS')
      : badge(s.mode, 'info'),
    s.scope !== 'full' ? h('span.badge.s-warn', { dataset: { scope: s.scope } }, 'read-only') : null);
}

function drawConnection(c) {
  const el = document.getElementById('conn');
  el.className = `conn ${c.state}`;
  el.dataset.state = c.state;
  const text = {
    live: 'live', connecting: 'connecting…', closed: 'offline', error: `error: ${c.message || ''}`,
    reconnecting: `reconnecting${c.retry_in_ms ? ` in ${Math.round(c.retry_in_ms / 1000)} s` : '…'}`,
  }[c.state] || c.state;
  el.textContent = text;
  el.title = c.message || '';
}

async function render() {
  const mine = ++rendering;
  if (dispose) { try { dispose(); } catch (e) { console.error(e); } dispose = null; }
  closeNav();
  const { key, params, query } = route();
  if (!session.get()) {
    document.title = 'Sign in · surreal-views admin';
    renderSignIn(main, config, pendingReason);
    return;
  }
  const page = getPage(key);
  drawNav(page ? page.key : null);
  if (!page) {
    fill(main, h('h1', 'Not found'), h('p', `No page “${key}”. `, h('a', { href: `${ROOT}/` }, 'Go to the overview.')));
    return;
  }
  const root = h('div.page', { dataset: { page: page.key } });
  fill(main, root);
  document.title = `${page.title} · surreal-views admin`;
  const ctx = {
    root, params, query, navigate,
    setTitle: (t) => { document.title = `${t} · surreal-views admin`; },
  };
  try {
    const d = await page.render(ctx);
    if (mine !== rendering) { if (typeof d === 'function') d(); return; }
    dispose = typeof d === 'function' ? d : null;
  } catch (e) {
    if (mine === rendering) root.append(errorBox(e, `The ${page.title} page failed`));
  }
  if (focusMain) { main.focus({ preventScroll: true }); focusMain = false; }
}

let pendingReason = null;
let focusMain = false;

session.onChange((s, reason) => {
  pendingReason = reason;
  drawHeader();
  if (s) { pendingReason = null; startLive(); } else stopLive();
  render();
});

document.addEventListener('click', (e) => {
  const a = e.target.closest && e.target.closest('a[href]');
  if (!a || e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
  const u = new URL(a.href, location.origin);
  if (u.origin !== location.origin || !u.pathname.startsWith(`${ROOT}/`) && u.pathname !== ROOT) return;
  if (u.pathname.startsWith(`${ROOT}/api`) || a.target || a.hasAttribute('download')) return;
  e.preventDefault();
  focusMain = true;
  navigate(u.href);
});
window.addEventListener('popstate', () => render());
document.getElementById('nav-toggle').addEventListener('click', (e) => {
  const open = nav.classList.toggle('open');
  e.currentTarget.setAttribute('aria-expanded', String(open));
});
document.getElementById('signout').addEventListener('click', async () => {
  try { await api.post('/logout', {}); } catch { /* the token may be gone already */ }
  session.clear('Signed out.');
});
live.on('connection', drawConnection);

async function boot() {
  startClock();
  try { config = await api.get('/config', null, { auth: false }); } catch { config = null; }
  if (session.get()) {
    try {
      const me = await api.get('/me');
      session.set({ ...session.get(), ...me });
      return; // onChange renders
    } catch (e) {
      if (e.status !== 401 && session.get()) {
        // The scheduler is down or restarting: keep the session, let the live parts reconnect.
        drawHeader();
        startLive();
        await render();
        main.prepend(errorBox(e, 'Checking the session'));
        return;
      }
      return; // 401: session.clear already re-rendered the sign-in page
    }
  }
  drawHeader();
  await render();
}

boot();
