// The page registry: each page module registers itself; the router and the navigation read
// this list. A new system (workflows, schedules, pools, backups) adds one module under pages/
// and one import line in pages/all.js.
//
// A page: {key, title, order, nav (shown in the navigation), render(ctx) -> dispose function}
// ctx: {root, params (path segments after the key), query (URLSearchParams), navigate(url),
//       setTitle(text)}. render may be async; the returned function stops its timers/streams.

const pages = new Map();

export function registerPage(page) {
  if (!page.key || typeof page.render !== 'function') throw new Error('a page needs key and render');
  pages.set(page.key, { nav: true, order: 100, ...page });
}

export function getPage(key) { return pages.get(key); }

export function navPages() {
  return [...pages.values()].filter((p) => p.nav).sort((a, b) => a.order - b.order);
}
