// Attachments (spec §16): files attached to messages, streamed both ways.
// An upload's body goes out as it is read, never gathered in memory; a
// download is the answer's ReadableStream as it arrives. ProgressDB's
// methods of the same names call these.

import type { Client } from "openapi-fetch";
import type { components, paths } from "./schema.js";

export type Attachment = components["schemas"]["Attachment"];

/**
 * An upload's bytes: in memory (Uint8Array, ArrayBuffer), a Blob (a File,
 * or `fs.openAsBlob(path)` in node: read from disk as it is sent), or a
 * ReadableStream, read once.
 */
export type UploadBody = Uint8Array | ArrayBuffer | Blob | ReadableStream<Uint8Array>;

export interface UploadOptions {
  /** The type the file is served back with (application/octet-stream when absent). */
  contentType?: string;
  /** Shown back and given in Content-Disposition. */
  filename?: string;
  /**
   * The same bytes again from their start, so that a retry can send a
   * ReadableStream again; without it a stream is sent once, and a 503 or
   * 421 is thrown.
   */
  getBody?: () => UploadBody | Promise<UploadBody>;
  signal?: AbortSignal;
}

export interface DownloadOptions {
  /** First byte of a range (0 when absent). */
  offset?: number;
  /** Bytes of the range from offset; to the end when absent. */
  length?: number;
  /** An ETag held (Download.etag): when it is the file's, notModified, with no bytes. */
  ifNoneMatch?: string;
  includeDeleted?: boolean;
  signal?: AbortSignal;
}

/** An attachment's bytes as they arrive, and what the answer says of them. */
export interface Download {
  /**
   * The bytes as they arrive. A stream cut before its end errors when
   * read: it never ends as if whole.
   */
  body: ReadableStream<Uint8Array>;
  /** The file's ETag (its SHA-256, quoted), for ifNoneMatch. */
  etag: string;
  contentType: string;
  filename: string | undefined;
  /** The whole file's length; offset and length place this answer's bytes in it. */
  size: number;
  offset: number;
  length: number;
  /** The answer is the range asked for (206). */
  partial: boolean;
  /** ifNoneMatch named the file: body is empty. */
  notModified: boolean;
}

/** What the client hands these functions. */
export interface Context {
  raw: Client<paths>;
  /** The fetch underneath the retries. */
  send: (input: Request) => Promise<Response>;
  /** Sends with the client's retries on 503 and 421; once: a single try. */
  retries: (signal: AbortSignal, once: boolean, send: () => Promise<Response>) => Promise<Response>;
  headers: Record<string, string>;
  failure: (response: Response, error: unknown) => Error;
}

function isStream(b: UploadBody): b is ReadableStream<Uint8Array> {
  return typeof (b as ReadableStream).getReader === "function";
}

export async function uploadAttachment(
  cx: Context,
  tid: string,
  mid: string,
  body: UploadBody,
  o: UploadOptions,
): Promise<Attachment> {
  // Each try sends its own body: bytes in memory or a Blob again, a
  // stream only from getBody. A Request's clone would tee a stream and
  // keep every byte for the copy.
  const once = isStream(body) && !o.getBody;
  const send = (request: Request) =>
    cx.retries(request.signal, once, async () => {
      if (request.bodyUsed) {
        const again = isStream(body) ? await o.getBody!() : body;
        request = new Request(request, { body: again, duplex: "half" } as RequestInit);
      }
      return cx.send(request);
    });
  const { data, error, response } = await cx.raw.POST("/v1/threads/{tid}/messages/{mid}/attachments", {
    params: { path: { tid, mid }, query: o.filename !== undefined ? { filename: o.filename } : {} },
    body: body as unknown as string,
    bodySerializer: (b: unknown) => b as string,
    headers: { ...cx.headers, "Content-Type": o.contentType ?? "application/octet-stream" },
    signal: o.signal,
    fetch: send,
    duplex: "half",
  });
  if (response.status !== 201) throw cx.failure(response, error);
  return data as Attachment;
}

export async function downloadAttachment(
  cx: Context,
  tid: string,
  mid: string,
  aid: string,
  o: DownloadOptions,
): Promise<Download> {
  const offset = o.offset ?? 0;
  if (!(offset >= 0) || (o.length !== undefined && !(o.length > 0))) {
    throw new Error(`progressdb: downloadAttachment: offset ${o.offset}, length ${o.length}: want offset >= 0 and length > 0`);
  }
  const header: { Range?: string; "If-None-Match"?: string } = {};
  if (o.length !== undefined) header.Range = `bytes=${offset}-${offset + o.length - 1}`;
  else if (offset > 0) header.Range = `bytes=${offset}-`;
  if (o.ifNoneMatch) header["If-None-Match"] = o.ifNoneMatch;
  const { error, response } = await cx.raw.GET("/v1/threads/{tid}/messages/{mid}/attachments/{aid}", {
    params: { path: { tid, mid, aid }, query: o.includeDeleted ? { include_deleted: true } : {}, header },
    headers: cx.headers,
    signal: o.signal,
    parseAs: "stream",
  });
  const h = response.headers;
  const d: Download = {
    body: response.body ?? new ReadableStream({ start: (c) => c.close() }),
    etag: h.get("etag") ?? "",
    contentType: h.get("content-type") ?? "",
    filename: dispositionFilename(h.get("content-disposition")),
    size: 0,
    offset: 0,
    length: Number(h.get("content-length") ?? 0),
    partial: false,
    notModified: false,
  };
  switch (response.status) {
    case 304:
      return { ...d, body: new ReadableStream({ start: (c) => c.close() }), length: 0, notModified: true };
    case 200:
      return { ...d, size: d.length };
    case 206: {
      const m = /^bytes (\d+)-\d+\/(\d+)$/.exec(h.get("content-range") ?? "");
      if (!m) {
        await response.body?.cancel();
        throw new Error(`progressdb: download: Content-Range ${JSON.stringify(h.get("content-range"))} is not one byte range`);
      }
      return { ...d, offset: Number(m[1]), size: Number(m[2]), partial: true };
    }
  }
  throw cx.failure(response, error);
}

/** The filename of a Content-Disposition: filename*=UTF-8''… first, else filename. */
function dispositionFilename(v: string | null): string | undefined {
  if (!v) return undefined;
  const ext = /filename\*\s*=\s*utf-8''([^;\s]+)/i.exec(v);
  if (ext) {
    try {
      return decodeURIComponent(ext[1]!);
    } catch {
      return undefined;
    }
  }
  const quoted = /filename\s*=\s*"((?:[^"\\]|\\.)*)"/i.exec(v);
  if (quoted) return quoted[1]!.replace(/\\(.)/g, "$1");
  return /filename\s*=\s*([^;\s]+)/i.exec(v)?.[1];
}
