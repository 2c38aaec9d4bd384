/**
 * The view's query turned into a read of its known members: the top-level `FROM <target>`
 * becomes `FROM $__members` and the top-level `START`/`LIMIT` are dropped (the members already
 * are the window), so SurrealDB itself applies the projection, links, WHERE and ORDER BY to
 * exactly the records the service says are in the view. Same rule as the Python client.
 */

export const MEMBERS_PARAM = "__members";

const CLAUSES = new Set([
  "WHERE", "SPLIT", "GROUP", "ORDER", "LIMIT", "START", "FETCH", "TIMEOUT", "PARALLEL",
  "EXPLAIN", "WITH", "TEMPFILES", "VERSION",
]);

export class UnsupportedQuery extends Error {}

type Word = { start: number; end: number; word: string };

function topLevelWords(text: string): Word[] {
  const out: Word[] = [];
  let depth = 0;
  let i = 0;
  const n = text.length;
  while (i < n) {
    const c = text[i];
    if (c === "'" || c === '"' || c === "`") {
      let j = i + 1;
      while (j < n && text[j] !== c) j += text[j] === "\\" ? 2 : 1;
      i = j + 1;
      continue;
    }
    if (c === "⟨") {
      const j = text.indexOf("⟩", i + 1);
      i = j < 0 ? n : j + 1;
      continue;
    }
    if (text.startsWith("--", i) || c === "#") {
      const j = text.indexOf("\n", i);
      i = j < 0 ? n : j + 1;
      continue;
    }
    if ("([{".includes(c)) depth++;
    else if (")]}".includes(c)) depth--;
    else if (depth === 0 && /[A-Za-z_]/.test(c) && (i === 0 || !/[A-Za-z0-9_:$.]/.test(text[i - 1]))) {
      const m = /^[A-Za-z_]+/.exec(text.slice(i));
      const end = i + (m ? m[0].length : 1);
      out.push({ start: i, end, word: text.slice(i, end).toUpperCase() });
      i = end;
      continue;
    }
    i++;
  }
  return out;
}

/** The view's query reading `$__members` instead of its table, without START/LIMIT. */
export function membersQuery(surql: string): string {
  const text = surql.trim().replace(/;+\s*$/, "").trim();
  const words = topLevelWords(text);
  if (words.length === 0 || words[0].word !== "SELECT") {
    throw new UnsupportedQuery("a view is one SELECT statement");
  }
  const from = words.find((w) => w.word === "FROM");
  if (!from) throw new UnsupportedQuery("the query has no FROM");
  const after = words.filter((w) => w.start > from.end && CLAUSES.has(w.word));
  const targetEnd = after.length ? after[0].start : text.length;
  const head = text.slice(0, from.start) + `FROM $${MEMBERS_PARAM} `;
  const rest = text.slice(targetEnd);
  const clauses = topLevelWords(rest).filter((w) => CLAUSES.has(w.word));
  const keep: string[] = [];
  if (clauses.length && clauses[0].start > 0) keep.push(rest.slice(0, clauses[0].start).trim());
  clauses.forEach((w, k) => {
    const end = k + 1 < clauses.length ? clauses[k + 1].start : rest.length;
    if (w.word !== "START" && w.word !== "LIMIT") keep.push(rest.slice(w.start, end).trim());
  });
  return (head + keep.filter((k) => k).join(" ")).trim();
}

/** The service's edge table name from the auth id's canonical text (`<string> $auth.id`). */
export function edgeTable(authText: string, refMode: "dedicated" | "single"): string {
  if (refMode === "single") return "_00_list_ref";
  const m = /^user:([A-Za-z0-9]+)$/.exec(authText);
  if (m) return "_00_list_ref_user_" + m[1];
  const hex = Array.from(new TextEncoder().encode(authText))
    .map((b) => b.toString(16).padStart(2, "0")).join("");
  return "_00_list_ref_user__" + hex;
}

/** `10m`, `30s`, `1h30m` -> seconds. */
export function ttlSecs(ttl: string): number {
  const units: Record<string, number> = { ms: 0.001, s: 1, m: 60, h: 3600, d: 86400 };
  const parts = [...ttl.matchAll(/(\d+)(ms|s|m|h|d)/g)];
  if (!parts.length || parts.map((p) => p[0]).join("") !== ttl) {
    throw new Error(`ttl ${JSON.stringify(ttl)} is not a duration such as 30s or 10m`);
  }
  return parts.reduce((s, p) => s + Number(p[1]) * units[p[2]], 0);
}
