// Uses the TypeScript client of progressdb: creates a thread, appends and
// edits messages, lists them page by page, attaches a file and reads it
// back, branches on an error's code, and (with an admin token) puts the
// thread under legal hold. The server
// is PROGRESSDB_URL (default http://127.0.0.1:8080), with
// PROGRESSDB_API_KEY and PROGRESSDB_ADMIN_TOKEN when it has them.
import { ProgressDB, ProgressDBError, hasCode } from "@progressdb/client";

async function main(): Promise<void> {
  const db = await ProgressDB.connect({
    baseUrl: process.env.PROGRESSDB_URL ?? "http://127.0.0.1:8080",
    apiKey: process.env.PROGRESSDB_API_KEY,
    adminToken: process.env.PROGRESSDB_ADMIN_TOKEN,
  });

  const th = await db.createThread({ title: "Plans", author: "ann" });
  // Timestamps stay the server's strings, exact to the nanosecond.
  console.log(`thread ${th.id} "${th.title}" created at ${th.created_ts}`);

  const texts = ["hi", "lunch at noon?", "sure"];
  for (const [i, text] of texts.entries()) {
    // A chosen ID makes the append safe to retry: a second one answers
    // id_unavailable instead of adding a copy.
    await db.appendMessage(th.id, { id: `${th.id}-m${i}`, author: "bob", body: { text } });
  }
  const m = await db.editMessage(th.id, `${th.id}-m1`, { text: "lunch at one?" });
  console.log(`message ${m.id} is at version ${m.version}`);

  // The iterator fetches the pages (two messages each) as it goes.
  for await (const msg of db.messages(th.id, { limit: 2 })) {
    console.log(`  ${msg.id} v${msg.version} ${JSON.stringify(msg.body)}`);
  }

  // A file streams up (bytes, a Blob, a ReadableStream) and back.
  const menu = new TextEncoder().encode("soup, bread");
  const a = await db.uploadAttachment(th.id, `${th.id}-m1`, menu, { contentType: "text/plain", filename: "menu.txt" });
  const d = await db.downloadAttachment(th.id, `${th.id}-m1`, a.attachment_id);
  console.log(`attached ${d.filename} (${a.size} bytes): ${await new Response(d.body).text()}`);

  // Branch on the code, never on the message.
  try {
    await db.getThread("no-such-thread");
  } catch (err) {
    if (!hasCode(err, "not_found")) throw err;
    console.log("no-such-thread: not found, as expected");
  }

  if (process.env.PROGRESSDB_ADMIN_TOKEN) {
    const held = await db.setLegalHold(th.id, true);
    const code = await db.editThread(th.id, "Renamed").then(
      () => "nothing",
      (err: unknown) => (err instanceof ProgressDBError ? err.code : String(err)),
    );
    console.log(`legal hold ${held.legal_hold}; renaming it answers ${code}`);
  }
}

main().catch((err) => {
  console.error("example:", err);
  process.exit(1);
});
