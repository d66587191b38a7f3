// The public API of the gateway, called with the API key held in this module's closure only:
// never in a URL, a cookie, localStorage or sessionStorage (docs/console.md, "Sign-in").

import { createParser } from "eventsource-parser";

export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/** One event of a session stream: its position (`N-M`, absent for a replayed prompt), its
 * type and the JSON envelope (`data` holds the payload). */
export interface StreamEvent {
  id: string | undefined;
  type: string;
  envelope: Envelope;
}

export interface Envelope {
  id: string;
  type: string;
  request_id?: string;
  data: Record<string, unknown>;
}

export interface Session {
  id: string;
  title: string;
  agent_id: string | null;
  updated_at: string;
}

export interface Agent {
  id: string;
  name: string;
  description?: string;
}

export interface Message {
  id: string;
  request_id: string;
  role: string;
  content: string;
  status: string;
  agent_steps: Record<string, unknown>[];
  references: Record<string, unknown>[];
}

function reason(body: unknown, fallback: string): string {
  if (body && typeof body === "object" && "detail" in body) {
    const detail = (body as { detail: unknown }).detail;
    if (typeof detail === "string") return detail;
    if (detail && typeof detail === "object" && "message" in detail) {
      return String((detail as { message: unknown }).message);
    }
    return JSON.stringify(detail);
  }
  return fallback;
}

export class Api {
  #key: string;

  constructor(key: string) {
    this.#key = key;
  }

  #headers(extra: Record<string, string> = {}): Headers {
    const headers = new Headers(extra);
    headers.set("Authorization", `Bearer ${this.#key}`);
    return headers;
  }

  async request<T>(method: string, path: string, body?: unknown): Promise<T> {
    const init: RequestInit = { method, headers: this.#headers(), cache: "no-store" };
    if (body instanceof FormData) {
      init.body = body;
    } else if (body !== undefined) {
      init.headers = this.#headers({ "Content-Type": "application/json" });
      init.body = JSON.stringify(body);
    }
    const resp = await fetch(`/api/v1${path}`, init);
    if (resp.status === 204) return undefined as T;
    const text = await resp.text();
    const parsed: unknown = text ? safeJson(text) : undefined;
    if (!resp.ok) throw new ApiError(resp.status, reason(parsed, `${resp.status} ${resp.statusText}`));
    return parsed as T;
  }

  /** The bytes of a download, fetched with the key (a plain link could not send it). */
  async blob(path: string): Promise<Blob> {
    const resp = await fetch(`/api/v1${path}`, { headers: this.#headers() });
    if (!resp.ok) throw new ApiError(resp.status, `${resp.status} ${resp.statusText}`);
    return resp.blob();
  }

  /** Upload with progress: fetch cannot report upload progress, XMLHttpRequest can. */
  upload<T>(path: string, form: FormData, onProgress: (fraction: number) => void): Promise<T> {
    return new Promise((resolve, reject) => {
      const xhr = new XMLHttpRequest();
      xhr.open("POST", `/api/v1${path}`);
      xhr.setRequestHeader("Authorization", `Bearer ${this.#key}`);
      xhr.upload.addEventListener("progress", (e) => {
        if (e.lengthComputable) onProgress(e.loaded / e.total);
      });
      xhr.addEventListener("load", () => {
        const parsed = safeJson(xhr.responseText);
        if (xhr.status >= 200 && xhr.status < 300) resolve(parsed as T);
        else reject(new ApiError(xhr.status, reason(parsed, `upload failed (${xhr.status})`)));
      });
      xhr.addEventListener("error", () => reject(new ApiError(0, "upload failed: network error")));
      xhr.send(form);
    });
  }

  /** Read an event stream (POST a chat, or GET a session's stream with Last-Event-ID) with
   * fetch, calling `onEvent` per event; resolves when the server ends the stream. */
  async stream(
    method: "GET" | "POST",
    path: string,
    opts: { body?: unknown; lastEventId?: string; signal: AbortSignal },
    onEvent: (event: StreamEvent) => void,
  ): Promise<void> {
    const headers = this.#headers({ Accept: "text/event-stream" });
    if (opts.body !== undefined) headers.set("Content-Type", "application/json");
    if (opts.lastEventId) headers.set("Last-Event-ID", opts.lastEventId);
    const resp = await fetch(`/api/v1${path}`, {
      method,
      headers,
      body: opts.body === undefined ? undefined : JSON.stringify(opts.body),
      signal: opts.signal,
      cache: "no-store",
    });
    if (!resp.ok || !resp.body) {
      const parsed = safeJson(await resp.text());
      throw new ApiError(resp.status, reason(parsed, `${resp.status} ${resp.statusText}`));
    }
    const parser = createParser({
      onEvent(message) {
        const envelope = safeJson(message.data) as Envelope | undefined;
        if (!envelope || typeof envelope !== "object") return;
        onEvent({ id: message.id, type: message.event ?? envelope.type, envelope });
      },
    });
    const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      parser.feed(value);
    }
  }
}

export function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}
