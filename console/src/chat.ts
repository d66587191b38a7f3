// The chat pane of one session: stored turns, the live turn read from the event stream with
// fetch (Last-Event-ID on every reconnect), stop and steer, starters and follow-up chips.
//
// A page reload: the key is gone with the page (it lives in memory only), so the person signs
// in again; the live turn's events seen so far are kept in sessionStorage (conversation text,
// never the key) and replayed, and the stream is resumed after the last of them.

import { ApiError, type Api, type Message, type StreamEvent } from "./api";
import { announce, h } from "./dom";
import { TurnView, type TurnHooks } from "./turn";

type Data = Record<string, unknown>;
const LIVE_KEY = "weft:live-turn";
const RECONNECT_MS = 1000;
const MAX_RECONNECTS = 30;
const STARTERS_RETRY_MS = 1500;
const STARTERS_TRIES = 20;

interface LiveSnapshot {
  sessionId: string;
  events: StreamEvent[];
}

export interface ChatHost {
  api: Api;
  openPassage(ref: Data): void;
  download(path: string, name: string): void;
  /** A new session of the picked agent, titled `title` (untitled when empty). */
  createSession(title: string): Promise<string>;
  sessionsChanged(): void;
  /** A `deliverable` arrived: a file under /workspace/output was written. */
  filesChanged(): void;
  /** The agent picked for the next message. */
  agentId(): string;
}

export class ChatPane {
  readonly el: HTMLElement;
  sessionId: string | undefined;
  #log = h("div", { class: "log", role: "log", "aria-label": "Conversation" });
  #starters = h("div", { class: "chips starters", role: "group", "aria-label": "Suggested questions" });
  #input = h("textarea", { id: "composer", rows: 3, placeholder: "Ask a question", "aria-label": "Message" });
  #send = h("button", { type: "submit", class: "primary" }, "Send");
  #stop = h("button", { type: "button", hidden: true }, "Stop");
  #live: TurnView | undefined;
  #abort: AbortController | undefined;
  #notices: AbortController | undefined;
  /** The open session has no message and no title yet: the first question names it. */
  #untitled = false;
  /** Session changes (a new conversation, an agent picked) run one after another, and a
   * question waits for them: it must go to the session they end with. */
  #changes: Promise<void> = Promise.resolve();

  constructor(private readonly host: ChatHost) {
    const form = h("form", { class: "composer", onsubmit: (e: Event) => { e.preventDefault(); void this.#submit(); } },
      this.#input, h("div", { class: "actions" }, this.#send, this.#stop));
    this.#input.addEventListener("keydown", (e: KeyboardEvent) => {
      if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); void this.#submit(); }
    });
    this.#stop.addEventListener("click", () => void this.#stopTurn());
    this.el = h("section", { class: "chat", "aria-label": "Chat" }, this.#log, this.#starters, form);
  }

  #hooks(sessionId: string): TurnHooks {
    return {
      api: this.host.api,
      sessionId,
      openPassage: (ref) => this.host.openPassage(ref),
      ask: (q, suggestion) => void this.ask(q, suggestion),
      download: (path, name) => this.host.download(path, name),
      filesChanged: () => this.host.filesChanged(),
    };
  }

  /** Show `sessionId` (undefined: no conversation until the first question). */
  open(sessionId: string | undefined): Promise<void> {
    return this.#serial(() => this.#open(sessionId));
  }

  #clear(sessionId: string | undefined): void {
    this.#abort?.abort();
    this.#notices?.abort();
    this.#live = undefined;
    this.#setRunning(false);
    this.sessionId = sessionId;
    this.#untitled = false;
    this.#log.replaceChildren();
    this.#starters.replaceChildren();
  }

  async #open(sessionId: string | undefined): Promise<void> {
    this.#clear(sessionId);
    if (!sessionId) return;
    const messages = await this.host.api.request<Message[]>(
      "GET", `/sessions/${encodeURIComponent(sessionId)}/messages?limit=200`);
    const snapshot = readSnapshot(sessionId);
    const liveRequest = snapshot?.events.find((e) => e.type === "turn_started")?.envelope.request_id;
    // memory keeps a running turn's assistant row at status "running": that turn is shown
    // from its event stream, not from the stored rows.
    const running = new Set(messages.filter((m) => m.role === "assistant" && m.status === "running")
      .map((m) => m.request_id));
    const stored = [...groupTurns(messages)].filter(([rid]) => rid !== liveRequest);
    const render = (skip: Set<string>) => {
      for (const [requestId, pair] of stored) {
        if (skip.has(requestId)) continue;
        this.#log.append(TurnView.fromMessages(this.#hooks(sessionId), pair.user, pair.assistant).el);
      }
    };
    if (snapshot) {
      render(new Set());
      const view = this.#newLive(sessionId);
      for (const event of snapshot.events) view.apply(event);
      view.renderAnswer();
      if (!view.ended) void this.#follow(view, "GET", `/sessions/${encodeURIComponent(sessionId)}/stream`);
      return;
    }
    render(running);
    if (running.size > 0) {
      // Not awaited: following a running turn lasts as long as the turn.
      void this.#rejoin(sessionId, running).then((rejoined) => {
        if (!rejoined && this.sessionId === sessionId) {
          render(new Set([...stored.map(([rid]) => rid)].filter((rid) => !running.has(rid))));
        }
      });
    }
    if (messages.length === 0) {
      const session = await this.host.api.request<{ title?: string }>("GET", `/sessions/${encodeURIComponent(sessionId)}`);
      this.#untitled = this.sessionId === sessionId && !session.title;
      void this.#loadStarters(sessionId);
    }
  }

  /** A new conversation: a session of the picked agent made now, so its starters can be
   * shown before the first question (they are served per session). The open session is
   * kept when it is still empty. */
  startNew(): Promise<void> {
    // The page empties at once: what is sent from now on goes to the new conversation.
    if (!this.#isEmpty()) this.#clear(undefined);
    return this.#serial(() => this.#startNew());
  }

  #serial(change: () => Promise<void>): Promise<void> {
    const next = this.#changes.then(change);
    this.#changes = next.catch(() => undefined);
    return next;
  }

  async #startNew(): Promise<void> {
    if (this.#isEmpty()) {
      void this.#loadStarters(this.sessionId ?? "");
      return;
    }
    const sessionId = await this.host.createSession("");
    await this.#open(sessionId);
  }

  /** Another agent was picked: an empty open conversation (or none) takes it at once and
   * shows its starters; a conversation under way keeps its history and uses the new agent
   * from the next message on. */
  agentChanged(agentId: string): Promise<void> {
    return this.#serial(() => this.#agentChanged(agentId));
  }

  async #agentChanged(agentId: string): Promise<void> {
    if (!this.sessionId) {
      await this.#startNew();
      return;
    }
    if (!this.#isEmpty()) return;
    const sessionId = this.sessionId;
    this.#starters.replaceChildren();
    await this.host.api.request("PATCH", `/sessions/${encodeURIComponent(sessionId)}`, { agent_id: agentId });
    void this.#loadStarters(sessionId);
  }

  #isEmpty(): boolean {
    return this.sessionId !== undefined && this.#log.childElementCount === 0 && !this.#live;
  }

  focusComposer(): void {
    this.#input.focus();
  }

  /** A turn still running (begun in another tab, or before a reload that kept no events):
   * follow it from its first event. False when its stream is gone. */
  async #rejoin(sessionId: string, running: Set<string>): Promise<boolean> {
    const abort = new AbortController();
    this.#abort = abort;
    let view: TurnView | undefined;
    try {
      await this.host.api.stream("GET", `/sessions/${encodeURIComponent(sessionId)}/stream`,
        { signal: abort.signal }, (event) => {
          if (!view) {
            if (event.type !== "turn_started" || !running.has(event.envelope.request_id ?? "")) {
              abort.abort();
              return;
            }
            view = this.#newLive(sessionId);
          }
          this.#onEvent(view, event);
        });
    } catch {
      if (!view) return false;
    }
    if (!view) return false;
    if (!view.ended) void this.#follow(view, "GET", `/sessions/${encodeURIComponent(sessionId)}/stream`);
    else this.#setRunning(false);
    return true;
  }

  async #loadStarters(sessionId: string): Promise<void> {
    try {
      for (let tries = 0; tries < STARTERS_TRIES; tries++) {
        const set = await this.host.api.request<Data>("GET", `/sessions/${encodeURIComponent(sessionId)}/starters`);
        if (this.sessionId !== sessionId || !this.#isEmpty()) return;
        // "generating": another replica is making the set; it is ready within seconds.
        if (set["state"] === "generating") {
          await new Promise((r) => setTimeout(r, STARTERS_RETRY_MS));
          continue;
        }
        if (set["state"] !== "ready") return;
        const questions = (set["questions"] as Data[] | undefined) ?? [];
        this.#starters.replaceChildren(...questions.map((q) =>
          h("button", { type: "button", class: "chip", onclick: () => void this.ask(String(q["text"] ?? ""),
            { placement: "starter", question_id: q["id"] }) }, String(q["text"] ?? ""))));
        return;
      }
    } catch {
      // starters are optional: a session without them simply shows none
    }
  }

  #newLive(sessionId: string): TurnView {
    const view = new TurnView(this.#hooks(sessionId));
    this.#live = view;
    this.#log.append(view.el);
    this.#setRunning(true);
    return view;
  }

  async #submit(): Promise<void> {
    const text = this.#input.value.trim();
    if (!text) return;
    if (this.#live && !this.#live.ended && this.sessionId) {
      await this.#steer(text);
      return;
    }
    await this.ask(text);
  }

  async ask(question: string, suggestion?: Data): Promise<void> {
    if (!question || (this.#live && !this.#live.ended)) return;
    await this.#changes;
    if (this.#live && !this.#live.ended) return;
    let sessionId: string;
    const title = question.slice(0, 80);
    try {
      if (this.sessionId === undefined) {
        sessionId = await this.host.createSession(title);
      } else {
        sessionId = this.sessionId;
        if (this.#untitled) {
          await this.host.api.request("PATCH", `/sessions/${encodeURIComponent(sessionId)}`, { title });
          this.host.sessionsChanged();
        }
      }
    } catch (err) {
      announce(`Could not open a session: ${(err as Error).message}`, "error");
      return;
    }
    this.#untitled = false;
    this.#input.value = "";
    this.#starters.replaceChildren();
    this.#notices?.abort();
    this.sessionId = sessionId;
    const view = this.#newLive(sessionId);
    const body: Data = { query: question };
    const agent = this.host.agentId();
    if (agent) body["agent_id"] = agent;
    if (suggestion) body["suggestion"] = suggestion;
    await this.#follow(view, "POST", `/agent-chat/${encodeURIComponent(sessionId)}`, body);
    this.host.sessionsChanged();
  }

  /** Read the turn to its end: the first request, then GET .../stream with Last-Event-ID after
   * every break, until `complete`. */
  async #follow(view: TurnView, method: "GET" | "POST", path: string, body?: Data): Promise<void> {
    const sessionId = this.sessionId ?? "";
    const abort = new AbortController();
    this.#abort = abort;
    let attempt = 0;
    for (;;) {
      try {
        await this.host.api.stream(method, path, { body, lastEventId: view.lastId, signal: abort.signal },
          (event) => this.#onEvent(view, event));
        if (view.ended) break;
      } catch (err) {
        if (abort.signal.aborted) return;
        if (err instanceof ApiError && err.status !== 0 && err.status < 500 && !(method === "GET" && err.status === 404)) {
          announce(`The message was not sent: ${err.message}`, "error");
          view.el.remove();
          this.#setRunning(false);
          clearSnapshot();
          return;
        }
      }
      if (view.ended || abort.signal.aborted || ++attempt > MAX_RECONNECTS) break;
      // Resume after the last event seen: a dropped connection never repeats text.
      method = "GET";
      path = `/sessions/${encodeURIComponent(sessionId)}/stream`;
      body = undefined;
      await new Promise((r) => setTimeout(r, RECONNECT_MS));
    }
    this.#setRunning(false);
    if (view.ended) {
      clearSnapshot();
      void this.#followUps(view);
    }
  }

  #onEvent(view: TurnView, event: StreamEvent): void {
    if (!view.apply(event)) return;
    if (!view.ended) writeSnapshot({ sessionId: this.sessionId ?? "", events: view.events });
  }

  /** Follow-ups come as a `suggestions_ready` notice on the session's stream after the
   * turn's `complete` (docs/api.md, "Without polling"): keep reading after it until the
   * notice for this answer arrives, another turn starts, or the person moves on. */
  async #followUps(view: TurnView): Promise<void> {
    const sessionId = this.sessionId;
    if (!sessionId || !view.assistantMessageId) return;
    const abort = new AbortController();
    this.#notices?.abort();
    this.#notices = abort;
    try {
      await this.host.api.stream("GET", `/sessions/${encodeURIComponent(sessionId)}/stream`,
        { lastEventId: view.lastId, signal: abort.signal }, (event) => {
          if (event.type === "turn_started") { abort.abort(); return; }
          view.apply(event);
          if (event.type === "suggestions_ready"
              && event.envelope.data["assistant_message_id"] === view.assistantMessageId) abort.abort();
        });
    } catch {
      // aborted, or the stream ended: follow-ups are optional
    }
  }

  async #stopTurn(): Promise<void> {
    if (!this.sessionId) return;
    try {
      await this.host.api.request("POST", `/sessions/${encodeURIComponent(this.sessionId)}/stop`);
      announce("Stopping the turn");
    } catch (err) {
      announce(`Stop failed: ${(err as Error).message}`, "error");
    }
  }

  async #steer(content: string): Promise<void> {
    try {
      await this.host.api.request("POST", `/sessions/${encodeURIComponent(this.sessionId ?? "")}/steer`, { content });
      this.#input.value = "";
      announce("Steer message sent: the agent takes it into account before its next step");
    } catch (err) {
      announce(`Steer failed: ${(err as Error).message}`, "error");
    }
  }

  #setRunning(running: boolean): void {
    this.#stop.hidden = !running;
    this.#send.textContent = running ? "Steer" : "Send";
    this.#input.placeholder = running ? "Steer the running answer" : "Ask a question";
  }
}

function groupTurns(messages: Message[]): Map<string, { user?: Message; assistant?: Message }> {
  const turns = new Map<string, { user?: Message; assistant?: Message }>();
  for (const m of messages) {
    const pair = turns.get(m.request_id) ?? {};
    if (m.role === "user") pair.user = m;
    else if (m.role === "assistant") pair.assistant = m;
    turns.set(m.request_id, pair);
  }
  return turns;
}

function readSnapshot(sessionId: string): LiveSnapshot | undefined {
  try {
    const raw = sessionStorage.getItem(LIVE_KEY);
    const snap = raw ? (JSON.parse(raw) as LiveSnapshot) : undefined;
    return snap && snap.sessionId === sessionId ? snap : undefined;
  } catch {
    return undefined;
  }
}

function writeSnapshot(snapshot: LiveSnapshot): void {
  try {
    sessionStorage.setItem(LIVE_KEY, JSON.stringify(snapshot));
  } catch {
    // full or unavailable: a reload then replays the turn from its first event instead
  }
}

function clearSnapshot(): void {
  sessionStorage.removeItem(LIVE_KEY);
}

export function lastSessionHint(): string | undefined {
  try {
    const raw = sessionStorage.getItem(LIVE_KEY);
    return raw ? (JSON.parse(raw) as LiveSnapshot).sessionId : undefined;
  } catch {
    return undefined;
  }
}
