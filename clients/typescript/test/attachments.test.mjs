// Attachments (spec §16) through the client against a real server: byte
// for byte round trips whole and by range, the size limit, uploads and
// downloads cut part way, which uploads are retried, and a 20 MiB upload
// that streams.
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { createServer as createHTTPServer, request as httpRequest } from "node:http";
import { describe, test } from "node:test";
import { Agent, fetch as undiciFetch } from "undici";

import { ProgressDB, ProgressDBError } from "../dist/index.js";
import { adminToken, apiKey, serve } from "./server.mjs";

const connect = (baseUrl, extra = {}) => ProgressDB.connect({ baseUrl, apiKey, adminToken, ...extra });

/** n bytes that differ at every offset a test compares. */
function pattern(n, from = 0) {
  const b = new Uint8Array(n);
  for (let i = 0; i < n; i++) {
    const k = from + i;
    b[i] = (k * 7 + Math.floor(k / 251)) & 0xff;
  }
  return b;
}

const sha256 = (b) => createHash("sha256").update(b).digest("hex");

/** A stream of b in chunks of 64 KiB, then err (when given) instead of its end. */
function streamOf(b, err = undefined) {
  let at = 0;
  return new ReadableStream({
    pull(c) {
      if (at >= b.length) return err ? c.error(err) : c.close();
      c.enqueue(b.slice(at, at + (64 << 10)));
      at += 64 << 10;
    },
  });
}

async function bytesOf(stream) {
  return new Uint8Array(await new Response(stream).arrayBuffer());
}

async function rejectsWith(promise, status, code) {
  const err = await promise.then(
    (v) => assert.fail(`resolved ${JSON.stringify(v)}, want ${status} ${code}`),
    (e) => e,
  );
  assert.ok(err instanceof ProgressDBError, `${err} is no ProgressDBError`);
  assert.equal(err.status, status, err.message);
  assert.equal(err.code, code, err.message);
  return err;
}

/** A live message to attach to. */
async function message(c) {
  const th = await c.createThread({ title: "files", author: "ann" });
  const m = await c.appendMessage(th.id, { author: "ann", body: { text: "see attached" } });
  return [th.id, m.id];
}

/**
 * A node in front of base: script(n, req, res) answers the nth arrival
 * itself (true) or lets it through; received() is the request bytes it
 * has read.
 */
async function front(t, base, script) {
  let arrivals = 0;
  let received = 0;
  const srv = createHTTPServer((req, res) => {
    arrivals++;
    req.on("data", (b) => (received += b.length));
    if (script(arrivals, req, res)) return;
    const up = httpRequest(base + req.url, { method: req.method, headers: req.headers }, (ures) => {
      res.writeHead(ures.statusCode, ures.headers);
      ures.pipe(res);
    });
    req.pipe(up);
  });
  await new Promise((r) => srv.listen(0, "127.0.0.1", r));
  t.after(() => new Promise((r) => { srv.closeAllConnections(); srv.close(r); }));
  return { url: `http://127.0.0.1:${srv.address().port}`, arrivals: () => arrivals, received: () => received };
}

function unavailable(res) {
  res.writeHead(503, { "Content-Type": "application/json", "X-Request-ID": "front-503", "Retry-After": "0" });
  res.end(JSON.stringify({ error: "shard 1 unavailable: moving", code: "shard_unavailable" }));
  return true;
}

describe("attachments through @progressdb/client", () => {
  for (const sealed of [false, true]) {
    test(`round trips, ranges, ETag, delete and restore (sealed: ${sealed})`, async (t) => {
      const env = sealed ? { PROGRESSDB_KEK: "base64key://" + Buffer.alloc(32, 5).toString("base64"), PROGRESSDB_KEYSTORE_PATH: "{dir}/keys" } : {};
      const c = await connect(await serve(t, env));
      const [tid, mid] = await message(c);
      const file = pattern(3 * (64 << 10) + 12345);
      const a = await c.uploadAttachment(tid, mid, file, { contentType: "image/png", filename: "floor plan.png" });
      assert.equal(a.size, file.length);
      assert.equal(a.sha256, sha256(file));
      assert.equal(a.content_type, "image/png");
      assert.equal(a.filename, "floor plan.png");
      const fromBlob = await c.uploadAttachment(tid, mid, new Blob([file]));
      const fromStream = await c.uploadAttachment(tid, mid, streamOf(file));
      for (const x of [fromBlob, fromStream]) {
        assert.equal(x.size, file.length);
        assert.equal(x.sha256, sha256(file));
        assert.equal(x.content_type, "application/octet-stream");
        assert.equal(x.filename, null);
      }
      assert.equal((await c.uploadAttachment(tid, mid, new Uint8Array(0))).size, 0);
      const list = await c.listAttachments(tid, mid);
      assert.deepEqual(list.map((x) => x.attachment_id), [a.attachment_id, fromBlob.attachment_id, fromStream.attachment_id, list[3].attachment_id]);

      for (const x of [a, fromBlob, fromStream]) {
        const d = await c.downloadAttachment(tid, mid, x.attachment_id);
        assert.deepEqual(await bytesOf(d.body), file);
        assert.equal(d.size, file.length);
        assert.equal(d.partial, false);
      }
      const d = await c.downloadAttachment(tid, mid, a.attachment_id);
      await d.body.cancel();
      assert.equal(d.etag, `"${sha256(file)}"`);
      assert.equal(d.contentType, "image/png");
      assert.equal(d.filename, "floor plan.png");
      for (const [offset, length] of [[70000, 5000], [64 << 10, 64 << 10], [file.length - 10, undefined], [0, 1]]) {
        const r = await c.downloadAttachment(tid, mid, a.attachment_id, { offset, length });
        const end = length === undefined ? file.length : offset + length;
        assert.deepEqual(await bytesOf(r.body), file.slice(offset, end), `range ${offset}+${length}`);
        assert.equal(r.partial, true);
        assert.equal(r.offset, offset);
        assert.equal(r.length, end - offset);
        assert.equal(r.size, file.length);
      }
      const same = await c.downloadAttachment(tid, mid, a.attachment_id, { ifNoneMatch: d.etag });
      assert.equal(same.notModified, true);
      assert.equal((await bytesOf(same.body)).length, 0);
      await rejectsWith(c.downloadAttachment(tid, mid, a.attachment_id, { offset: file.length }), 416, "range_not_satisfiable");

      await c.deleteAttachment(tid, mid, a.attachment_id);
      assert.equal((await c.listAttachments(tid, mid)).length, 3);
      const withDeleted = await c.listAttachments(tid, mid, { includeDeleted: true });
      assert.equal(withDeleted[0].deleted, true);
      await rejectsWith(c.downloadAttachment(tid, mid, a.attachment_id), 404, "not_found");
      assert.deepEqual(await bytesOf((await c.downloadAttachment(tid, mid, a.attachment_id, { includeDeleted: true })).body), file);
      assert.equal((await c.restoreAttachment(tid, mid, a.attachment_id)).deleted, false);
      assert.deepEqual(await bytesOf((await c.downloadAttachment(tid, mid, a.attachment_id)).body), file);
      await rejectsWith(c.uploadAttachment(tid, "no-such-message", file), 404, "not_found");
    });
  }

  test("the size limit: body_too_large, nothing stored", async (t) => {
    const c = await connect(await serve(t, { PROGRESSDB_ATTACHMENT_MAX_BYTES: "100000" }));
    const [tid, mid] = await message(c);
    await c.uploadAttachment(tid, mid, pattern(100000));
    for (const body of [pattern(100001), new Blob([pattern(100001)]), streamOf(pattern(4 << 20))]) {
      const err = await rejectsWith(c.uploadAttachment(tid, mid, body), 413, "body_too_large");
      assert.match(err.message, /100000/);
    }
    assert.equal((await c.listAttachments(tid, mid, { includeDeleted: true })).length, 1);
  });

  test("cut part way: an upload stores nothing, a download fails", async (t) => {
    const base = await serve(t);
    const c = await connect(base);
    const [tid, mid] = await message(c);
    const file = pattern(400 << 10);
    const broke = new Error("the source broke");
    // Its own connections: fetch leaves the broken upload's open until
    // its agent closes it, and the server waits for it when it stops.
    const agent = new Agent();
    const own = await connect(base, {
      fetch: (r) => undiciFetch(r.url, { method: r.method, headers: [...r.headers], body: r.body, duplex: "half", signal: r.signal, dispatcher: agent }),
    });
    await assert.rejects(own.uploadAttachment(tid, mid, streamOf(file.slice(0, 150 << 10), broke)), (e) => e.cause === broke);
    await agent.destroy();
    assert.equal((await c.listAttachments(tid, mid, { includeDeleted: true })).length, 0);

    const a = await c.uploadAttachment(tid, mid, file);
    const cutAt = 150 << 10;
    const f = await front(t, base, (n, req, res) => {
      // The answer's head and its first bytes, then the connection breaks.
      const up = httpRequest(base + req.url, { method: req.method, headers: req.headers }, (ures) => {
        res.writeHead(ures.statusCode, ures.headers);
        let sent = 0;
        ures.on("data", (b) => {
          if (sent >= cutAt) return;
          res.write(b.subarray(0, cutAt - sent));
          sent += b.length;
          if (sent >= cutAt) setTimeout(() => req.socket.destroy(), 20);
        });
      });
      up.end();
      return true;
    });
    const d = await (await connect(f.url)).downloadAttachment(tid, mid, a.attachment_id);
    assert.equal(d.size, file.length);
    await assert.rejects(bytesOf(d.body));
  });

  test("retries: an upload goes again only whole, a download before its first byte", async (t) => {
    const base = await serve(t);
    const file = pattern(200 << 10);
    const retry = { attempts: 3, baseDelayMs: 1, maxDelayMs: 1000 };
    for (const [name, body, opts, stored] of [
      ["bytes", () => file, {}, true],
      ["blob", () => new Blob([file]), {}, true],
      ["stream", () => streamOf(file), {}, false],
      ["stream with getBody", () => streamOf(file), { getBody: () => streamOf(file) }, true],
    ]) {
      // The front node reads the whole body, then answers 503.
      const f = await front(t, base, (n, req, res) => {
        if (n !== 1) return false;
        req.resume();
        req.on("end", () => unavailable(res));
        return true;
      });
      const direct = await connect(base);
      const [tid, mid] = await message(direct);
      const c = await connect(f.url, { retry });
      if (!stored) {
        await rejectsWith(c.uploadAttachment(tid, mid, body(), opts), 503, "shard_unavailable");
        assert.equal(f.arrivals(), 1, `${name}: a stream already read was sent again`);
        assert.equal((await direct.listAttachments(tid, mid, { includeDeleted: true })).length, 0);
        continue;
      }
      const a = await c.uploadAttachment(tid, mid, body(), opts);
      assert.equal(f.arrivals(), 2, name);
      assert.equal(a.sha256, sha256(file), name);
      assert.deepEqual(await bytesOf((await direct.downloadAttachment(tid, mid, a.attachment_id)).body), file, name);
    }

    const direct = await connect(base);
    const [tid, mid] = await message(direct);
    const a = await direct.uploadAttachment(tid, mid, file);
    const f = await front(t, base, (n, req, res) => n === 1 && unavailable(res));
    const d = await (await connect(f.url, { retry })).downloadAttachment(tid, mid, a.attachment_id, { offset: 1000, length: 100 });
    assert.deepEqual(await bytesOf(d.body), file.slice(1000, 1100));
    assert.equal(f.arrivals(), 2);
  });

  test("a 20 MiB upload streams", async (t) => {
    const base = await serve(t, { PROGRESSDB_ATTACHMENT_MAX_BYTES: String(32 << 20) });
    const f = await front(t, base, () => false);
    const c = await connect(f.url);
    const [tid, mid] = await message(await connect(base));
    const size = 20 << 20;
    const slack = 4 << 20;
    let made = 0;
    const hash = createHash("sha256");
    // Each chunk is made only once the front node has read all but slack
    // of those before: a client that gathered the file before sending it
    // would wait here for ever (bounded: the upload fails, naming it).
    const gen = new ReadableStream(
      {
        async pull(ctl) {
          for (const deadline = Date.now() + 10000; made - f.received() > slack; await new Promise((r) => setTimeout(r, 1))) {
            if (Date.now() > deadline) return ctl.error(new Error(`the client read ${made} bytes and sent ${f.received()}: it holds the file`));
          }
          if (made === size) return ctl.close();
          const chunk = pattern(Math.min(64 << 10, size - made), made);
          hash.update(chunk);
          made += chunk.length;
          ctl.enqueue(chunk);
        },
      },
      { highWaterMark: 0 },
    );
    const a = await c.uploadAttachment(tid, mid, gen);
    assert.equal(a.size, size);
    assert.equal(a.sha256, hash.digest("hex"));
  });
});
