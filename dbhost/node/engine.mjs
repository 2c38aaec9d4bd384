// The database host's Node engine: SurrealDB's Node.js build behind a frame pipe.
//
// The Python host (dbhost/nodeengine.py) starts this script and talks to it over stdin/stdout.
// It exists for one reason: the Node build of the engine has the http::* functions (and lets us
// allow network targets), which the Python embedded build lacks, so the spec's default ingest
// transport (database events calling the scheduler's /ingest inside the writing transaction)
// can run for real. Everything else a host does (sessions, LIVE, credentials, limits) stays
// in the Python host: this side only executes RPC frames.
//
// argv: <engine url>. Env: SVC_DB_ALLOW_NET: comma-separated network targets the http::*
// functions may reach (host or host:port); empty or unset means none.
//
// Pipe protocol, all integers big-endian:
//   request  u32 length, u32 tag, payload (a CBOR RPC request, as the embedded engine takes)
//   reply    u32 length, u32 tag, u8 status (0 reply, 1 error text), payload
// The first reply, tag 0, says the engine is open (payload: its version) or why not (status 1).
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

function nativeBinding() {
  // The package exports only its JS wrapper, which re-encodes every value; the native binding
  // takes and returns CBOR bytes, which is what a pass-through needs.
  const pkg = dirname(fileURLToPath(import.meta.resolve("@surrealdb/node")));
  const arch = { x64: "x64", arm64: "arm64" }[process.arch];
  if (process.platform !== "linux" || !arch) {
    throw new Error(`no SurrealDB Node build for ${process.platform}-${process.arch}`);
  }
  return createRequire(import.meta.url)(join(pkg, `surrealdb-node.linux-${arch}-gnu.node`));
}

function writeFrame(tag, status, payload) {
  const head = Buffer.alloc(9);
  head.writeUInt32BE(payload.length, 0);
  head.writeUInt32BE(tag, 4);
  head.writeUInt8(status, 8);
  process.stdout.write(Buffer.concat([head, payload]));
}

function errorText(err) {
  return Buffer.from(String(err && err.message ? err.message : err), "utf8");
}

async function main() {
  const url = process.argv[2];
  const targets = (process.env.SVC_DB_ALLOW_NET || "").split(",").map((s) => s.trim())
    .filter(Boolean);
  let engine;
  try {
    const { SurrealNodeEngine } = nativeBinding();
    engine = await SurrealNodeEngine.connect(url, {
      capabilities: {
        functions: true,
        network_targets: targets.length ? { allow: targets } : false,
      },
    });
  } catch (err) {
    writeFrame(0, 1, errorText(err));
    process.exitCode = 2;
    return;
  }
  writeFrame(0, 0, Buffer.from("open", "utf8"));

  let pending = Buffer.alloc(0);
  let inFlight = 0;
  let ended = false;
  const finish = () => {
    if (ended && inFlight === 0) {
      engine.free();
      process.stdout.end();
    }
  };
  process.stdin.on("data", (chunk) => {
    pending = pending.length ? Buffer.concat([pending, chunk]) : chunk;
    while (pending.length >= 8) {
      const length = pending.readUInt32BE(0);
      if (pending.length < 8 + length) break;
      const tag = pending.readUInt32BE(4);
      const payload = pending.subarray(8, 8 + length);
      pending = pending.subarray(8 + length);
      inFlight += 1;
      engine.execute(new Uint8Array(payload)).then(
        (reply) => writeFrame(tag, 0, Buffer.from(reply)),
        (err) => writeFrame(tag, 1, errorText(err)),
      ).finally(() => { inFlight -= 1; finish(); });
    }
  });
  // The host closes our stdin to stop us (and the lifeline: its death closes the pipe too).
  process.stdin.on("end", () => { ended = true; finish(); });
}

main();
