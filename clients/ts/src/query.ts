/**
 * The view's query turned into a read of its known members: the top-level `FROM <target>`
 * becomes `FROM $__members` and the top-level `START`/`LIMIT` are dropped (the members already
 * are the window), so SurrealDB itself applies the projection, links, WHERE and ORDER BY to
 * exactly the records the service says are in the view. The ORDER BY is applied by an outer
 * `SELECT * FROM (<inner>) ORDER BY ...` over the projected rows: SurrealDB 3.0.x (the Node
 * build, transport `http`) ignores ORDER BY in `SELECT ... FROM $array WHERE ...` and refuses
 * `FROM $array` without WHERE, while it orders a subquery's rows as 3.2 does. Same rule as
 * the Python client (viewclient/query.py).
 */

import { RecordId } from "surrealdb";

export const MEMBERS_PARAM = "__members";

const CLAUSES = new Set([
  "WHERE", "SPLIT", "GROUP", "ORDER", "LIMIT", "START", "FETCH", "TIMEOUT", "PARALLEL",
  "EXPLAIN", "WITH", "TEMPFILES", "VERSION",
]);

export class UnsupportedQuery extends Error {}

type Word = { start: number; end: number; word: string };

/** [index, character, bracket depth] of every character outside strings, `⟨...⟩` and
 * comments. */
function* scan(text: string): Generator<[number, string, number]> {
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
    yield [i, c, depth];
    i++;
  }
}

function topLevelWords(text: string): Word[] {
  const out: Word[] = [];
  let wordEnd = 0;
  for (const [i, c, depth] of scan(text)) {
    if (i < wordEnd) continue;
    if (depth === 0 && /[A-Za-z_]/.test(c) && (i === 0 || !/[A-Za-z0-9_:$.]/.test(text[i - 1]))) {
      const m = /^[A-Za-z_]+/.exec(text.slice(i));
      wordEnd = i + (m ? m[0].length : 1);
      out.push({ start: i, end: wordEnd, word: text.slice(i, wordEnd).toUpperCase() });
    }
  }
  return out;
}

/** `text` cut at its top-level commas (outside brackets, strings and comments). */
function splitTop(text: string): string[] {
  const parts: string[] = [];
  let cut = 0;
  for (const [i, c, depth] of scan(text)) {
    if (c === "," && depth === 0) {
      parts.push(text.slice(cut, i).trim());
      cut = i + 1;
    }
  }
  parts.push(text.slice(cut).trim());
  return parts.filter((p) => p);
}

const squash = (t: string): string => t.split(/\s+/).filter((w) => w).join(" ");

/** The ORDER BY for the outer read: an ORDER BY may name an aliased expression of the
 * projection, while the outer read sees only the alias. */
function outerOrder(order: string, projection: string): string {
  const aliases = new Map<string, string>();
  for (const item of splitTop(projection)) {
    const as = topLevelWords(item).filter((w) => w.word === "AS").pop();
    if (as) aliases.set(squash(item.slice(0, as.start)), item.slice(as.end).trim());
  }
  const terms = splitTop(order.replace(/^BY\s+/i, "")).map((term) => {
    const norm = squash(term);
    for (const [expr, name] of aliases) {
      if (norm === expr || norm.startsWith(expr + " ")) return name + norm.slice(expr.length);
    }
    return norm;
  });
  return "ORDER BY " + terms.join(", ");
}

/** The view's query reading `$__members` instead of its table, without START/LIMIT, its
 * ORDER BY applied over the projected rows (exact on SurrealDB 3.0 and 3.2). */
export function membersQuery(surql: string): string {
  const text = surql.trim().replace(/;+\s*$/, "").trim();
  const words = topLevelWords(text);
  if (words.length === 0 || words[0].word !== "SELECT") {
    throw new UnsupportedQuery("a view is one SELECT statement");
  }
  const from = words.find((w) => w.word === "FROM");
  if (!from) throw new UnsupportedQuery("the query has no FROM");
  const projection = text.slice(words[0].end, from.start).trim();
  const isValue = topLevelWords(projection)[0]?.word === "VALUE";
  const after = words.filter((w) => w.start > from.end && CLAUSES.has(w.word));
  const targetEnd = after.length ? after[0].start : text.length;
  const rest = text.slice(targetEnd);
  // Each clause runs to the next top-level clause; START/LIMIT go, ORDER BY moves out.
  const clauses = topLevelWords(rest).filter((w) => CLAUSES.has(w.word));
  const withs: string[] = [];
  const tail: string[] = [];
  let where: string | undefined;
  let order: string | undefined;
  clauses.forEach((w, k) => {
    const end = k + 1 < clauses.length ? clauses[k + 1].start : rest.length;
    if (w.word === "START" || w.word === "LIMIT") return;
    if (w.word === "WITH") withs.push(rest.slice(w.start, end).trim());
    else if (w.word === "WHERE") where = rest.slice(w.end, end).trim();
    else if (w.word === "ORDER") order = rest.slice(w.end, end).trim();
    else tail.push(rest.slice(w.start, end).trim());
  });
  // `id != NONE`: a member deleted since its edge was read is skipped by 3.2 but read as a
  // row of NONE by 3.0 (with a VALUE or subquery projection).
  const cond = "WHERE id != NONE" + (where ? ` AND (${where})` : "");
  if (isValue && order) {
    // A VALUE's rows are no objects to order by a field: the member records are ordered
    // first (by the record fields the ORDER BY names) and the VALUE read from them in order.
    const members = [`SELECT * FROM $${MEMBERS_PARAM}`, ...withs, cond].join(" ");
    return [`SELECT ${projection} FROM (SELECT * FROM (${members}) ORDER ${order})`, ...tail]
      .join(" ");
  }
  const inner = [`SELECT ${projection} FROM $${MEMBERS_PARAM}`, ...withs, cond, ...tail].join(" ");
  return `SELECT * FROM (${inner})` + (order ? " " + outerOrder(order, projection) : "");
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

/** The query's top-level WHERE expression, undefined without one. */
export function whereText(surql: string): string | undefined {
  const text = surql.trim().replace(/;+\s*$/, "").trim();
  const words = topLevelWords(text);
  const where = words.find((w) => w.word === "WHERE");
  if (!where) return undefined;
  const after = words.find((w) => w.start > where.end && CLAUSES.has(w.word));
  return text.slice(where.end, after ? after.start : text.length).trim();
}

const UNKNOWN = Symbol("unknown");
/** Marks a record id's comparable text (no string an app stores starts with it). */
const RECORD = "\u0000record\u0000";
type Value = number | string | boolean | null | typeof UNKNOWN;

function literal(text: string, params: Record<string, unknown>, auth: unknown): unknown {
  if (/^-?\d+(\.\d+)?$/.test(text)) return Number(text);
  if (text.length >= 2 && text[0] === text[text.length - 1] && `'"`.includes(text[0]) &&
      !text.includes("\\")) return text.slice(1, -1);
  const upper = text.toUpperCase();
  if (upper === "TRUE" || upper === "FALSE") return upper === "TRUE";
  if (upper === "NONE" || upper === "NULL") return null;
  const m = /^\$([A-Za-z_][A-Za-z0-9_]*)(\.id)?$/.exec(text);
  if (m && m[1] === "auth" && m[2]) return auth;
  if (m && !m[2] && m[1] in params) return params[m[1]];
  return UNKNOWN;
}

function comparable(v: unknown): Value {
  if (v === null || v === undefined) return null;
  if (typeof v === "boolean" || typeof v === "string" || typeof v === "number") return v;
  if (typeof v === "bigint") return Number(v);
  // A record id compares by its parts, never by its text: SurrealDB and the SDK escape keys
  // differently (`user:\`a-b\`` against `user:⟨a-b⟩`), and a string that reads like a record
  // id is not one (SurrealDB: 'user:a' = user:a is false). A StringRecordId has no parts to
  // compare: the database decides.
  if (v instanceof RecordId) {
    const id = v.id;
    const key = typeof id === "string" || typeof id === "number" || typeof id === "bigint"
      ? String(id) : JSON.stringify(id);
    return RECORD + v.table.name + "\u0000" + typeof id + "\u0000" + key;
  }
  return UNKNOWN;
}

export type WhereTest = (row: Record<string, unknown>, params: Record<string, unknown>,
                         auth: unknown) => boolean | undefined;

/**
 * A test of a new record against the view's WHERE: true or false when the WHERE is a
 * conjunction (`AND`/`&&`) of `field <op> value` comparisons (op `=`, `!=`, `<`, `<=`, `>`,
 * `>=`; value a number, a quoted string, true/false/NONE, a `$param` of the view or
 * `$auth.id`, the signed-in record id the test is given), else undefined (the client cannot tell; the database's answer decides).
 * Same rule as the Python client (`viewclient.query.where_filter`).
 */
export function whereFilter(surql: string): WhereTest {
  const where = whereText(surql);
  if (where === undefined) return () => true;
  const parts: string[] = [];
  let cut = 0;
  for (const w of topLevelWords(where)) {
    if (w.word === "AND") { parts.push(where.slice(cut, w.start)); cut = w.end; }
  }
  parts.push(where.slice(cut));
  const terms: Array<[string, string, string]> = [];
  for (const part of parts.flatMap((p) => p.split("&&"))) {
    const m = /^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(==|=|!=|>=|<=|>|<)\s*([\s\S]+?)\s*$/.exec(part);
    if (!m || topLevelWords(m[3]).some((w) => ["OR", "AND", "NOT", "IN", "CONTAINS", "IS"]
      .includes(w.word))) return () => undefined;
    terms.push([m[1], m[2], m[3]]);
  }
  return (row, params, auth) => {
    for (const [name, op, raw] of terms) {
      const lit = literal(raw, params, auth);
      if (lit === UNKNOWN) return undefined;
      const got = comparable(row[name]);
      const want = comparable(lit);
      if (got === UNKNOWN || want === UNKNOWN) return undefined;
      let ok: boolean;
      if (op === "=" || op === "==") ok = got === want;
      else if (op === "!=") ok = got !== want;
      else if (typeof got !== typeof want || got === null || typeof got === "boolean" ||
               (typeof got === "string" && got.startsWith(RECORD))) {
        return undefined;  // an order across types is SurrealDB's to decide
      } else {
        const [a, b] = [got as number | string, want as number | string];
        ok = op === "<" ? a < b : op === "<=" ? a <= b : op === ">" ? a > b : a >= b;
      }
      if (!ok) return false;
    }
    return true;
  };
}

const FIELD = /^\s*([A-Za-z_][A-Za-z0-9_]*)(?:\s+(ASC|DESC|ASCENDING|DESCENDING))?\s*$/i;

function count(text: string | undefined, params: Record<string, unknown>): number | undefined | typeof UNKNOWN {
  if (text === undefined) return undefined;
  if (/^\d+$/.test(text)) return Number(text);
  const m = /^\$([A-Za-z_][A-Za-z0-9_]*)$/.exec(text);
  const v = m ? params[m[1]] : undefined;
  if (typeof v === "number" && Number.isInteger(v) && v >= 0) return v;
  return UNKNOWN;
}

function orderValue(v: unknown): [number, number | string] | undefined {
  if (typeof v === "number") return [0, v];
  if (typeof v === "bigint") return [0, Number(v)];
  // UTF-16 order equals SurrealDB's code point order unless a surrogate pair is involved
  if (typeof v === "string" && !/[\uD800-\uDFFF]/.test(v)) return [1, v];
  return undefined;
}

/** True when `row` sorts strictly before `other`, false when after, undefined on a tie or
 * when the client cannot tell (a missing field, two types). */
function sortsBefore(row: Record<string, unknown>, other: Record<string, unknown>,
                     order: Array<[string, boolean]>): boolean | undefined {
  for (const [name, desc] of order) {
    const a = orderValue(row[name]);
    const b = orderValue(other[name]);
    if (!a || !b || a[0] !== b[0]) return undefined;
    if (a[1] !== b[1]) return desc ? a[1] > b[1] : a[1] < b[1];
  }
  return undefined;
}

/**
 * The view's top-level ORDER BY (plain fields, ASC/DESC) and START/LIMIT, to place an
 * optimistic row among the server's rows (the window, in order) the way SurrealDB would, or
 * to say it cannot tell (then the database's answer decides). Same rule as the Python client
 * (`viewclient.query.Window`).
 */
export class Window {
  /** (field, descending); undefined when the ORDER BY is not plain fields. */
  readonly order: Array<[string, boolean]> | undefined;
  readonly limitText: string | undefined;
  readonly startText: string | undefined;

  constructor(surql: string) {
    const text = surql.trim().replace(/;+\s*$/, "").trim();
    const clauses = topLevelWords(text).filter((w) => CLAUSES.has(w.word));
    let order: Array<[string, boolean]> | undefined = [];
    for (let k = 0; k < clauses.length; k++) {
      const end = k + 1 < clauses.length ? clauses[k + 1].start : text.length;
      const body = text.slice(clauses[k].end, end).trim();
      const word = clauses[k].word;
      if (word === "ORDER") {
        order = [];
        for (const part of body.replace(/^BY\s+/i, "").split(",")) {
          const m = FIELD.exec(part);
          if (!m) { order = undefined; break; }  // COLLATE, NUMERIC, rand(), paths
          order.push([m[1], (m[2] ?? "").toUpperCase().startsWith("DESC")]);
        }
      } else if (word === "LIMIT") {
        this.limitText = body.replace(/^BY\s+/i, "");
      } else if (word === "START") {
        this.startText = body.replace(/^AT\s+/i, "");
      }
    }
    this.order = order;
  }

  /** The LIMIT when there is one the client can read. */
  limit(params: Record<string, unknown>): number | undefined {
    const n = count(this.limitText, params);
    return typeof n === "number" ? n : undefined;
  }

  /**
   * Where `row` goes among the window's `rows`: an index, -1 after a full window, undefined
   * when the client cannot tell (order across types, a missing field, a tie, an ORDER BY that
   * is not plain fields, a START or LIMIT it cannot read, a row ahead of a window that does
   * not start at the first row).
   */
  place(rows: Array<Record<string, unknown>>, row: Record<string, unknown>,
        params: Record<string, unknown>): number | undefined {
    if (this.order === undefined) return undefined;
    if (this.order.length === 0) {
      return this.limitText !== undefined || this.startText !== undefined ? undefined : rows.length;
    }
    const limit = count(this.limitText, params);
    const start = this.startText === undefined ? 0 : count(this.startText, params);
    if (limit === UNKNOWN || start === UNKNOWN) return undefined;
    let idx = rows.length;
    for (let i = 0; i < rows.length; i++) {
      const before = sortsBefore(row, rows[i], this.order);
      if (before === undefined) return undefined;
      if (before) { idx = i; break; }
    }
    if (idx === 0 && start) return undefined;
    if (limit !== undefined && idx >= limit) return -1;
    return idx;
  }
}
