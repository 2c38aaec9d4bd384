/**
 * The real stack for the client's tests, started as the Python suite starts it: the database
 * host (on disk, so it survives kill -9), `svc schema apply`, a standalone SSP (changefeed
 * transport) and a small backend for outbox jobs, all on free loopback ports, from this
 * checkout's virtual environment (`SVC_PYTHON`, else `<repo>/.venv/bin/python`).
 *
 * `SVC_TS_MODE` picks the stack: `standalone` (default: the SSP alone, edge mode
 * `dedicated`), `scheduler` (a scheduler tailing the changefeed, its SSP linked to it; the
 * clients talk to the scheduler), `single` (standalone, edge mode `single`), `http`
 * (standalone, transport `http`: the host runs SurrealDB's Node build, whose events post each
 * change to the SSP's /ingest) or `http-scheduler` (transport `http` with a scheduler: the
 * events post to the scheduler's /ingest) or `http-single` (transport `http`, standalone, edge
 * mode `single`). The service holds a secret the clients never get:
 * they register their views by their rows.
 */

import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { type AddressInfo, createServer as netServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { Surreal } from "surrealdb";
import WebSocket from "ws";

export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "../../..");
const PY = process.env.SVC_PYTHON ?? join(ROOT, ".venv/bin/python");
const ROOT_USER = "root";
const ROOT_PASS = "root-ts-pass";
export const SERVICE_SECRET = "ts-client-service-secret-7a8b";
const MODES = ["standalone", "scheduler", "single", "http", "http-scheduler", "http-single"] as const;
export type Mode = typeof MODES[number];
export const MODE = (process.env.SVC_TS_MODE ?? "standalone") as Mode;
if (!MODES.includes(MODE)) throw new Error(`SVC_TS_MODE ${MODE} is not one of ${MODES.join(", ")}`);
/** Transport http: database events post each change to the service's /ingest. */
export const HTTP = MODE.startsWith("http");
/** The clients talk to a scheduler, which has an SSP linked to it. */
export const SCHEDULED = MODE === "scheduler" || MODE === "http-scheduler";
const TRANSPORT = HTTP ? "http" : "changefeed";
export const REF_MODE = MODE.endsWith("single") ? "single" : "dedicated";

export async function freePort(): Promise<number> {
  return new Promise((ok, fail) => {
    const s = netServer();
    s.once("error", fail);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address() as AddressInfo;
      s.close(() => ok(port));
    });
  });
}

/** Until `url` answers 200 (with `anyStatus`: answers at all, as the scheduler's /health
 * does with 503 until an SSP is ready). */
async function waitHealth(url: string, proc: Proc, timeoutMs = 60000,
                          anyStatus = false): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (proc.child.exitCode !== null) {
      throw new Error(`${proc.name} exited ${proc.child.exitCode}:\n${proc.log().slice(-3000)}`);
    }
    try {
      const r = await fetch(url, { signal: AbortSignal.timeout(1000) });
      if (r.status === 200 || anyStatus) return;
    } catch { /* not up yet */ }
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`${proc.name}: ${url} not healthy:\n${proc.log().slice(-3000)}`);
}

export class Proc {
  child: ChildProcess;
  constructor(readonly name: string, readonly argv: string[], readonly env: NodeJS.ProcessEnv,
              readonly logPath: string) {
    this.child = this.spawn();
  }
  private spawn(): ChildProcess {
    const fd = openSync(this.logPath, "a");
    return spawn(this.argv[0], this.argv.slice(1), {
      cwd: ROOT, env: this.env, stdio: ["ignore", fd, fd], detached: true,
    });
  }
  log(): string {
    try { return readFileSync(this.logPath, "utf8"); } catch { return ""; }
  }
  alive(): boolean { return this.child.exitCode === null && this.child.signalCode === null; }
  async kill9(): Promise<void> {
    if (!this.alive()) return;
    const exited = new Promise((r) => this.child.once("exit", r));
    process.kill(-this.child.pid!, "SIGKILL");
    await exited;
  }
  async stop(): Promise<void> {
    if (!this.alive()) return;
    const exited = new Promise((r) => this.child.once("exit", r));
    process.kill(-this.child.pid!, "SIGTERM");
    const t = setTimeout(() => { try { process.kill(-this.child.pid!, "SIGKILL"); } catch { /* gone */ } }, 40000);
    await exited;
    clearTimeout(t);
  }
  restart(): void { this.child = this.spawn(); }
}

function baseEnv(extra: Record<string, string>): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith("SVC_")) env[k] = v;
  return { ...env, PYTHONUNBUFFERED: "1", ...extra };
}

export const SCHEMA = `
DEFINE TABLE user SCHEMAFULL PERMISSIONS FOR select WHERE id = $auth.id;
DEFINE FIELD name ON user TYPE string;
DEFINE FIELD pass ON user TYPE string;
DEFINE INDEX user_name ON user FIELDS name UNIQUE;
DEFINE ACCESS account ON DATABASE TYPE RECORD
    SIGNUP (CREATE user SET name = $name, pass = crypto::argon2::generate($pass))
    SIGNIN (SELECT * FROM user WHERE name = $name AND crypto::argon2::compare(pass, $pass))
    DURATION FOR SESSION 1h;
DEFINE TABLE tag SCHEMAFULL PERMISSIONS FULL;
DEFINE FIELD label ON tag TYPE string;
DEFINE TABLE post SCHEMAFULL PERMISSIONS
    FOR select WHERE owner = $auth.id
    FOR create WHERE owner = $auth.id
    FOR update, delete WHERE owner = $auth.id AND locked != true;
DEFINE FIELD owner ON post TYPE record<user>;
DEFINE FIELD title ON post TYPE string;
DEFINE FIELD n ON post TYPE int DEFAULT 0;
DEFINE FIELD locked ON post TYPE option<bool>;
DEFINE FIELD tag ON post TYPE option<record<tag>>;
DEFINE TABLE job SCHEMALESS PERMISSIONS FULL;
DEFINE TABLE thread SCHEMALESS PERMISSIONS FOR select FULL;
CREATE tag:a SET label = 'alpha';
CREATE tag:b SET label = 'beta';
`;

export class Stack {
  tmp = mkdtempSync(join(tmpdir(), "svc-ts-client-"));
  ns = "tsclient";
  db = "db" + Math.random().toString(16).slice(2, 10);
  dbPort = 0;
  sspPort = 0;
  schedPort = 0;
  host!: Proc;
  ssp!: Proc;
  scheduler: Proc | undefined;
  backend!: Server;

  get wsUrl(): string { return `ws://127.0.0.1:${this.dbPort}/rpc`; }
  /** Where clients check health (and register with a bearer): the scheduler or the SSP. */
  get serviceUrl(): string {
    return `http://127.0.0.1:${SCHEDULED ? this.schedPort : this.sspPort}`;
  }
  get sspUrl(): string { return `http://127.0.0.1:${this.sspPort}`; }

  private dbEnv(): Record<string, string> {
    return { SVC_DB_URL: this.wsUrl, SVC_DB_USER: ROOT_USER, SVC_DB_PASS: ROOT_PASS,
      SVC_DB_NS: this.ns, SVC_DB_NAME: this.db };
  }

  async start(): Promise<void> {
    this.backend = createServer((req, res) => {
      res.writeHead(200, { "Content-Type": "application/json" });
      res.end(JSON.stringify({ ok: true, path: req.url }));
    });
    await new Promise<void>((r) => this.backend.listen(0, "127.0.0.1", r));
    const backendUrl = `http://127.0.0.1:${(this.backend.address() as AddressInfo).port}`;
    this.dbPort = await freePort();
    // Transport http needs `http::post` in events: only SurrealDB's Node build has it.
    const engine = HTTP ? ["--engine", "node", "--allow-net", "127.0.0.1"] : [];
    this.host = new Proc("svc-db", [PY, "-m", "dbhost", "--bind", `127.0.0.1:${this.dbPort}`,
      "--path", join(this.tmp, "data"), ...engine], baseEnv({ SVC_DB_USER: ROOT_USER, SVC_DB_PASS: ROOT_PASS }),
    join(this.tmp, "db.log"));
    await waitHealth(`http://127.0.0.1:${this.dbPort}/health`, this.host);
    const root = await this.root();
    await root.query(SCHEMA).collect();
    await root.close();
    // The service's ports first: with transport http the events name its /ingest (the SSP's,
    // or the scheduler's) and carry the bearer derived from the service's secret.
    this.sspPort = await freePort();
    if (SCHEDULED) this.schedPort = await freePort();
    const ingest = HTTP ? ["--ingest-url", `${this.serviceUrl}/ingest`] : [];
    const apply = spawnSync(PY, ["-m", "svccli", "schema", "apply", "--transport", TRANSPORT,
      ...ingest], { cwd: ROOT, env: baseEnv({ ...this.dbEnv(),
      ...(TRANSPORT === "http" ? { SVC_AUTH_SECRET: SERVICE_SECRET } : {}) }),
      encoding: "utf8", timeout: 60000 });
    if (apply.status !== 0) throw new Error("schema apply failed: " + apply.stderr + apply.stdout);
    const linked: Record<string, string> = {};
    if (SCHEDULED) {
      const config = join(this.tmp, "scheduler.json");  // YAML is a superset of JSON
      writeFileSync(config, JSON.stringify({
        db: { url: this.wsUrl, namespace: this.ns, database: this.db, username: ROOT_USER,
          password: ROOT_PASS },
        ingest_host: "127.0.0.1", ingest_port: this.schedPort,
        replica_db_path: join(this.tmp, "sched/replica.sqlite3"),
        wal_path: join(this.tmp, "sched/wal"),
        ssp_poll_interval_ms: 50, heartbeat_interval_ms: 100,
        // A killed SSP is noticed within it: the scheduler's /health fails, clients see a gap.
        heartbeat_timeout_ms: 1500,
      }));
      this.scheduler = new Proc("svc-scheduler", [join(dirname(PY), "svc-scheduler"),
        "--config", config], baseEnv({ SVC_INGEST_TRANSPORT: TRANSPORT,
        SVC_DRIFT_CHECK: "false", SVC_ADMIN_HOST: "127.0.0.1",
        SVC_ADMIN_PORT: String(await freePort()), SVC_AUTH_SECRET: SERVICE_SECRET }),
      join(this.tmp, "scheduler.log"));
      await waitHealth(`${this.serviceUrl}/health`, this.scheduler, 60000, true);
      Object.assign(linked, { SVC_SCHEDULER_URL: this.serviceUrl, SVC_SSP_ID: "ssp-ts",
        HEARTBEAT_INTERVAL_MS: "200" });
    }
    const jobs = { job_tables: { main: { name: "job", base_url: backendUrl,
      auth_token: "backend-token", concurrency: 2, timeout_secs: 5, lease_secs: 3,
      backoff_ms: 50 } } };
    this.ssp = new Proc("svc-ssp", [PY, "-m", "ssp"], baseEnv({
      ...this.dbEnv(), SVC_SSP_LISTEN_ADDR: `127.0.0.1:${this.sspPort}`,
      SVC_SSP_RUN_DIR: join(this.tmp, "ssp-run"), SVC_SSP_SHARDS: "1",
      SVC_INGEST_TRANSPORT: TRANSPORT, SVC_SSP_QUERY_UPDATE_THROTTLE_MS: "20",
      SVC_SCHEMA_POLL_SECS: "1", TTL_CLEANUP_INTERVAL_SECS: "1",
      SVC_JOB_CONFIG: JSON.stringify(jobs), SVC_SSP_JOB_SWEEP_SECS: "1",
      SVC_AUTH_SECRET: SERVICE_SECRET, SVC_SSP_REF_MODE: REF_MODE, ...linked,
    }), join(this.tmp, "ssp.log"));
    await waitHealth(this.sspUrl + "/health", this.ssp);
    if (this.scheduler) await waitHealth(this.serviceUrl + "/health", this.scheduler);
  }

  async restartSsp(): Promise<void> {
    this.ssp.restart();
    await waitHealth(this.sspUrl + "/health", this.ssp);
    if (this.scheduler) await waitHealth(this.serviceUrl + "/health", this.scheduler);
  }

  async restartHost(): Promise<void> {
    this.host.restart();
    await waitHealth(`http://127.0.0.1:${this.dbPort}/health`, this.host);
  }

  async root(): Promise<Surreal> {
    const db = new Surreal({ websocketImpl: WebSocket as unknown as typeof globalThis.WebSocket });
    await db.connect(this.wsUrl, { authentication: { username: ROOT_USER, password: ROOT_PASS },
      reconnect: false });
    await db.query(`DEFINE NAMESPACE IF NOT EXISTS ${this.ns}; USE NS ${this.ns}; ` +
      `DEFINE DATABASE IF NOT EXISTS ${this.db};`).collect();
    await db.use({ namespace: this.ns, database: this.db });
    return db;
  }

  /** A query as root, retried on a write conflict (an app's DELETE can meet the SSP's edges). */
  async asRoot(sql: string, vars: Record<string, unknown> = {}): Promise<unknown[]> {
    const root = await this.root();
    try {
      for (let attempt = 0; ; attempt++) {
        try {
          return await root.query(sql, vars).collect();
        } catch (e) {
          if (!String(e).includes("retried") || attempt > 6) throw e;
          await new Promise((r) => setTimeout(r, 20));
        }
      }
    } finally {
      await root.close();
    }
  }

  async stop(): Promise<void> {
    await this.ssp?.stop();
    await this.scheduler?.stop();
    await this.host?.stop();
    await new Promise((r) => this.backend?.close(r));
    rmSync(this.tmp, { recursive: true, force: true });
  }
}

export async function waitFor<T>(pred: () => Promise<T | undefined | null | false>,
                                 what: string, timeoutMs = 30000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  while (Date.now() < deadline) {
    try {
      const v = await pred();
      if (v) return v;
      last = v;
    } catch (e) {
      last = e;
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`${what} not reached; last ${String(last)}`);
}
