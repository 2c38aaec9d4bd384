// Access: mint a read or full token (shown once), list every token by id (never the token
// itself) and revoke one from the list or by its text. Read-only and MCP sessions cannot mint
// or revoke (the API says 403): the form says so instead of failing.
import { api } from '../api.js';
import { h, fill } from '../dom.js';
import { isoTime } from '../format.js';
import { session } from '../session.js';
import { actionButton, badge, errorBox, kv, table } from '../ui.js';
import { registerPage } from './registry.js';

function render({ root }) {
  const s = session.get();
  const why = s.mode === 'mcp' || s.kind === 'minted' ? 'A minted token cannot mint tokens: sign in as an operator.'
    : s.scope !== 'full' ? 'A read-only session cannot mint tokens.' : null;
  const out = h('div', { role: 'status', 'aria-live': 'polite' });
  const mint = h('form.filters', { id: 'mint', 'aria-label': 'Mint a token' },
    h('label', 'Label', h('input', { name: 'label', required: true, maxlength: '200', placeholder: 'e.g. claude-desktop' })),
    h('label', 'Scope', h('select', { name: 'scope' }, h('option', { value: 'read' }, 'read (GET only, read tools)'), h('option', { value: 'full' }, 'full'))),
    h('label', 'Days valid', h('input', { name: 'ttl_days', type: 'number', min: '1', max: '365', step: '1', value: '30', size: 5 })),
    h('button.primary', { type: 'submit', disabled: !!why, title: why || '' }, 'Mint token'));
  mint.addEventListener('submit', async (e) => {
    e.preventDefault();
    const d = Object.fromEntries(new FormData(mint).entries());
    try {
      const t = await api.post('/tokens', { label: d.label, scope: d.scope, ttl_days: Number(d.ttl_days) });
      const field = h('input', { type: 'text', readonly: true, value: t.token, size: 60, 'aria-label': 'The new token', id: 'minted-token', class: 'mono' });
      fill(out, h('div.warnbox',
        h('strong', 'Shown once: copy it now.'), h('div.row', field,
          h('button', { type: 'button', on: { click: async () => { field.select(); try { await navigator.clipboard.writeText(t.token); } catch { /* selected for a manual copy */ } } } }, 'Copy')),
        kv([['Label', t.label], ['Scope', t.scope], ['Expires', isoTime(t.expires_at_ms)],
            ['MCP endpoint', h('code', `${location.origin}/admin/api/mcp`)]])));
      field.select();
      loadTokens();
    } catch (err) { fill(out, errorBox(err, 'Minting')); }
  });
  const revokeOut = h('div', { role: 'status', 'aria-live': 'polite' });
  const revoke = h('form.filters', { id: 'revoke', 'aria-label': 'Revoke a token' },
    h('label', 'Token to revoke', h('input', { name: 'token', type: 'password', required: true, size: 40, autocomplete: 'off' })),
    h('button.danger', { type: 'submit', disabled: !!session.writeBlocked, title: session.writeBlocked || '' }, 'Revoke'));
  revoke.addEventListener('submit', async (e) => {
    e.preventDefault();
    try {
      await api.del('/tokens', { token: new FormData(revoke).get('token') });
      revoke.reset();
      fill(revokeOut, h('span.badge.s-ok', 'revoked'), ' it is refused from now on, across restarts too.');
    } catch (err) { fill(revokeOut, errorBox(err, 'Revoking')); }
  });
  const list = h('div', { id: 'token-list' });
  const listOut = h('div', { role: 'status', 'aria-live': 'polite' });
  async function loadTokens() {
    try {
      const { tokens } = await api.get('/tokens');
      fill(list, table([
        { label: 'Label', cell: (t) => t.label },
        { label: 'Kind', cell: (t) => `${t.kind} (${t.mode})` },
        { label: 'Subject', cell: (t) => t.subject },
        { label: 'Scope', cell: (t) => t.scope },
        { label: 'Expires', cell: (t) => isoTime(t.expires_at_ms) },
        { label: 'State', cell: (t) => (t.revoked ? badge('revoked', 'failed')
          : badge(t.current ? 'this session' : 'live', 'ok')) },
        { label: '', cell: (t) => (t.revoked ? '' : actionButton('Revoke', {
          id: `revoke:${t.id}`, danger: true, out: listOut,
          confirm: () => ({ title: 'Revoke this token?', ok: 'Revoke',
            body: `“${t.label}” of ${t.subject} is refused from now on, across restarts too.` }),
          run: () => api.del(`/tokens/${encodeURIComponent(t.id)}`),
          onDone: loadTokens })) },
      ], tokens, { empty: 'No token issued yet.', caption: 'Tokens issued by this scheduler' }));
    } catch (err) { fill(list, errorBox(err, 'Listing tokens')); }
  }
  loadTokens();
  fill(root, h('h1', 'Access'),
    h('p.muted', 'Tokens for the admin API and its MCP endpoint (POST /admin/api/mcp with Authorization: Bearer <token>). A read token may only read; a full token may do what an operator can, but never mint tokens.'),
    h('h2', 'Mint a token'), why ? h('p.why', { role: 'note' }, why) : null, mint, out,
    h('h2', 'Tokens'), h('p.muted', 'Every session and minted token this scheduler issued that has not expired, listed by id: revoke one without holding it. Removing an operator from the roster, or changing the break-glass password, ends their tokens too.'),
    list, listOut,
    h('h2', 'Revoke a token by its text'), revoke, revokeOut,
    h('h2', 'This session'), kv([['Subject', s.subject], ['Mode', s.mode], ['Scope', s.scope],
                                 ['Expires', s.expires_at_ms ? isoTime(s.expires_at_ms) : '–']]));
}

registerPage({ key: 'access', title: 'Access', order: 100, render });
