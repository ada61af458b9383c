// Starts a real `progressdb serve` for the tests: the binary is
// PROGRESSDB_BIN, which `npm test` (test/run.mjs) and the Go test that runs
// this suite build and set.
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { get as httpsGet } from "node:https";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";

export const apiKey = "key-1";
export const adminToken = "admin-1";


function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

/** GET url's status over HTTPS, trusting ca. */
function httpsStatus(url, ca) {
  return new Promise((resolve, reject) => {
    httpsGet(url, { ca }, (res) => {
      res.resume();
      resolve(res.statusCode);
    }).on("error", reject);
  });
}

/**
 * Starts a server with a database in a temporary folder, the API key, the
 * admin token, a backup folder and env (overriding; "" unsets; "{dir}" in
 * a value is the server's temporary folder, removed once it has stopped),
 * and registers its stop with t.after. Returns its base URL: https:// when
 * tls.ca (PEM) is given, which verifies the server's certificate.
 */
export async function serve(t, env = {}, tls = undefined) {
  // A test without a server fails, naming the setting, rather than skip.
  if (!process.env.PROGRESSDB_BIN) throw new Error("PROGRESSDB_BIN is not set: run npm test, which builds the server, or set it to a progressdb binary");
  const dir = mkdtempSync(join(tmpdir(), "progressdb-ts-"));
  const port = await freePort();
  const vars = {
    PATH: process.env.PATH,
    PROGRESSDB_ADDR: `127.0.0.1:${port}`,
    PROGRESSDB_DB_PATH: join(dir, "db"),
    PROGRESSDB_BACKUP_PATH: join(dir, "backups"),
    PROGRESSDB_API_KEY: apiKey,
    PROGRESSDB_ADMIN_TOKEN: adminToken,
    PROGRESSDB_LOG_LEVEL: "warn",
    ...env,
  };
  for (const [k, v] of Object.entries(vars)) {
    if (v === "") delete vars[k];
    else vars[k] = v.replaceAll("{dir}", dir);
  }
  const child = spawn(process.env.PROGRESSDB_BIN, ["serve"], { env: vars, stdio: ["ignore", "pipe", "pipe"] });
  let logs = "";
  child.stdout.on("data", (b) => (logs += b));
  child.stderr.on("data", (b) => (logs += b));
  const exited = new Promise((resolve) => child.once("exit", (code, signal) => resolve({ code, signal })));
  t.after(async () => {
    child.kill("SIGTERM");
    // A server that does not stop is killed and named, not waited for.
    let timer;
    const stopped = await Promise.race([
      exited,
      new Promise((resolve) => (timer = setTimeout(() => resolve(undefined), 30000))),
    ]);
    clearTimeout(timer);
    if (stopped === undefined) {
      child.kill("SIGKILL");
      await exited;
    }
    rmSync(dir, { recursive: true, force: true });
    if (stopped === undefined) throw new Error(`serve did not stop within 30 s of SIGTERM:\n${logs}`);
    if (stopped.code !== 0) throw new Error(`serve exited ${stopped.code}:\n${logs}`);
  });
  const base = `${tls ? "https" : "http"}://127.0.0.1:${port}`;
  const deadline = Date.now() + 30000;
  let gone = false;
  exited.then(() => (gone = true));
  for (;;) {
    try {
      if (tls) {
        if ((await httpsStatus(`${base}/healthz`, tls.ca)) === 200) return base;
      } else {
        const res = await fetch(`${base}/healthz`);
        await res.body?.cancel();
        if (res.status === 200) return base;
      }
    } catch {
      // Not listening yet.
    }
    if (gone) throw new Error(`serve exited before answering:\n${logs}`);
    if (Date.now() > deadline) throw new Error(`serve at ${base} did not answer /healthz:\n${logs}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}
