// A live top-10 list: the ten best-scored threads, printed again whenever another process
// writes. Against `ops/run --memory` as it starts (database ws://127.0.0.1:8000, root/root,
// namespace and database `main`, scheduler on :9667); the SVC_DB_* variables and
// SVC_SERVICE_URL point it elsewhere. `--steps N` stops after N updates of the ready list.
//
// The table must be hooked into the service (`svc schema apply` after it exists): the example
// says so on stderr when it is not. The steps are in clients/README.md, "Example".
import { Surreal } from "surrealdb";
import WebSocket from "ws";
import { connect } from "../dist/index.js";

const env = process.env;
const url = env.SVC_DB_URL ?? "ws://127.0.0.1:8000";
const namespace = env.SVC_DB_NS ?? "main";
const database = env.SVC_DB_NAME ?? "main";
const serviceUrl = env.SVC_SERVICE_URL ?? "http://127.0.0.1:9667";
const stepsArg = process.argv.indexOf("--steps");
const steps = stepsArg > 0 ? Number(process.argv[stepsArg + 1]) : Infinity;
const TOP10 = "SELECT id, title, score FROM thread ORDER BY score DESC LIMIT 10";

// The app's schema, as its owner would deploy it (root, once).
const root = new Surreal({ websocketImpl: WebSocket });
await root.connect(url, { namespace, database, reconnect: false,
  authentication: { username: env.SVC_DB_USER ?? "root", password: env.SVC_DB_PASS ?? "root" } });
await root.query(`
DEFINE TABLE IF NOT EXISTS thread SCHEMALESS PERMISSIONS FOR select FULL;
DEFINE TABLE IF NOT EXISTS user SCHEMALESS PERMISSIONS FOR select WHERE id = $auth.id;
DEFINE ACCESS IF NOT EXISTS account ON DATABASE TYPE RECORD
    SIGNUP (CREATE user SET name = $name, pass = crypto::argon2::generate($pass))
    SIGNIN (SELECT * FROM user WHERE name = $name AND crypto::argon2::compare(pass, $pass))
    DURATION FOR SESSION 1h;`).collect();
const [info] = await root.query("INFO FOR TABLE thread").collect();
await root.close();
if (!("_00_rv" in (info?.fields ?? {}))) {
  // The service follows only tables `svc schema apply` hooked (changefeed or events).
  console.error("thread is not hooked into the service yet: run `svc schema apply` " +
    "(clients/README.md); the list stays empty until then");
}
const creds = { access: "account", variables: { name: "demo-ts", pass: "demo-pass" } };
const signup = new Surreal({ websocketImpl: WebSocket });
await signup.connect(url, { reconnect: false });
await signup.signup({ namespace, database, ...creds }).catch(() => undefined);
await signup.close();

const client = await connect(url, namespace, database, creds, { serviceUrl, WebSocket });
const top = await client.view(TOP10);
let seen = 0;
let ready = false;
for await (const step of top) {
  console.log(`[${step.status}] ` + step.rows.map((r) => `${r.title} (${r.score})`).join(", "));
  if (step.status === "ready" && !ready) ready = true;
  else if (ready && (step.added.length || step.removed.length || step.changed.length)) {
    if (++seen >= steps) break;
  }
}
await client.close();
