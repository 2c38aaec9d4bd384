/**
 * App client for live views (TypeScript, browsers and Node 20, on the official `surrealdb` SDK).
 * The same shape as the Python client (`viewclient`): connect, view(surql, params, {ttl}) with
 * status materializing/ready/gap and rows in the query's order, subscribe / async iteration
 * with the added, removed and changed rows of each step, lastActiveAt refreshed at 0.9 x ttl,
 * close(), reconnect with gap reporting, optimistic writes with rollback and a failed-writes
 * list, run(table, path, payload) through an outbox job.
 *
 * Edge notifications are only wake-ups: each one makes the view read its members and rows
 * again in one request. That also makes the client immune to the SDK 2.0.8 defect that loses
 * a notification arriving in the same tick as the one before it (ChannelIterator.submit keeps
 * its resolved waiter): the read triggered by the first already sees the second's write.
 */

import { RecordId, StringRecordId, Surreal, Table } from "surrealdb";
import { MEMBERS_PARAM, edgeTable, membersQuery, ttlSecs } from "./query.js";

export { edgeTable, membersQuery, ttlSecs } from "./query.js";

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
  /** Bearer for `/view/register` (any value when the service runs without a secret). */
  serviceToken?: string;
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

  async viewId(surql: string, params: Row): Promise<string> {
    const h = await sha256Hex(JSON.stringify([this.salt, surql, params]));
    return "query:c" + h.slice(0, 32);
  }

  /** Ask the service to hold the view; it writes the `_00_query` row. */
  async register(id: string, surql: string, params: Row, ttl: string): Promise<void> {
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
      const [res] = await this.db.query<[unknown[]]>(sql, vars).collect();
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

export class View implements AsyncIterable<Step> {
  status: Status = "materializing";
  rows: Row[] = [];
  readonly record: RecordId;
  readonly table: string;
  private readonly readQuery: string;
  private serverRows: Row[] = [];
  private callbacks = new Set<(s: Step) => void>();
  private live: { kill(): Promise<void>; subscribe(h: (m: any) => void): () => void } | undefined;
  private refreshTimer: ReturnType<typeof setTimeout> | undefined;
  private reading: Promise<void> | undefined;
  private again = false;
  private closed = false;

  constructor(readonly client: Client, readonly id: string, readonly surql: string,
              readonly params: Row, readonly ttl: string) {
    this.record = new RecordId("_00_query", id.replace(/^query:/, ""));
    this.table = /\bFROM\s+([A-Za-z0-9_]+)/i.exec(surql)?.[1] ?? "";
    this.readQuery = membersQuery(surql);
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
    // A managed LIVE query: the SDK starts it again after a reconnect.
    const live = await this.client.db.live(new Table(this.edgeTable));
    live.subscribe((m) => {
      const inn = m?.value?.in;
      if (inn !== undefined && String(inn) === String(this.record)) this.wake();
    });
    this.live = live;
  }

  private wake(): void {
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
    const text = "SELECT state, rowCount FROM $q; " +
      `LET $${MEMBERS_PARAM} = (SELECT VALUE out FROM type::table($et) WHERE in = $q AND !removed); ` +
      this.readQuery;
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

  private overlay(rows: Row[]): Row[] {
    const out = [...rows];
    for (const p of this.client.pending) {
      if (p.table !== this.table) continue;
      const idx = out.findIndex((r) => key(r) === p.record);
      if (p.op === "delete" && idx >= 0) out.splice(idx, 1);
      else if (p.op === "update" && idx >= 0) out[idx] = { ...out[idx], ...p.data };
      else if (p.op === "create" && idx < 0) out.push({ ...p.data, id: new StringRecordId(p.record) });
    }
    return out;
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
    await this.live?.kill().catch(() => undefined);
    await this.client.db.query("DELETE $q", { q: this.record }).collect();
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
    serviceToken: opts.serviceToken ?? "dev",
    refMode: opts.refMode ?? "dedicated",
    healthIntervalMs: opts.healthIntervalMs ?? 1000,
    clientId: opts.clientId ?? randomHex(16),
  });
  await client.start();
  return client;
}
