import assert from "node:assert/strict";
import { createServer as createHTTPServer, request as httpRequest } from "node:http";
import { createServer as createHTTPSServer } from "node:https";
import { execFileSync } from "node:child_process";
import { generateKeyPairSync } from "node:crypto";
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, test } from "node:test";

import { ProgressDB, ProgressDBError, hasCode } from "../dist/index.js";
import { adminToken, apiKey, serve } from "./server.mjs";

const connect = (baseUrl, extra = {}) => ProgressDB.connect({ baseUrl, apiKey, adminToken, ...extra });

/** Fails unless promise rejects with a ProgressDBError of status and code. */
async function rejectsWith(promise, status, code) {
  const err = await promise.then(
    (v) => assert.fail(`resolved ${JSON.stringify(v)}, want ${status} ${code}`),
    (e) => e,
  );
  assert.ok(err instanceof ProgressDBError, `${err} is no ProgressDBError`);
  assert.ok(err instanceof Error);
  assert.equal(err.status, status, err.message);
  assert.equal(err.code, code, err.message);
  assert.ok(hasCode(err, code));
  assert.ok(err.requestId, "no request ID");
  return err;
}

async function rawJSON(base, path) {
  const res = await fetch(base + path, { headers: { Authorization: `Bearer ${apiKey}` } });
  return JSON.parse(await res.text());
}

const nanoTime = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z$/;

async function collect(iterable) {
  const out = [];
  for await (const v of iterable) out.push(v);
  return out;
}

describe("@progressdb/client against progressdb serve", () => {
  test("every operation", async (t) => {
    const base = await serve(t);
    const c = await connect(base);
    await c.health();

    const th = await c.createThread({ id: "t-plans", title: "Plans", author: "ann" });
    assert.equal(th.id, "t-plans");
    assert.equal(th.deleted_ts, null);
    const gen = await c.createThread({ title: "Generated", author: "bob" });
    assert.ok(gen.id);
    // Timestamps are the server's strings, exact to the nanosecond.
    const wire = await rawJSON(base, "/v1/threads/t-plans");
    assert.equal(typeof th.created_ts, "string");
    assert.match(th.created_ts, nanoTime);
    assert.equal(th.created_ts, wire.created_ts);
    assert.equal((await c.getThread("t-plans")).title, "Plans");
    assert.equal((await c.editThread("t-plans", "Plans for spring")).title, "Plans for spring");
    const page = await c.threadsPage({ limit: 10 });
    assert.equal(page.items.length, 2);
    assert.equal(page.nextCursor, "");

    const m1 = await c.appendMessage("t-plans", { id: "m-1", author: "bob", body: { text: "hi", n: 9007199254740991 } });
    assert.equal(m1.version, 1);
    assert.equal(m1.created_ts, m1.ts);
    const mwire = await rawJSON(base, "/v1/threads/t-plans/messages/m-1");
    assert.equal(m1.ts, mwire.ts);
    assert.equal(m1.created_ts, mwire.created_ts);
    const m2 = await c.editMessage("t-plans", "m-1", { text: "hi, edited" });
    assert.equal(m2.version, 2);
    assert.equal(m2.created_ts, m1.created_ts);
    assert.notEqual(m2.ts, m1.ts);
    assert.deepEqual((await c.getMessage("t-plans", "m-1")).body, { text: "hi, edited" });
    const versions = await collect(c.versions("t-plans", "m-1"));
    assert.deepEqual(versions.map((v) => v.version), [1, 2]);
    assert.equal(versions[0].body.n, 9007199254740991);
    await c.appendMessage("t-plans", { author: "ann", body: "plain text" });
    await c.deleteMessage("t-plans", "m-1");
    await rejectsWith(c.getMessage("t-plans", "m-1"), 404, "not_found");
    const dm = await c.getMessage("t-plans", "m-1", { includeDeleted: true });
    assert.equal(dm.deleted, true);
    assert.match(dm.deleted_ts, nanoTime);
    assert.equal((await c.messagesPage("t-plans")).items.length, 1);
    assert.equal((await c.messagesPage("t-plans", { includeDeleted: true })).items.length, 2);
    const rm = await c.restoreMessage("t-plans", "m-1");
    assert.equal(rm.deleted, false);
    assert.equal(rm.version, 4);

    await c.deleteThread(gen.id);
    await rejectsWith(c.getThread(gen.id), 404, "not_found");
    assert.equal((await c.getThread(gen.id, { includeDeleted: true })).deleted, true);
    assert.equal((await c.adminThread(gen.id)).deleted, true);
    assert.equal((await c.restoreThread(gen.id)).deleted, false);

    // Admin.
    const db = await c.database();
    assert.ok(db.database_id);
    const n = await c.countThreads();
    assert.equal(n.sealed, 0);
    assert.ok(n.plain > 0);
    const st = await c.retentionStatus();
    assert.ok(!("shards" in st));
    assert.equal(st.paused, false);
    const ps = await c.pauseRetention("legal review");
    assert.equal(ps.paused, true);
    assert.equal(ps.paused_reason, "legal review");
    const paused = await rejectsWith(c.runRetention(), 409, "retention_paused");
    assert.equal(paused.body?.paused, true);
    assert.equal((await c.resumeRetention()).paused, false);
    const run = await c.runRetention({ dryRun: true });
    assert.equal(run.status, "completed");
    assert.equal(run.dry_run, true);

    assert.equal((await c.setLegalHold("t-plans", true)).legal_hold, true);
    assert.deepEqual((await c.legalHolds()).map((x) => x.id), ["t-plans"]);
    await rejectsWith(c.editThread("t-plans", "Other"), 409, "legal_hold");
    assert.equal((await c.setLegalHold("t-plans", false)).legal_hold, false);

    const pol = await c.setThreadPolicy("t-plans", { period: "90d", max_messages: 100 });
    assert.equal(pol.effective.period, "90d");
    assert.equal(pol.effective.max_messages, 100);
    assert.equal((await c.threadPolicy("t-plans")).override.max_messages, 100);
    await c.clearThreadPolicy("t-plans");
    assert.deepEqual((await c.threadPolicy("t-plans")).override, {});

    const man = await c.createBackup();
    assert.ok(man.backup_id);
    assert.equal(man.threads, 2);
    assert.match(man.created_at, nanoTime);
    const bl = await c.listBackups();
    assert.deepEqual(bl.backups.map((b) => b.backup_id), [man.backup_id]);
    const stream = await c.streamBackup({ compress: "none" });
    let size = 0;
    let head = "";
    for await (const chunk of stream) {
      if (!head) head = Buffer.from(chunk).subarray(0, 100).toString("latin1");
      size += chunk.length;
    }
    assert.ok(size > 1024, `archive of ${size} bytes`);
    assert.ok(head.length > 0);

    await rejectsWith(c.requestErasure("ann"), 409, "sealing_disabled");
    await rejectsWith(c.erasure("7c1f04a9b2d3e581"), 409, "sealing_disabled");
    await rejectsWith(c.erasureReceipt("7c1f04a9b2d3e581"), 409, "sealing_disabled");
    await rejectsWith(c.clusterStatus(), 404, "not_a_cluster");
    await rejectsWith(c.moveShard(0, "node-b"), 404, "not_a_cluster");

    const runId = await c.startRetention({ dryRun: true });
    assert.equal(typeof runId, "string");
    assert.ok(runId);

    // The generated client beneath.
    const { data, response } = await c.raw.GET("/healthz");
    assert.equal(response.status, 200);
    assert.equal(data.status, "ok");
  });

  test("errors by code", async (t) => {
    const base = await serve(t);
    const c = await connect(base);
    await c.createThread({ id: "t-1", title: "One", author: "ann" });
    await c.appendMessage("t-1", { id: "m-1", author: "ann", body: 1 });

    await rejectsWith(c.getThread("-bad"), 400, "invalid_id");
    await rejectsWith(c.createThread({ title: "", author: "ann" }), 400, "invalid_field");
    await rejectsWith(c.threadsPage({ cursor: "made-up" }), 400, "invalid_cursor");
    await rejectsWith(c.threadsPage({ limit: 5000 }), 400, "invalid_parameter");
    const nf = await rejectsWith(c.getThread("t-none"), 404, "not_found");
    assert.ok(!hasCode(nf, "legal_hold"));
    assert.ok(hasCode(nf, "legal_hold", "not_found"));
    await rejectsWith(c.createThread({ id: "t-1", title: "Again", author: "ann" }), 409, "already_exists");
    await c.createThread({ id: "t-2", title: "Two", author: "ann" });
    await rejectsWith(c.appendMessage("t-2", { id: "m-1", author: "ann", body: 2 }), 409, "id_unavailable");
    const big = await rejectsWith(c.appendMessage("t-1", { author: "ann", body: "x".repeat(1 << 20) }), 413, "body_too_large");
    assert.match(big.message, /1048576/);

    const anon = await ProgressDB.connect({ baseUrl: base });
    await rejectsWith(anon.getThread("t-1"), 401, "unauthorized");
    const wrong = await ProgressDB.connect({ baseUrl: base, apiKey, adminToken: apiKey });
    await rejectsWith(wrong.legalHolds(), 401, "unauthorized");

    const open = await ProgressDB.connect({ baseUrl: await serve(t, { PROGRESSDB_ADMIN_TOKEN: "", PROGRESSDB_API_KEY: "" }) });
    await rejectsWith(open.legalHolds(), 403, "admin_disabled");
    await open.createThread({ title: "Open", author: "ann" });

    await assert.rejects(ProgressDB.connect({ baseUrl: "127.0.0.1:8080" }), /want http/);
  });

  test("async iterators cross pages", async (t) => {
    const base = await serve(t);
    let requests = 0;
    const c = await connect(base, { fetch: (r) => (requests++, fetch(r)) });
    const want = [];
    for (let i = 0; i < 7; i++) {
      const id = `t-0${i}`;
      await c.createThread({ id, title: id, author: "ann" });
      want.push(id);
    }
    await c.createThread({ id: "t-gone", title: "gone", author: "ann" });
    await c.deleteThread("t-gone");

    requests = 0;
    assert.deepEqual((await collect(c.threads({ limit: 3 }))).map((x) => x.id), want);
    assert.equal(requests, 3);
    assert.equal((await collect(c.threads({ limit: 3, includeDeleted: true }))).length, 8);

    requests = 0;
    for await (const _ of c.threads({ limit: 2 })) break;
    assert.equal(requests, 1);

    const mids = [];
    for (let i = 0; i < 5; i++) mids.push((await c.appendMessage("t-00", { author: "ann", body: i })).id);
    assert.deepEqual((await collect(c.messages("t-00", { limit: 2 }))).map((m) => m.id), mids);
    for (let i = 1; i < 5; i++) await c.editMessage("t-00", mids[0], i * 10);
    assert.deepEqual((await collect(c.versions("t-00", mids[0], { limit: 2 }))).map((v) => v.version), [1, 2, 3, 4, 5]);

    const first = await c.threadsPage({ limit: 4 });
    assert.ok(first.nextCursor);
    assert.deepEqual((await collect(c.threads({ limit: 2, cursor: first.nextCursor }))).map((x) => x.id), want.slice(4));

    await rejectsWith(collect(c.threads({ cursor: "zzz" })), 400, "invalid_cursor");
  });

  test("retries honour Retry-After, bounded", async (t) => {
    const base = await serve(t);
    const arrivals = [];
    let script = () => false;
    const front = createHTTPServer((req, res) => {
      arrivals.push(Date.now());
      if (script(arrivals.length, res)) return;
      const up = httpRequest(base + req.url, { method: req.method, headers: req.headers }, (ures) => {
        res.writeHead(ures.statusCode, ures.headers);
        ures.pipe(res);
      });
      req.pipe(up);
    });
    await new Promise((r) => front.listen(0, "127.0.0.1", r));
    t.after(() => new Promise((r) => { front.closeAllConnections(); front.close(r); }));
    const url = `http://127.0.0.1:${front.address().port}`;
    const unavailable = (res, retryAfter) => {
      const h = { "Content-Type": "application/json", "X-Request-ID": "front-503" };
      if (retryAfter !== undefined) h["Retry-After"] = retryAfter;
      res.writeHead(503, h);
      res.end(JSON.stringify({ error: "shard 1 unavailable: moving", code: "shard_unavailable" }));
      return true;
    };

    script = (n, res) => {
      if (n <= 2) return unavailable(res, "1");
      if (n === 3) {
        res.writeHead(421, { "Content-Type": "application/json", "X-Request-ID": "front-421" });
        res.end(JSON.stringify({ error: "shard 1: epoch 5 is not the current one (6)", code: "misdirected" }));
        return true;
      }
      return false;
    };
    const c = await connect(url);
    const th = await c.createThread({ id: "t-retry", title: "Retried", author: "ann" });
    assert.equal(th.title, "Retried");
    assert.equal(arrivals.length, 4);
    assert.ok(arrivals[1] - arrivals[0] >= 1000, `second try ${arrivals[1] - arrivals[0]} ms after a Retry-After of 1 s`);
    assert.ok(arrivals[2] - arrivals[1] >= 1000);
    assert.equal((await (await connect(base)).threadsPage()).items.length, 1);

    arrivals.length = 0;
    script = (n, res) => unavailable(res);
    const bounded = await connect(url, { retry: { attempts: 3, baseDelayMs: 1, maxDelayMs: 10 } });
    await rejectsWith(bounded.getThread("t-1"), 503, "shard_unavailable");
    assert.equal(arrivals.length, 3);

    arrivals.length = 0;
    script = (n, res) => unavailable(res, "3600");
    const e = await rejectsWith((await connect(url)).getThread("t-1"), 503, "shard_unavailable");
    assert.equal(e.retryAfterMs, 3600 * 1000);
    assert.equal(arrivals.length, 1);

    arrivals.length = 0;
    const ac = new AbortController();
    // Aborted once the 503 has arrived: during the wait.
    script = (n, res) => unavailable(res, "5");
    const patient = await connect(url, {
      retry: { attempts: 5, maxDelayMs: 3600 * 1000 },
      fetch: async (r) => {
        const res = await fetch(r);
        ac.abort();
        return res;
      },
    });
    await assert.rejects(patient.getThread("t-1", { signal: ac.signal }), (err) => err.name === "AbortError");
    assert.equal(arrivals.length, 1);

    arrivals.length = 0;
    script = (n, res) => unavailable(res, "0");
    await rejectsWith((await connect(url, { retry: { attempts: 1 } })).getThread("t-1"), 503, "shard_unavailable");
    assert.equal(arrivals.length, 1);
  });

  test("a retried append is stored once", async (t) => {
    const base = await serve(t);
    const appends = []; // the Idempotency-Key of each append that arrived
    const front = createHTTPServer((req, res) => {
      const isAppend = req.method === "POST" && req.url.endsWith("/messages");
      if (isAppend) appends.push(req.headers["idempotency-key"]);
      const first = isAppend && appends.length === 1;
      const up = httpRequest(base + req.url, { method: req.method, headers: req.headers }, (ures) => {
        if (first) {
          // The server stored the first send; its answer is lost with
          // the connection.
          assert.equal(ures.statusCode, 201);
          ures.resume();
          req.socket.destroy();
          return;
        }
        res.writeHead(ures.statusCode, ures.headers);
        ures.pipe(res);
      });
      req.pipe(up);
    });
    await new Promise((r) => front.listen(0, "127.0.0.1", r));
    t.after(() => new Promise((r) => { front.closeAllConnections(); front.close(r); }));
    const c = await connect(`http://127.0.0.1:${front.address().port}`, { retry: { attempts: 3, baseDelayMs: 1, maxDelayMs: 10 } });

    await c.createThread({ id: "t-drop", title: "Dropped", author: "ann" });
    const m = await c.appendMessage("t-drop", { author: "bob", body: { text: "once" } });
    assert.equal(appends.length, 2, "the append was not sent again");
    assert.ok(appends[0], "no Idempotency-Key");
    assert.equal(appends[1], appends[0], "a retry with another key");
    const stored = await collect((await connect(base)).messages("t-drop"));
    assert.deepEqual(stored.map((x) => x.id), [m.id]);
    // Another call is another request: a fresh key.
    await c.appendMessage("t-drop", { author: "bob", body: { text: "twice" } });
    assert.equal(appends.length, 3);
    assert.notEqual(appends[2], appends[0]);
  });

  test("TLS options: CA and client certificate", { skip: process.env.PROGRESSDB_TEST_PKI ? false : "PROGRESSDB_TEST_PKI is not set" }, async (t) => {
    const base = await serve(t);
    const pki = process.env.PROGRESSDB_TEST_PKI;
    const read = (name) => readFileSync(join(pki, name));
    const front = createHTTPSServer(
      { cert: read("server.pem"), key: read("server-key.pem"), ca: read("ca.pem"), requestCert: true, rejectUnauthorized: true },
      (req, res) => {
        const up = httpRequest(base + req.url, { method: req.method, headers: req.headers }, (ures) => {
          res.writeHead(ures.statusCode, ures.headers);
          ures.pipe(res);
        });
        req.pipe(up);
      },
    );
    await new Promise((r) => front.listen(0, "127.0.0.1", r));
    t.after(() => new Promise((r) => { front.closeAllConnections(); front.close(r); }));
    const url = `https://127.0.0.1:${front.address().port}`;

    const c = await connect(url, { tls: { ca: read("ca.pem"), cert: read("client.pem"), key: read("client-key.pem") } });
    const th = await c.createThread({ title: "Over TLS", author: "ann" });
    assert.equal((await c.getThread(th.id)).title, "Over TLS");

    const noCert = await connect(url, { tls: { ca: read("ca.pem") } });
    await assert.rejects(noCert.getThread(th.id));
    const noCA = await connect(url);
    await assert.rejects(noCA.getThread(th.id));
    await assert.rejects(connect(url, { tls: { cert: read("client.pem") } }), /both cert and key/);
  });

  test("TLS options against the server's TLS listener", { skip: process.env.PROGRESSDB_TEST_PKI ? false : "PROGRESSDB_TEST_PKI is not set" }, async (t) => {
    const pki = process.env.PROGRESSDB_TEST_PKI;
    const read = (name) => readFileSync(join(pki, name));
    const base = await serve(
      t,
      {
        PROGRESSDB_TLS_CERT_FILE: join(pki, "server.pem"),
        PROGRESSDB_TLS_KEY_FILE: join(pki, "server-key.pem"),
        PROGRESSDB_TLS_CLIENT_CA_FILE: join(pki, "ca.pem"),
      },
      { ca: read("ca.pem") },
    );
    const admin = await connect(base, { tls: { ca: read("ca.pem"), cert: read("client.pem"), key: read("client-key.pem") } });
    const th = await admin.createThread({ title: "Over TLS", author: "ann" });
    await admin.setLegalHold(th.id, true);
    assert.deepEqual((await admin.legalHolds()).map((x) => x.id), [th.id]);

    const app = await connect(base, { tls: { ca: read("ca.pem") } });
    assert.equal((await app.getThread(th.id)).title, "Over TLS");
    // The certificate guard answers before the request gets its ID.
    await assert.rejects(app.legalHolds(), (err) => err instanceof ProgressDBError && err.status === 401 && err.code === "unauthorized");
    await assert.rejects((await connect(base)).getThread(th.id));
    await assert.rejects((await connect(base.replace("https:", "http:"))).getThread(th.id));
  });

  test("subject erasure with sealing", async (t) => {
    const kek = "base64key://" + Buffer.alloc(32, 7).toString("base64");
    // A receipt is given only when the audit files that record the
    // erasure are signed.
    const keyDir = mkdtempSync(join(tmpdir(), "progressdb-signing-"));
    t.after(() => rmSync(keyDir, { recursive: true, force: true }));
    const signingKey = join(keyDir, "audit-signing.pem");
    writeFileSync(signingKey, generateKeyPairSync("ed25519").privateKey.export({ type: "pkcs8", format: "pem" }), { mode: 0o600 });
    const c = await connect(
      await serve(t, { PROGRESSDB_KEK: kek, PROGRESSDB_KEYSTORE_PATH: "{dir}/keys", PROGRESSDB_AUDIT_SIGNING_KEY: signingKey }),
    );
    await c.createThread({ id: "t-1", title: "Plans", author: "bob" });
    await c.appendMessage("t-1", { id: "m-ann", author: "ann", body: "mine" });
    await c.appendMessage("t-1", { id: "m-bob", author: "bob", body: "his" });

    const acc = await c.requestErasure("ann");
    assert.ok(acc.erasure_id && acc.run_id);
    const st = await c.waitErasure(acc.erasure_id, { everyMs: 20, signal: AbortSignal.timeout(60000) });
    assert.equal(st.status, "completed");
    assert.equal(st.messages_purged, 1);
    assert.match(st.completed_at, nanoTime);
    assert.ok(!st.subject.includes("ann"));
    await rejectsWith(c.getMessage("t-1", "m-ann", { includeDeleted: true }), 404, "not_found");
    assert.equal((await c.getMessage("t-1", "m-bob")).body, "his");
    const rc = await c.erasureReceipt(acc.erasure_id);
    assert.equal(rc.erasure_id, acc.erasure_id);
    assert.equal(rc.subject, st.subject);
    assert.deepEqual(rc.items.map((i) => i.item_id), ["m-ann"]);
    assert.equal(rc.completed_at, st.completed_at);
    await rejectsWith(c.erasure("0000000000000000"), 404, "not_found");
  });

  test("examples/typescript", { skip: process.env.PROGRESSDB_EXAMPLES ? false : "PROGRESSDB_EXAMPLES is not set" }, async (t) => {
    // Compiled against this package as a project that installed it would
    // be: node_modules/@progressdb/client is this folder.
    const pkg = dirname(dirname(fileURLToPath(import.meta.url)));
    const work = mkdtempSync(join(tmpdir(), "progressdb-example-"));
    t.after(() => rmSync(work, { recursive: true, force: true }));
    for (const f of ["example.ts", "tsconfig.json"]) copyFileSync(join(process.env.PROGRESSDB_EXAMPLES, f), join(work, f));
    mkdirSync(join(work, "node_modules", "@progressdb"), { recursive: true });
    symlinkSync(pkg, join(work, "node_modules", "@progressdb", "client"));
    execFileSync(join(pkg, "node_modules", ".bin", "tsc"), ["-p", work, "--typeRoots", join(pkg, "node_modules", "@types")]);
    const base = await serve(t);
    const out = execFileSync(process.execPath, [join(work, "dist", "example.js")], {
      env: { PATH: process.env.PATH, PROGRESSDB_URL: base, PROGRESSDB_API_KEY: apiKey, PROGRESSDB_ADMIN_TOKEN: adminToken },
      encoding: "utf8",
    });
    // What examples/go prints too (client/examples_test.go).
    assert.match(
      out,
      /^thread (\S+) "Plans" created at \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z\nmessage \S+-m1 is at version 2\n  \S+-m0 v1 \S.*\n  \S+-m1 v2 \S.*lunch at one\?.*\n  \S+-m2 v1 \S.*\nattached menu\.txt \(11 bytes\): soup, bread\nno-such-thread: not found, as expected\nlegal hold true; renaming it answers legal_hold\n$/,
    );
  });
});
