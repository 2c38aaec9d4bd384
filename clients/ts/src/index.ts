/**
 * App client for live views (TypeScript, browsers and Node 20, on the official `surrealdb` SDK).
 * The same shape as the Python client (`viewclient`): connect, view(surql, params, {ttl}) with
 * status materializing/ready/gap and rows in the query's order, subscribe / async iteration
 * with the added, removed and changed rows of each step, lastActiveAt refreshed at 0.9 x ttl,
 * close(), reconnect with gap reporting, optimistic writes with rollback and a failed-writes
 * list, run(table, path, payload) through an outbox job.
 *
 * Edge notifications are only wake-ups: each one makes the views read their members and rows
 * again in one request. One LIVE query per edge table and client is shared by its views, and
 * any notification on it wakes every one of them: the SDK 2.0.8 loses a notification arriving
 * in the same tick as the one before it (ChannelIterator.submit keeps its resolved waiter),
 * and the lost one may be another view's edge (two views of one user gaining the same row in
 * one flush); the reads the first notification triggers already see the second's write.
 */

import { RecordId, StringRecordId, Surreal, Table } from "surrealdb";
import { MEMBERS_PARAM, type WhereTest, Window, edgeTable, membersQuery, ttlSecs, whereFilter }
  from "./query.js";

export { Window, edgeTable, membersQuery, ttlSecs, whereFilter } from "./query.js";

export type Status = "materializing" | "ready" | "gap";
export type Row = Record<string, unknown>;

export interface Step {
  status: Status;
  rows: Row[];
  added: Row[];
  removed: Row[];
  changed: Row[];
}

export interface FailedWrite { op: string; target: string; data: unknown; error: string }

export interface ConnectOptions {
  /** The SSP (standalone) or the scheduler's ingest listener. */
  serviceUrl: string;
  /**
   * How views are registered: `row` (default) writes the view's `_00_query` row as the
   * signed-in user, which the service reads from the changefeed (no service secret, fit for
   * a browser); `bearer` calls `/view/register` with `serviceToken` (server-side apps).
   */
  registration?: "row" | "bearer";
  /** Bearer for `/view/register` (registration `bearer`; any value without a secret). */
  serviceToken?: string;
  /** How long a registration waits for the service's answer on the row (ms). */
  registerTimeoutMs?: number;
  refMode?: "dedicated" | "single";
  /** How often the service's /health is checked (ms); a failure is a gap. */
  healthIntervalMs?: number;
  /** A WebSocket implementation (Node 20 has none by default: pass `ws`). */
  WebSocket?: unknown;
  clientId?: string;
}

export type Auth =
  | { access: string; variables: Record<string, unknown> }
  | { token: string };

export class ViewError extends Error {
  constructor(public status: number, message: string) { super(`${status}: ${message}`); }
}

export class JobFailed extends Error {
  constructor(public job: string, public errors: unknown) {
    super(`job ${job} failed: ${JSON.stringify(errors)}`);
  }
}

function key(row: Row): string {
  const id = row?.id;
  return id !== undefined ? String(id) : JSON.stringify(row);
}

function same(a: unknown, b: unknown): boolean {
  return JSON.stringify(a, (_k, v) => (typeof v === "bigint" ? String(v) : v)) ===
    JSON.stringify(b, (_k, v) => (typeof v === "bigint" ? String(v) : v));
}

function randomHex(bytes: number): string {
  const a = new Uint8Array(bytes);
  globalThis.crypto.getRandomValues(a);
  return Array.from(a).map((b) => b.toString(16).padStart(2, "0")).join("");
}

async function sha256Hex(text: string): Promise<string> {
  const d = await globalThis.crypto.subtle.digest("SHA-256", new TextEncoder().encode(text));
  return Array.from(new Uint8Array(d)).map((b) => b.toString(16).padStart(2, "0")).join("");
}

interface Pending { op: "create" | "update" | "delete"; table: string; record: string; data: Row }

export class Client {
  readonly salt = randomHex(16);
  readonly views = new Map<string, View>();
  readonly failedWrites: FailedWrite[] = [];
  pending: Pending[] = [];
  authId: unknown;
  authText = "";
  private closed = false;
  private healthTimer: ReturnType<typeof setInterval> | undefined;
  private healthy = true;
  private unsubs: Array<() => void> = [];
  /** Edge table -> its LIVE query (shared by this client's views on it) and those views. */
  private follows = new Map<string, { live: Promise<{ kill(): Promise<void> }>; views: Set<View> }>();

  constructor(readonly db: Surreal, readonly opts: Required<Omit<ConnectOptions, "WebSocket">>) {}

  async start(): Promise<void> {
    await this.whoami();
    // With reconnect on, a drop shows as "reconnecting" (and "disconnected" only at the end).
    this.unsubs.push(this.db.subscribe("disconnected", () => this.lost()));
    this.unsubs.push(this.db.subscribe("reconnecting", () => this.lost()));
    this.unsubs.push(this.db.subscribe("connected", () => { void this.regained(); }));
    this.healthTimer = setInterval(() => { void this.checkHealth(); }, this.opts.healthIntervalMs);
  }

  private async whoami(): Promise<void> {
    const [got] = await this.db.query<[[unknown, string]]>(
      "RETURN [$auth.id, <string> $auth.id]").collect();
    if (!got || got[0] === undefined || got[0] === null) {
      throw new Error("the credentials did not sign in a record user");
    }
    this.authId = got[0];
    this.authText = String(got[1]);
  }

  private lost(): void {
    if (this.closed) return;
    for (const v of this.views.values()) v.setGap();
  }

  private async regained(): Promise<void> {
    if (this.closed) return;
    for (let delay = 100; !this.closed; delay = Math.min(delay * 2, 2000)) {
      try {
        if (!(await this.serviceHealthy())) throw new Error("service not healthy");
        // Subscribe, then read: a view read before its LIVE query runs again would miss an
        // edge written in between (the service repairs edges a crash took, seconds later).
        await this.refollow();
        for (const v of this.views.values()) await v.resume();
        this.healthy = true;
        return;
      } catch {
        await new Promise((r) => setTimeout(r, delay));
        if (this.db.status !== "connected") return; // the next "connected" resumes
      }
    }
  }

  private async serviceHealthy(): Promise<boolean> {
    try {
      const r = await fetch(this.opts.serviceUrl + "/health", { signal: AbortSignal.timeout(2000) });
      return r.status === 200;
    } catch {
      return false;
    }
  }

  private async checkHealth(): Promise<void> {
    if (this.closed || this.db.status !== "connected") return;
    const ok = await this.serviceHealthy();
    if (!ok && this.healthy) {
      this.healthy = false;
      this.lost();
    } else if (ok && !this.healthy) {
      await this.regained();
    }
  }

  /**
   * Start every followed table's LIVE query again and wait until each runs, before the views
   * read again after a reconnect. The SDK restarts a managed LIVE query by itself, but
   * without saying when it runs again, so a view's read could come first; the old one is
   * killed once the new one runs.
   */
  private async refollow(): Promise<void> {
    for (const [table, entry] of [...this.follows]) {
      const old = entry.live;
      const views = entry.views;
      const live = this.db.live(new Table(table)).then((sub) => {
        sub.subscribe(() => { for (const v of views) v.wake(); });
        return sub;
      });
      entry.live = live;
      await live;
      void old.then((sub) => sub.kill()).catch(() => undefined);
    }
  }

  /** Wake `view` on every notification of `table` (see the module comment). */
  async follow(table: string, view: View): Promise<void> {
    let entry = this.follows.get(table);
    if (!entry) {
      const views = new Set<View>();
      // A managed LIVE query: the SDK starts it again after a reconnect.
      const live = this.db.live(new Table(table)).then((sub) => {
        sub.subscribe(() => { for (const v of views) v.wake(); });
        return sub;
      });
      entry = { live, views };
      this.follows.set(table, entry);
    }
    entry.views.add(view);
    try {
      await entry.live;
    } catch (e) {
      if (this.follows.get(table) === entry) this.follows.delete(table);
      throw e;
    }
  }

  async unfollow(table: string, view: View): Promise<void> {
    const entry = this.follows.get(table);
    if (!entry) return;
    entry.views.delete(view);
    if (entry.views.size === 0) {
      this.follows.delete(table);
      await (await entry.live).kill().catch(() => undefined);
    }
  }

  async viewId(surql: string, params: Row): Promise<string> {
    const h = await sha256Hex(JSON.stringify([this.salt, surql, params]));
    return "query:c" + h.slice(0, 32);
  }

  /** Have the service hold the view (by its row, or `/view/register`: `registration`). */
  async register(id: string, surql: string, params: Row, ttl: string): Promise<void> {
    if (this.opts.registration === "bearer") await this.registerBearer(id, surql, params, ttl);
    else await this.registerRow(id, surql, params, ttl);
  }

  /**
   * CREATE the view's `_00_query` row (the schema sets `auth_id` to this user) and wait for
   * the service's answer on it: `state` (registered) or `error` (its refusal, thrown as a
   * ViewError after the row is deleted). A row already there is waited on; a row that is
   * gone is written again; while no answer comes `lastActiveAt` is touched every 2 s (a
   * change the service reads again: it may not have been ready).
   */
  private async registerRow(id: string, surql: string, params: Row, ttl: string): Promise<void> {
    const q = new RecordId("_00_query", id.replace(/^query:/, ""));
    const deadline = Date.now() + this.opts.registerTimeoutMs;
    let pokeAt = Date.now() + 2000;
    let pause = 5;
    let create = true;
    for (;;) {
      if (create) {
        try {
          await this.db.query(
            "CREATE $q SET surql = $s, params = $p, clientId = $c, ttl = $t, " +
            "lastActiveAt = time::now() RETURN NONE",
            { q, s: surql, p: params, c: this.opts.clientId, t: ttl }).collect();
        } catch (e) {
          if (!String(e).includes("already exists") && !isConflict(e)) {
            throw new ViewError(403, `cannot write the view's row: ${String(e)}`);
          }
        }
        create = false;  // after a conflict the read below says whether the row is there
      }
      const [rows] = await this.db.query<[Row[]]>("SELECT state, error FROM $q", { q }).collect();
      const row = rows?.[0];
      if (!row) {
        create = true;
      } else if (row.error) {
        const err = row.error as { error?: string; message?: string; status?: number };
        await this.db.query("DELETE $q", { q }).collect().catch(() => undefined);
        throw new ViewError(Number(err.status ?? 400), `${err.error}: ${err.message}`);
      } else if (row.state !== undefined && row.state !== null) {
        return;
      }
      const now = Date.now();
      if (now > deadline) {
        throw new ViewError(503, `the service did not answer on view ${id}'s row in time`);
      }
      if (now > pokeAt) {
        pokeAt = now + 2000;
        // Transport http: the database's event posts the row to the service inside this
        // write, and the service's answer (state or error) can be written onto the row before
        // this write commits, which then fails as a conflict. The answer is what was waited
        // for: read it.
        await this.db.query("UPDATE $q SET lastActiveAt = time::now() RETURN NONE", { q })
          .collect().catch((e) => { if (!isConflict(e)) throw e; });
      }
      await new Promise((r) => setTimeout(r, pause));
      pause = Math.min(pause * 2, 100);
    }
  }

  /** `POST /view/register` with the service's bearer; the service writes the row. */
  private async registerBearer(id: string, surql: string, params: Row, ttl: string): Promise<void> {
    const body = {
      id, surql, clientId: this.opts.clientId, ttl,
      params: { ...params, auth_id: this.authText },
      lastActiveAt: new Date().toISOString(),
    };
    const r = await fetch(this.opts.serviceUrl + "/view/register", {
      method: "POST",
      headers: { "Content-Type": "application/json",
        Authorization: `Bearer ${this.opts.serviceToken}` },
      body: JSON.stringify(body),
    });
    if (r.status !== 200) {
      const text = await r.text();
      let msg = text;
      try { msg = JSON.parse(text).message ?? text; } catch { /* plain text body */ }
      throw new ViewError(r.status, msg);
    }
  }

  async view(surql: string, params: Row = {}, opts: { ttl?: string } = {}): Promise<View> {
    const ttl = opts.ttl ?? "10m";
    ttlSecs(ttl);
    const id = await this.viewId(surql, params);
    const v = new View(this, id, surql, params, ttl);
    this.views.set(id, v);
    try {
      await v.start();
    } catch (e) {
      this.views.delete(id);
      throw e;
    }
    return v;
  }

  private async write(p: Pending, sql: string, vars: Row): Promise<unknown> {
    this.pending.push(p);
    for (const v of this.views.values()) v.changedLocally();
    try {
      // A DELETE takes the edges pointing at the record along, so a write can lose to the
      // SSP's edge transaction: SurrealDB calls that retryable, and it is no refusal.
      const [res] = await retried(() => this.db.query<[unknown[]]>(sql, vars).collect());
      if (!res || (Array.isArray(res) && res.length === 0)) {
        throw new Error("the database changed no record (not found or not permitted)");
      }
      return res;
    } catch (e) {
      this.failedWrites.push({ op: p.op, target: p.record, data: p.data, error: String(e) });
      throw e;
    } finally {
      this.pending = this.pending.filter((x) => x !== p);
      for (const v of this.views.values()) await v.reread().catch(() => undefined);
    }
  }

  create(record: string, data: Row): Promise<unknown> {
    return this.write({ op: "create", table: record.split(":")[0], record, data },
      "CREATE type::record($r) CONTENT $d", { r: record, d: data });
  }

  update(record: string, data: Row): Promise<unknown> {
    return this.write({ op: "update", table: record.split(":")[0], record, data },
      "UPDATE type::record($r) MERGE $d", { r: record, d: data });
  }

  delete(record: string): Promise<unknown> {
    return this.write({ op: "delete", table: record.split(":")[0], record, data: {} },
      "DELETE type::record($r) RETURN BEFORE", { r: record });
  }

  /** Write a pending job into outbox `table` and wait for its result. */
  async run(table: string, path: string, payload: unknown, timeoutMs = 60000): Promise<unknown> {
    const [created] = await this.db.query<[Row[]]>(
      "CREATE type::table($t) SET path = $p, payload = $d, status = 'pending'",
      { t: table, p: path, d: payload }).collect();
    const rid = created[0].id;
    const deadline = Date.now() + timeoutMs;
    for (let wait = 50; ; wait = Math.min(wait * 1.5, 500)) {
      const [rows] = await this.db.query<[Row[]]>("SELECT status, result, errors FROM $r",
        { r: rid }).collect();
      const job = rows[0] ?? {};
      if (job.status === "completed") return job.result;
      if (job.status === "failed") throw new JobFailed(String(rid), job.errors);
      if (Date.now() > deadline) throw new Error(`job ${String(rid)} still ${String(job.status)}`);
      await new Promise((r) => setTimeout(r, wait));
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    clearInterval(this.healthTimer);
    for (const v of [...this.views.values()]) await v.close().catch(() => undefined);
    for (const u of this.unsubs) u();
    await this.db.close();
  }
}

/** A write that lost to a concurrent one (SurrealDB: "... can be retried"). */
function isConflict(e: unknown): boolean {
  const text = String(e);
  return text.includes("can be retried") || /conflict/i.test(text);
}

/**
 * `op()`, again after a write conflict (a short growing pause), at most `attempts` times. Over
 * transport http the database's events post a write to the service from inside it, and the
 * service may write the same record (or edges a DELETE takes along) before it commits.
 */
async function retried<T>(op: () => Promise<T>, attempts = 8): Promise<T> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await op();
    } catch (e) {
      if (attempt >= attempts - 1 || !isConflict(e)) throw e;
      await new Promise((r) => setTimeout(r, 10 * (attempt + 1)));
    }
  }
}

export class View implements AsyncIterable<Step> {
  status: Status = "materializing";
  rows: Row[] = [];
  readonly record: RecordId;
  readonly table: string;
  private readonly readQuery: string;
  /** Optimistic creates the view's WHERE surely excludes stay out of it. */
  private readonly where: WhereTest;
  private readonly window: Window;
  private serverRows: Row[] = [];
  private callbacks = new Set<(s: Step) => void>();
  private refreshTimer: ReturnType<typeof setTimeout> | undefined;
  private reading: Promise<void> | undefined;
  private again = false;
  private closed = false;

  constructor(readonly client: Client, readonly id: string, readonly surql: string,
              readonly params: Row, readonly ttl: string) {
    this.record = new RecordId("_00_query", id.replace(/^query:/, ""));
    this.table = /\bFROM\s+([A-Za-z0-9_]+)/i.exec(surql)?.[1] ?? "";
    this.readQuery = membersQuery(surql);
    this.where = whereFilter(surql);
    this.window = new Window(surql);
  }

  get edgeTable(): string {
    return edgeTable(this.client.authText, this.client.opts.refMode);
  }

  async start(): Promise<void> {
    const registeredAt = Date.now();
    await this.client.register(this.id, this.surql, this.params, this.ttl);
    await this.follow();
    await this.reread();
    // Every 0.9 x ttl counted from the registration's lastActiveAt, not from the end of the
    // first read: a slow read must not eat the 10% margin.
    const period = 900 * ttlSecs(this.ttl);
    const tick = (): void => {
      if (this.closed) return;
      this.refreshTimer = setTimeout(tick, period);
      void this.refresh().catch(() => undefined);
    };
    this.refreshTimer = setTimeout(tick, Math.max(0, registeredAt + period - Date.now()));
  }

  private async follow(): Promise<void> {
    await this.client.follow(this.edgeTable, this);
  }

  wake(): void {
    if (this.status === "gap" || this.closed) return;
    void this.reread().catch(() => undefined);
  }

  /** Write lastActiveAt = now (the spec's refresh); register again when the row is gone. */
  async refresh(): Promise<void> {
    if (this.status === "gap") return;
    const [got] = await this.client.db.query<[Row[]]>(
      "UPDATE $q SET lastActiveAt = time::now()", { q: this.record }).collect();
    if (!got || got.length === 0) {
      await this.client.register(this.id, this.surql, this.params, this.ttl);
    }
  }

  setGap(): void {
    this.status = "gap";
    this.emit(this.rows);
  }

  async resume(): Promise<void> {
    await this.client.register(this.id, this.surql, this.params, this.ttl);
    this.status = "materializing";
    await this.reread();
  }

  /** Reads coalesce: one in flight, at most one more queued behind it. */
  reread(): Promise<void> {
    if (this.reading) {
      this.again = true;
      return this.reading;
    }
    this.reading = (async () => {
      try {
        do {
          this.again = false;
          await this.readOnce();
        } while (this.again && !this.closed);
      } finally {
        this.reading = undefined;
      }
    })();
    return this.reading;
  }

  private async readOnce(): Promise<void> {
    // The members sorted: rows that tie on the ORDER BY keep id order, as in a read of the
    // table (the edges' own order is the edge ids').
    const text = "SELECT state, rowCount FROM $q; " +
      `LET $${MEMBERS_PARAM} = array::sort((SELECT VALUE out FROM type::table($et) ` +
      "WHERE in = $q AND !removed)); " + this.readQuery;
    const res = await this.client.db.query<unknown[]>(text,
      { ...this.params, q: this.record, et: this.edgeTable }).collect();
    const meta = res[0] as Row[];
    const rows = res[res.length - 1] as Row[];
    if (!meta || meta.length === 0) {
      await this.client.register(this.id, this.surql, this.params, this.ttl);
      this.status = "materializing";
    } else {
      this.status = meta[0].state === "ready" ? "ready" : "materializing";
    }
    this.serverRows = rows ?? [];
    this.emit(this.overlay(this.serverRows));
  }

  changedLocally(): void {
    this.emit(this.overlay(this.serverRows));
  }

  /**
   * Pending optimistic writes on this view's table laid over the server's rows: a create or
   * an update placed by the view's ORDER BY and cut by its window, and left out when the
   * view's WHERE surely excludes it. Where the client cannot tell, a create is shown at the
   * end and an update in place, until the database's answer corrects them.
   */
  private overlay(rows: Row[]): Row[] {
    const out = [...rows];
    const auth = this.client.authId;
    for (const p of this.client.pending) {
      if (p.table !== this.table) continue;
      const idx = out.findIndex((r) => key(r) === p.record);
      if (p.op === "delete" && idx >= 0) out.splice(idx, 1);
      else if (p.op === "update" && idx >= 0) {
        const [old] = out.splice(idx, 1);
        const row = { ...old, ...p.data };
        if (this.where(row, this.params, auth) !== false) this.put(out, row, idx);
      } else if (p.op === "create" && idx < 0) {
        const row = { ...p.data, id: new StringRecordId(p.record) };
        if (this.where(row, this.params, auth) !== false) this.put(out, row, out.length);
      }
    }
    return out;
  }

  private put(out: Row[], row: Row, fallback: number): void {
    const at = this.window.place(out, row, this.params);
    if (at === undefined) out.splice(fallback, 0, row);
    else if (at >= 0) {
      out.splice(at, 0, row);
      const limit = this.window.limit(this.params);
      if (limit !== undefined && out.length > limit) out.pop();  // the last row makes room
    }
  }

  private emit(rows: Row[]): void {
    const before = new Map(this.rows.map((r) => [key(r), r]));
    const after = new Map(rows.map((r) => [key(r), r]));
    const step: Step = {
      status: this.status,
      rows,
      added: [...after].filter(([k]) => !before.has(k)).map(([, r]) => r),
      removed: [...before].filter(([k]) => !after.has(k)).map(([, r]) => r),
      changed: [...after].filter(([k, r]) => before.has(k) && !same(before.get(k), r))
        .map(([, r]) => r),
    };
    this.rows = rows;
    for (const cb of [...this.callbacks]) cb(step);
  }

  /** Call `cb` on every step; returns the unsubscribe function. */
  subscribe(cb: (s: Step) => void): () => void {
    this.callbacks.add(cb);
    return () => { this.callbacks.delete(cb); };
  }

  async *[Symbol.asyncIterator](): AsyncIterator<Step> {
    const queue: Step[] = [];
    let wakeUp: (() => void) | undefined;
    const unsub = this.subscribe((s) => { queue.push(s); wakeUp?.(); wakeUp = undefined; });
    try {
      yield { status: this.status, rows: this.rows, added: [], removed: [], changed: [] };
      while (!this.closed) {
        if (queue.length === 0) await new Promise<void>((r) => { wakeUp = r; });
        while (queue.length) yield queue.shift()!;
      }
    } finally {
      unsub();
    }
  }

  /** Stop following and delete the `_00_query` row (the service unregisters the view). */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    clearTimeout(this.refreshTimer);
    await this.client.unfollow(this.edgeTable, this);
    // transport http: the service's teardown, posted from inside this DELETE, can write the
    // row first
    await retried(() => this.client.db.query("DELETE $q", { q: this.record }).collect());
    this.client.views.delete(this.id);
  }
}

/** Sign in as a record user (or with a token) and return the session's Client. */
export async function connect(url: string, namespace: string, database: string, auth: Auth,
                              opts: ConnectOptions): Promise<Client> {
  const db = new Surreal(opts.WebSocket ? { websocketImpl: opts.WebSocket as typeof WebSocket } : {});
  const authentication = "token" in auth ? auth.token
    : { namespace, database, access: auth.access, variables: auth.variables };
  await db.connect(url, { namespace, database, authentication: authentication as any,
    reconnect: { enabled: true, attempts: -1, retryDelay: 100, retryDelayMax: 2000 } });
  const client = new Client(db, {
    serviceUrl: opts.serviceUrl.replace(/\/$/, ""),
    registration: opts.registration ?? "row",
    serviceToken: opts.serviceToken ?? "dev",
    registerTimeoutMs: opts.registerTimeoutMs ?? 60000,
    refMode: opts.refMode ?? "dedicated",
    healthIntervalMs: opts.healthIntervalMs ?? 1000,
    clientId: opts.clientId ?? randomHex(16),
  });
  await client.start();
  return client;
}
