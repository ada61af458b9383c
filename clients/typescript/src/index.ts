// The TypeScript client of progressdb (spec §13). schema.ts is generated
// from api/openapi.yaml by openapi-typescript (`make clients`); requests go
// through openapi-fetch. This file is the thin layer written by hand: the
// API key and admin token, retries on 503 and 421 that honour
// Retry-After, listings as async iterators, and errors as ProgressDBError
// carrying the server's code. Timestamps stay the server's strings
// (RFC 3339 with nanoseconds), which a Date or a number would cut.

import createClient, { type Client } from "openapi-fetch";
import type { components, paths } from "./schema.js";
import * as attachments from "./attachments.js";
import type { Attachment, Download, DownloadOptions, UploadBody, UploadOptions } from "./attachments.js";

export type { components, paths, operations } from "./schema.js";
export type { Attachment, Download, DownloadOptions, UploadBody, UploadOptions } from "./attachments.js";

type Schemas = components["schemas"];
export type Thread = Schemas["Thread"];
export type Message = Schemas["Message"];
export type NewThread = Schemas["NewThread"];
export type NewMessage = Schemas["NewMessage"];
export type RetentionStatus = Schemas["RetentionStatus"];
export type ClusterRetention = Schemas["ClusterRetention"];
export type RunResult = Schemas["RunResult"];
export type PauseState = Schemas["PauseState"];
export type PolicyOverride = Schemas["PolicyOverride"];
export type ThreadPolicy = Schemas["ThreadPolicy"];
export type BackupManifest = Schemas["BackupManifest"];
export type BackupList = Schemas["BackupList"];
export type ClusterStatus = Schemas["ClusterStatus"];
export type MoveResult = Schemas["MoveResult"];
export type ErasureAccepted = Schemas["ErasureAccepted"];
export type ErasureStatus = Schemas["ErasureStatus"];
export type ErasureReceipt = Schemas["ErasureReceipt"];
export type ErrorBody = Schemas["Error"];
/** One of the closed list of codes of api/openapi.yaml. */
export type ErrorCode = ErrorBody["code"];
/** An RFC 3339 UTC time with nanoseconds, exactly as the server wrote it. */
export type Timestamp = Schemas["Timestamp"];

/** Every answer outside 2xx; branch on `code`, never on `message`. */
export class ProgressDBError extends Error {
  override readonly name = "ProgressDBError";
  /** HTTP status. */
  readonly status: number;
  /** The server's code; undefined when the answer was not its JSON (a proxy's page). */
  readonly code: ErrorCode | undefined;
  /** The server's Retry-After in milliseconds, when it sent one. */
  readonly retryAfterMs: number | undefined;
  /** The answer's X-Request-ID, the key of the server's log lines. */
  readonly requestId: string | undefined;
  /** The whole error answer: holder (lease_held), paused, result (run_failed). */
  readonly body: ErrorBody | undefined;

  constructor(status: number, body: ErrorBody | undefined, text: string, headers: Headers) {
    const message = body?.error ?? (text.split("\n")[0] || `HTTP ${status}`);
    super(body ? `${body.code} (HTTP ${status}): ${message}` : `HTTP ${status}: ${message}`);
    this.status = status;
    this.code = body?.code;
    this.body = body;
    this.retryAfterMs = retryAfterMs(headers);
    this.requestId = headers.get("x-request-id") ?? undefined;
  }
}

/** Reports whether err is a ProgressDBError with one of codes. */
export function hasCode(err: unknown, ...codes: ErrorCode[]): err is ProgressDBError {
  return err instanceof ProgressDBError && err.code !== undefined && codes.includes(err.code);
}

/** How the client retries a request answered 503 or 421. */
export interface RetryOptions {
  /** Tries in all, the first included; 1 turns retries off. Default 4. */
  attempts?: number;
  /** First pause without Retry-After, doubled each time with jitter. Default 100. */
  baseDelayMs?: number;
  /**
   * Bound of every pause. An answer whose Retry-After is beyond it is
   * returned at once rather than tried again before the server said.
   * Default 10000.
   */
  maxDelayMs?: number;
}

/** PEM contents (not file names) for https:// servers. */
export interface TLSOptions {
  /** CA certificates that verify the server, instead of the system's. */
  ca?: string | Buffer;
  /** Client certificate and its key (both or neither). */
  cert?: string | Buffer;
  key?: string | Buffer;
}

export interface ClientOptions {
  /** The server, e.g. "http://127.0.0.1:8080". */
  baseUrl: string;
  /** Bearer token of /v1 (PROGRESSDB_API_KEY). */
  apiKey?: string;
  /** Bearer token of /admin (PROGRESSDB_ADMIN_TOKEN). */
  adminToken?: string;
  retry?: RetryOptions;
  /** TLS settings, through an undici Agent of its own (node). */
  tls?: TLSOptions;
  /** The fetch to send with (default globalThis.fetch); not with tls. */
  fetch?: (input: Request) => Promise<Response>;
}

export interface ListOptions {
  /** Page size 1 to 1000; the server's default when absent. */
  limit?: number;
  /** Resume after a page: the cursor it returned. */
  cursor?: string;
  includeDeleted?: boolean;
  /** Stops the listing (and any pause between retries). */
  signal?: AbortSignal;
}

export interface Page<T> {
  items: T[];
  /** The next page's cursor; "" after the last page. */
  nextCursor: string;
}

export interface CallOptions {
  signal?: AbortSignal;
}

function retryAfterMs(headers: Headers): number | undefined {
  const v = headers.get("retry-after")?.trim();
  if (!v) return undefined;
  if (/^\d+$/.test(v)) return Math.min(Number(v), 86400) * 1000;
  const t = Date.parse(v);
  return Number.isNaN(t) ? undefined : Math.max(t - Date.now(), 0);
}

function sleep(ms: number, signal: AbortSignal | null | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal!.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/**
 * Whether the server keeps an Idempotency-Key for a request (spec §7):
 * every POST and PATCH of /v1, and POST /admin/erasures.
 */
function keyedWrite(request: Request): boolean {
  if (request.method !== "POST" && request.method !== "PATCH") return false;
  const path = new URL(request.url).pathname;
  // An upload is streamed: the server keys none yet.
  if (path.includes("/attachments")) return false;
  return path.includes("/v1/") || path.endsWith("/admin/erasures");
}

/**
 * A fetch that tries again on 503 and 421 as retry says. A write the
 * server keys gets a fresh Idempotency-Key, the same on each try, so that
 * the server stores it once however many tries reach it; such a write is
 * also tried again when the connection fails, since its first try may
 * have been served.
 */
export function retryingFetch(
  next: (input: Request) => Promise<Response>,
  retry: RetryOptions = {},
): (input: Request) => Promise<Response> {
  return async (request: Request) => {
    const keyed = keyedWrite(request);
    if (keyed && !request.headers.has("idempotency-key")) {
      request.headers.set("Idempotency-Key", crypto.randomUUID());
    }
    // A body is read once: each try but the last sends a copy.
    return withRetries(retry, request.signal, keyed, (last) => next(last ? request : request.clone()));
  };
}

/**
 * Sends (send) until an answer other than 503 and 421, as retry says:
 * after the answer's Retry-After, else a backoff; an answer whose
 * Retry-After is beyond maxDelayMs is returned at once. A failed
 * connection is tried again only with again (the write is keyed).
 */
async function withRetries(
  retry: RetryOptions,
  signal: AbortSignal,
  again: boolean,
  send: (last: boolean) => Promise<Response>,
): Promise<Response> {
  const attempts = retry.attempts ?? 4;
  const base = retry.baseDelayMs ?? 100;
  const maxDelay = retry.maxDelayMs ?? 10000;
  const backoff = (attempt: number) => {
    const d = Math.min(base * 2 ** (attempt - 1), maxDelay);
    return d - Math.random() * (d / 2);
  };
  for (let attempt = 1; ; attempt++) {
    let res: Response;
    try {
      res = await send(attempt >= attempts);
    } catch (err) {
      if (!again || attempt >= attempts || signal.aborted) throw err;
      await sleep(backoff(attempt), signal);
      continue;
    }
    if ((res.status !== 503 && res.status !== 421) || attempt >= attempts) return res;
    const wait = retryAfterMs(res.headers) ?? backoff(attempt);
    if (wait > maxDelay) return res;
    await res.body?.cancel();
    await sleep(wait, signal);
  }
}

/** A fetch through undici with its own TLS settings (node only). */
async function tlsFetch(tls: TLSOptions): Promise<(input: Request) => Promise<Response>> {
  if ((tls.cert === undefined) !== (tls.key === undefined)) {
    throw new Error("progressdb: tls: set both cert and key, or neither");
  }
  const undici = await import("undici");
  const dispatcher = new undici.Agent({ connect: { ca: tls.ca, cert: tls.cert, key: tls.key } });
  return async (request: Request) => {
    // The body streams through, as it would with the global fetch: an
    // upload is never read into memory whole.
    const res = await undici.fetch(request.url, {
      method: request.method,
      headers: [...request.headers],
      // The DOM's ReadableStream type, undici's class at run time.
      body: request.body as never,
      duplex: "half",
      signal: request.signal,
      dispatcher,
    });
    return res as unknown as Response;
  };
}

async function* pages<T>(
  opts: ListOptions,
  page: (o: ListOptions) => Promise<Page<T>>,
): AsyncGenerator<T, void, undefined> {
  let o = { ...opts };
  for (;;) {
    const p = await page(o);
    yield* p.items;
    if (!p.nextCursor) return;
    o = { ...o, cursor: p.nextCursor };
  }
}

function isCluster(v: unknown): v is ClusterRetention {
  return typeof v === "object" && v !== null && "shards" in v;
}

/**
 * A progressdb client. `raw` is the generated openapi-fetch client for
 * every operation of api/openapi.yaml (with this client's retries; pass
 * credentials as headers).
 */
export class ProgressDB {
  readonly raw: Client<paths>;
  private readonly api: Record<string, string>;
  private readonly admin: Record<string, string>;
  /** The fetch underneath the retries, and their options: uploads retry their own way. */
  private readonly send: (input: Request) => Promise<Response>;
  private readonly retry: RetryOptions;

  private constructor(raw: Client<paths>, send: (input: Request) => Promise<Response>, opts: ClientOptions) {
    this.raw = raw;
    this.send = send;
    this.retry = opts.retry ?? {};
    this.api = opts.apiKey ? { Authorization: `Bearer ${opts.apiKey}` } : {};
    this.admin = opts.adminToken ? { Authorization: `Bearer ${opts.adminToken}` } : {};
  }

  /** Returns a client of the server at opts.baseUrl. */
  static async connect(opts: ClientOptions): Promise<ProgressDB> {
    if (!/^https?:\/\//.test(opts.baseUrl)) {
      throw new Error(`progressdb: baseUrl ${JSON.stringify(opts.baseUrl)}: want http:// or https://`);
    }
    if (opts.tls && opts.fetch) throw new Error("progressdb: tls and fetch: use one");
    const base = opts.tls ? await tlsFetch(opts.tls) : (opts.fetch ?? ((r: Request) => globalThis.fetch(r)));
    const raw = createClient<paths>({ baseUrl: opts.baseUrl, fetch: retryingFetch(base, opts.retry) });
    return new ProgressDB(raw, base, opts);
  }

  /** The data of a success answer, or the answer as a ProgressDBError. */
  private async unwrap<T>(
    call: Promise<{ data?: T; error?: unknown; response: Response }>,
    status: number,
  ): Promise<T> {
    const { data, error, response } = await call;
    if (response.status !== status) throw this.failure(response, error);
    return data as T;
  }

  private failure(response: Response, error: unknown): ProgressDBError {
    if (typeof error === "object" && error !== null && "code" in error && "error" in error) {
      return new ProgressDBError(response.status, error as ErrorBody, "", response.headers);
    }
    return new ProgressDBError(response.status, undefined, typeof error === "string" ? error : "", response.headers);
  }

  /** Resolves when the server's store is open and can commit. */
  async health(o: CallOptions = {}): Promise<void> {
    await this.unwrap(this.raw.GET("/healthz", { signal: o.signal }), 200);
  }

  // Threads.

  createThread(t: NewThread, o: CallOptions = {}): Promise<Thread> {
    return this.unwrap(this.raw.POST("/v1/threads", { body: t, headers: this.api, signal: o.signal }), 201);
  }

  getThread(tid: string, o: CallOptions & { includeDeleted?: boolean } = {}): Promise<Thread> {
    return this.unwrap(
      this.raw.GET("/v1/threads/{tid}", {
        params: { path: { tid }, query: o.includeDeleted ? { include_deleted: true } : {} },
        headers: this.api,
        signal: o.signal,
      }),
      200,
    );
  }

  /** Changes a live thread's title. */
  editThread(tid: string, title: string, o: CallOptions = {}): Promise<Thread> {
    return this.unwrap(
      this.raw.PATCH("/v1/threads/{tid}", { params: { path: { tid } }, body: { title }, headers: this.api, signal: o.signal }),
      200,
    );
  }

  /** Soft-deletes a thread. */
  async deleteThread(tid: string, o: CallOptions = {}): Promise<void> {
    await this.unwrap(
      this.raw.DELETE("/v1/threads/{tid}", { params: { path: { tid } }, headers: this.api, signal: o.signal }),
      204,
    );
  }

  restoreThread(tid: string, o: CallOptions = {}): Promise<Thread> {
    return this.unwrap(
      this.raw.POST("/v1/threads/{tid}/restore", { params: { path: { tid } }, headers: this.api, signal: o.signal }),
      200,
    );
  }

  async threadsPage(o: ListOptions = {}): Promise<Page<Thread>> {
    const p = await this.unwrap(
      this.raw.GET("/v1/threads", { params: { query: query(o) }, headers: this.api, signal: o.signal }),
      200,
    );
    return { items: p.threads, nextCursor: p.next_cursor };
  }

  /** Every thread, page after page. */
  threads(o: ListOptions = {}): AsyncGenerator<Thread, void, undefined> {
    return pages(o, (p) => this.threadsPage(p));
  }

  // Messages.

  /** Appends a message; a chosen id makes a retried append safe (id_unavailable). */
  appendMessage(tid: string, m: NewMessage, o: CallOptions = {}): Promise<Message> {
    return this.unwrap(
      this.raw.POST("/v1/threads/{tid}/messages", { params: { path: { tid } }, body: m, headers: this.api, signal: o.signal }),
      201,
    );
  }

  getMessage(tid: string, mid: string, o: CallOptions & { includeDeleted?: boolean } = {}): Promise<Message> {
    return this.unwrap(
      this.raw.GET("/v1/threads/{tid}/messages/{mid}", {
        params: { path: { tid, mid }, query: o.includeDeleted ? { include_deleted: true } : {} },
        headers: this.api,
        signal: o.signal,
      }),
      200,
    );
  }

  /** Stores a new version of a message with body. */
  editMessage(tid: string, mid: string, body: unknown, o: CallOptions = {}): Promise<Message> {
    return this.unwrap(
      this.raw.PUT("/v1/threads/{tid}/messages/{mid}", {
        params: { path: { tid, mid } },
        body: { body },
        headers: this.api,
        signal: o.signal,
      }),
      200,
    );
  }

  async deleteMessage(tid: string, mid: string, o: CallOptions = {}): Promise<void> {
    await this.unwrap(
      this.raw.DELETE("/v1/threads/{tid}/messages/{mid}", { params: { path: { tid, mid } }, headers: this.api, signal: o.signal }),
      204,
    );
  }

  restoreMessage(tid: string, mid: string, o: CallOptions = {}): Promise<Message> {
    return this.unwrap(
      this.raw.POST("/v1/threads/{tid}/messages/{mid}/restore", {
        params: { path: { tid, mid } },
        headers: this.api,
        signal: o.signal,
      }),
      200,
    );
  }

  async messagesPage(tid: string, o: ListOptions = {}): Promise<Page<Message>> {
    const p = await this.unwrap(
      this.raw.GET("/v1/threads/{tid}/messages", {
        params: { path: { tid }, query: query(o) },
        headers: this.api,
        signal: o.signal,
      }),
      200,
    );
    return { items: p.messages, nextCursor: p.next_cursor };
  }

  /** Every message of a thread (latest versions, in order). */
  messages(tid: string, o: ListOptions = {}): AsyncGenerator<Message, void, undefined> {
    return pages(o, (p) => this.messagesPage(tid, p));
  }

  async versionsPage(tid: string, mid: string, o: ListOptions = {}): Promise<Page<Message>> {
    const p = await this.unwrap(
      this.raw.GET("/v1/threads/{tid}/messages/{mid}/versions", {
        params: { path: { tid, mid }, query: query(o) },
        headers: this.api,
        signal: o.signal,
      }),
      200,
    );
    return { items: p.versions, nextCursor: p.next_cursor };
  }

  /** Every version of a message, oldest first. */
  versions(tid: string, mid: string, o: ListOptions = {}): AsyncGenerator<Message, void, undefined> {
    return pages(o, (p) => this.versionsPage(tid, mid, p));
  }

  // Attachments (spec §16).

  /** The context of the attachment functions (src/attachments.ts). */
  private get files(): attachments.Context {
    return {
      raw: this.raw,
      send: this.send,
      retries: (signal, once, send) => withRetries(once ? { ...this.retry, attempts: 1 } : this.retry, signal, false, send),
      headers: this.api,
      failure: (response, error) => this.failure(response, error),
    };
  }

  /**
   * Attaches body to a live message, streamed: bytes in memory, a Blob
   * (node: `fs.openAsBlob(path)`, read as it is sent) or a ReadableStream.
   * A 503 or 421 sends it again unless it is a stream without getBody.
   * Over the server's limit: body_too_large, nothing stored.
   */
  uploadAttachment(tid: string, mid: string, body: UploadBody, o: UploadOptions = {}): Promise<Attachment> {
    return attachments.uploadAttachment(this.files, tid, mid, body, o);
  }

  /** A message's attachments in upload order. */
  async listAttachments(tid: string, mid: string, o: CallOptions & { includeDeleted?: boolean } = {}): Promise<Attachment[]> {
    const p = await this.unwrap(
      this.raw.GET("/v1/threads/{tid}/messages/{mid}/attachments", {
        params: { path: { tid, mid }, query: o.includeDeleted ? { include_deleted: true } : {} },
        headers: this.api,
        signal: o.signal,
      }),
      200,
    );
    return p.attachments;
  }

  /**
   * An attachment's bytes as they arrive (body, a ReadableStream), whole
   * or one range; retried on 503 and 421 before the first byte.
   */
  downloadAttachment(tid: string, mid: string, aid: string, o: DownloadOptions = {}): Promise<Download> {
    return attachments.downloadAttachment(this.files, tid, mid, aid, o);
  }

  /** Soft-deletes an attachment; retention purges its bytes. */
  async deleteAttachment(tid: string, mid: string, aid: string, o: CallOptions = {}): Promise<void> {
    await this.unwrap(
      this.raw.DELETE("/v1/threads/{tid}/messages/{mid}/attachments/{aid}", {
        params: { path: { tid, mid, aid } },
        headers: this.api,
        signal: o.signal,
      }),
      204,
    );
  }

  restoreAttachment(tid: string, mid: string, aid: string, o: CallOptions = {}): Promise<Attachment> {
    return this.unwrap(
      this.raw.POST("/v1/threads/{tid}/messages/{mid}/attachments/{aid}/restore", {
        params: { path: { tid, mid, aid } },
        headers: this.api,
        signal: o.signal,
      }),
      200,
    );
  }

  // Admin.

  /** The database a single node serves (cluster_node on a cluster node). */
  database(o: CallOptions = {}): Promise<{ database_id: string; path: string }> {
    return this.unwrap(this.raw.GET("/admin/database", { headers: this.admin, signal: o.signal }), 200);
  }

  /**
   * Its threads by whether their record is sealed (spec §12): plain ones were
   * written before sealing was on. A read of one record per thread.
   */
  async countThreads(o: CallOptions = {}): Promise<{ sealed: number; plain: number }> {
    const db = await this.unwrap(
      this.raw.GET("/admin/database", { params: { query: { threads: true } }, headers: this.admin, signal: o.signal }),
      200,
    );
    if (!db.threads) throw new Error("the server did not count its threads (it predates GET /admin/database?threads=true)");
    return db.threads;
  }

  /** A node's retention status, or every shard's (ClusterRetention, with `shards`) on a cluster node. */
  retentionStatus(o: CallOptions = {}): Promise<RetentionStatus | ClusterRetention> {
    return this.unwrap(this.raw.GET("/admin/retention", { headers: this.admin, signal: o.signal }), 200);
  }

  /** Runs retention now and waits for its summary (or every shard's). */
  async runRetention(o: CallOptions & { dryRun?: boolean } = {}): Promise<RunResult | ClusterRetention> {
    // The operation's success types are the 200's and the 202's: a run
    // that waits answers 200.
    const v = await this.unwrap(
      this.raw.POST("/admin/retention/run", { body: { dry_run: o.dryRun ?? false }, headers: this.admin, signal: o.signal }),
      200,
    );
    return v as RunResult | ClusterRetention;
  }

  /** Starts a run in the background; its run ID (or every shard's). */
  async startRetention(o: CallOptions & { dryRun?: boolean } = {}): Promise<string | ClusterRetention> {
    const v = await this.unwrap(
      this.raw.POST("/admin/retention/run", {
        params: { query: { wait: false } },
        body: { dry_run: o.dryRun ?? false },
        headers: this.admin,
        signal: o.signal,
      }),
      202,
    );
    return isCluster(v) ? v : (v as { run_id: string }).run_id;
  }

  pauseRetention(reason?: string, o: CallOptions = {}): Promise<PauseState> {
    return this.unwrap(
      this.raw.PUT("/admin/retention/pause", { body: { paused: true, reason }, headers: this.admin, signal: o.signal }),
      200,
    );
  }

  resumeRetention(o: CallOptions = {}): Promise<PauseState> {
    return this.unwrap(
      this.raw.PUT("/admin/retention/pause", { body: { paused: false }, headers: this.admin, signal: o.signal }),
      200,
    );
  }

  /** Every thread on legal hold, deleted or not. */
  async legalHolds(o: CallOptions = {}): Promise<Thread[]> {
    const p = await this.unwrap(this.raw.GET("/admin/legal_holds", { headers: this.admin, signal: o.signal }), 200);
    return p.threads;
  }

  /** A thread whether soft-deleted or not. */
  adminThread(tid: string, o: CallOptions = {}): Promise<Thread> {
    return this.unwrap(
      this.raw.GET("/admin/threads/{tid}", { params: { path: { tid } }, headers: this.admin, signal: o.signal }),
      200,
    );
  }

  setLegalHold(tid: string, hold: boolean, o: CallOptions = {}): Promise<Thread> {
    return this.unwrap(
      this.raw.PUT("/admin/threads/{tid}/legal_hold", {
        params: { path: { tid } },
        body: { legal_hold: hold },
        headers: this.admin,
        signal: o.signal,
      }),
      200,
    );
  }

  threadPolicy(tid: string, o: CallOptions = {}): Promise<ThreadPolicy> {
    return this.unwrap(
      this.raw.GET("/admin/threads/{tid}/retention", { params: { path: { tid } }, headers: this.admin, signal: o.signal }),
      200,
    );
  }

  setThreadPolicy(tid: string, override: PolicyOverride, o: CallOptions = {}): Promise<ThreadPolicy> {
    return this.unwrap(
      this.raw.PUT("/admin/threads/{tid}/retention", {
        params: { path: { tid } },
        body: override,
        headers: this.admin,
        signal: o.signal,
      }),
      200,
    );
  }

  async clearThreadPolicy(tid: string, o: CallOptions = {}): Promise<void> {
    await this.unwrap(
      this.raw.DELETE("/admin/threads/{tid}/retention", { params: { path: { tid } }, headers: this.admin, signal: o.signal }),
      204,
    );
  }

  /** Writes a backup into the server's BACKUP_PATH (shard: on a cluster node). */
  createBackup(o: CallOptions & { shard?: number } = {}): Promise<BackupManifest> {
    return this.unwrap(
      this.raw.POST("/admin/backups", {
        params: { query: o.shard === undefined ? {} : { shard: o.shard } },
        headers: this.admin,
        signal: o.signal,
      }),
      201,
    );
  }

  listBackups(o: CallOptions = {}): Promise<BackupList> {
    return this.unwrap(this.raw.GET("/admin/backups", { headers: this.admin, signal: o.signal }), 200);
  }

  /**
   * The backup archive as it arrives (tar, or zstd). A stream that breaks
   * before its end is no backup: keep it only once read to its end.
   */
  async streamBackup(
    o: CallOptions & { shard?: number; compress?: "zstd" | "none" } = {},
  ): Promise<ReadableStream<Uint8Array>> {
    const q: { shard?: number; compress?: "zstd" | "none" } = {};
    if (o.shard !== undefined) q.shard = o.shard;
    if (o.compress !== undefined) q.compress = o.compress;
    const { error, response } = await this.raw.POST("/admin/backups/stream", {
      params: { query: q },
      headers: this.admin,
      signal: o.signal,
      parseAs: "stream",
    });
    if (response.status !== 200 || !response.body) throw this.failure(response, error);
    return response.body;
  }

  /**
   * Erases everything author wrote (subject erasure, spec §12): starts a
   * retention run at once. Without sealing: sealing_disabled.
   */
  requestErasure(author: string, o: CallOptions = {}): Promise<ErasureAccepted> {
    return this.unwrap(this.raw.POST("/admin/erasures", { body: { author }, headers: this.admin, signal: o.signal }), 202);
  }

  erasure(id: string, o: CallOptions = {}): Promise<ErasureStatus> {
    return this.unwrap(
      this.raw.GET("/admin/erasures/{id}", { params: { path: { id } }, headers: this.admin, signal: o.signal }),
      200,
    );
  }

  /**
   * Asks for an erasure's status every everyMs (default 200) until it is
   * completed or failed (which the next run tries again), or signal aborts.
   */
  async waitErasure(id: string, o: CallOptions & { everyMs?: number } = {}): Promise<ErasureStatus> {
    for (;;) {
      const st = await this.erasure(id, o);
      if (st.status === "completed" || st.status === "failed") return st;
      await sleep(o.everyMs ?? 200, o.signal);
    }
  }

  /** A completed erasure's receipt (erasure_incomplete before; receipt_unsigned without signed audit footers). */
  erasureReceipt(id: string, o: CallOptions = {}): Promise<ErasureReceipt> {
    return this.unwrap(
      this.raw.GET("/admin/erasures/{id}/receipt", { params: { path: { id } }, headers: this.admin, signal: o.signal }),
      200,
    );
  }

  clusterStatus(o: CallOptions = {}): Promise<ClusterStatus> {
    return this.unwrap(this.raw.GET("/admin/cluster", { headers: this.admin, signal: o.signal }), 200);
  }

  moveShard(n: number, to: string, o: CallOptions = {}): Promise<MoveResult> {
    return this.unwrap(
      this.raw.POST("/admin/cluster/shards/{n}/move", {
        params: { path: { n } },
        body: { to },
        headers: this.admin,
        signal: o.signal,
      }),
      200,
    );
  }
}

function query(o: ListOptions): { limit?: number; cursor?: string; include_deleted?: boolean } {
  const q: { limit?: number; cursor?: string; include_deleted?: boolean } = {};
  if (o.limit !== undefined) q.limit = o.limit;
  if (o.cursor) q.cursor = o.cursor;
  if (o.includeDeleted) q.include_deleted = true;
  return q;
}
