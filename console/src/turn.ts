// One turn on screen: the question, collapsible thoughts, the tool-call timeline, the answer
// as rendered Markdown, references, deliverables, approval cards and follow-up chips. The
// view is a fold of the turn's events: `apply` takes them in order and ignores one it has
// already seen (by its stream position), so a replay after a reconnect or a page reload never
// duplicates text.

import type { Api, Envelope, Message, StreamEvent } from "./api";
import { announce, h, pretty } from "./dom";
import { linkCitations, renderMarkdown } from "./markdown";

type Data = Record<string, unknown>;

export interface TurnHooks {
  api: Api;
  sessionId: string;
  openPassage(ref: Data): void;
  ask(question: string, suggestion?: Data): void;
  download(path: string, name: string): void;
  filesChanged(): void;
}

interface ToolRow {
  li: HTMLLIElement;
  status: HTMLSpanElement;
  result: HTMLElement;
}

/** Compare stream positions `N-M` numerically; a position with no id sorts first. */
export function positionAfter(a: string, b: string | undefined): boolean {
  if (!b) return true;
  const [an = "0", am = "0"] = a.split("-");
  const [bn = "0", bm = "0"] = b.split("-");
  const x = BigInt(an);
  const y = BigInt(bn);
  return x > y || (x === y && BigInt(am) > BigInt(bm));
}

export class TurnView {
  readonly el: HTMLElement;
  lastId: string | undefined;
  requestId: string | undefined;
  assistantMessageId: string | undefined;
  ended = false;
  readonly events: StreamEvent[] = [];

  #question = h("div", { class: "question" });
  #thoughts = h("div", { class: "thoughts" });
  #timeline = h("ol", { class: "timeline", "aria-label": "Tool calls" });
  #answer = h("div", { class: "answer markdown", "aria-live": "polite" });
  #refs = h("ol", { class: "references", "aria-label": "References" });
  #files = h("ul", { class: "deliverables", "aria-label": "Deliverables" });
  #prompts = h("div", { class: "prompts" });
  #status = h("p", { class: "turn-status" });
  #chips = h("div", { class: "chips", role: "group", "aria-label": "Follow-up questions" });
  #rounds = new Map<number, { text: string; dropped: boolean }>();
  #thoughtBoxes = new Map<number, { box: HTMLDetailsElement; body: HTMLElement; text: string }>();
  #tools = new Map<string, ToolRow>();
  #references = new Map<string, Data>();
  #promptCards = new Map<string, HTMLElement>();
  #renderQueued = false;

  constructor(private readonly hooks: TurnHooks) {
    this.el = h(
      "article",
      { class: "turn" },
      this.#question,
      h("div", { class: "reply" }, this.#thoughts, this.#timeline, this.#prompts, this.#answer,
        this.#refs, this.#files, this.#status, this.#chips),
    );
  }

  /** Apply one stream event; false when it was a repeat and was ignored. */
  apply(event: StreamEvent): boolean {
    if (event.id !== undefined) {
      if (!positionAfter(event.id, this.lastId)) return false;
      this.lastId = event.id;
    }
    this.events.push(event);
    this.#dispatch(event.type, event.envelope);
    return true;
  }

  #dispatch(type: string, env: Envelope): void {
    const d = env.data ?? {};
    switch (type) {
      case "turn_started":
        this.requestId = env.request_id;
        this.assistantMessageId = `${env.id}a`;
        this.#question.replaceChildren(h("p", {}, String(d["query"] ?? "")));
        break;
      case "thought":
        this.#thought(Number(d["round"] ?? 0), String(d["delta"] ?? ""));
        break;
      case "final_answer":
        this.#finalAnswer(d);
        break;
      case "tool_call":
        this.#toolCall(d);
        break;
      case "tool_result":
        this.#toolResult(d);
        break;
      case "references":
        for (const ref of (d["references"] as Data[] | undefined) ?? []) this.#addReference(ref);
        this.#queueRender();
        break;
      case "deliverable":
        this.#deliverable(d);
        break;
      case "tool_approval_required":
        this.#promptCard(d);
        break;
      case "tool_approval_resolved":
        this.#resolvePrompt(d);
        break;
      case "error":
        this.#status.textContent = `Error: ${String(d["message"] ?? d["code"] ?? "failed")}`;
        this.#status.dataset["kind"] = "error";
        break;
      case "complete":
        this.#complete(d);
        break;
      case "suggestions_ready":
        if (String(d["assistant_message_id"] ?? "") === this.assistantMessageId) {
          this.showFollowUps((d["questions"] as Data[] | undefined) ?? []);
        }
        break;
      default:
        break; // context_compacted, tool, ...: nothing to show
    }
  }

  #thought(round: number, delta: string): void {
    let entry = this.#thoughtBoxes.get(round);
    if (!entry) {
      const body = h("div", { class: "thought-text" });
      const box = h("details", { class: "thought" }, h("summary", {}, `Thinking (step ${round + 1})`), body);
      entry = { box, body, text: "" };
      this.#thoughtBoxes.set(round, entry);
      this.#thoughts.append(box);
    }
    entry.text += delta;
    entry.body.textContent = entry.text;
  }

  #finalAnswer(d: Data): void {
    const round = Number(d["round"] ?? 0);
    if (d["superseded"]) {
      // Steer: the round's answer became an intermediate step; rerun (or an unknown reason):
      // the round starts over, its thoughts too (docs/api.md, "Rendering the answer").
      this.#rounds.set(round, { text: "", dropped: true });
      const by = String(d["superseded_by"] ?? "steer");
      if (by !== "steer") {
        this.#thoughtBoxes.get(round)?.box.remove();
        this.#thoughtBoxes.delete(round);
      }
      this.#queueRender();
      return;
    }
    const entry = this.#rounds.get(round);
    if (!entry || entry.dropped) this.#rounds.set(round, { text: String(d["delta"] ?? ""), dropped: false });
    else entry.text += String(d["delta"] ?? "");
    this.#queueRender();
  }

  /** The answer: the text of the rounds not superseded, in round order. */
  answerText(): string {
    return [...this.#rounds.entries()]
      .sort(([a], [b]) => a - b)
      .filter(([, r]) => !r.dropped)
      .map(([, r]) => r.text)
      .join("");
  }

  #queueRender(): void {
    if (this.#renderQueued) return;
    this.#renderQueued = true;
    requestAnimationFrame(() => {
      this.#renderQueued = false;
      this.renderAnswer();
    });
  }

  renderAnswer(): void {
    const frag = renderMarkdown(this.answerText());
    linkCitations(frag, (a) => this.#references.has(a), (a) => this.#openRef(a));
    this.#answer.replaceChildren(frag);
  }

  #openRef(alias: string): void {
    const ref = this.#references.get(alias);
    if (ref) this.hooks.openPassage(ref);
  }

  #addReference(ref: Data): void {
    const alias = String(ref["alias"] ?? ref["chunk_id"] ?? "");
    if (!alias || this.#references.has(alias)) return;
    this.#references.set(alias, ref);
    const chunk = String(ref["chunk_id"] ?? "");
    if (chunk && chunk !== alias) this.#references.set(chunk, ref);
    this.#refs.append(
      h("li", {},
        h("button", { type: "button", class: "link", onclick: () => this.hooks.openPassage(ref) },
          `[${alias}] ${String(ref["title"] ?? "passage")}`)),
    );
  }

  #toolCall(d: Data): void {
    const id = String(d["call_id"] ?? "");
    if (this.#tools.has(id)) return;
    const status = h("span", { class: "tool-status" }, "running");
    const result = h("div", { class: "tool-result" });
    const li = h("li", { class: "tool", "data-call": id },
      h("div", { class: "tool-head" }, h("strong", {}, String(d["tool_name"] ?? "tool")), status),
      h("details", {}, h("summary", {}, "Arguments"), h("pre", {}, pretty(d["arguments"] ?? {}))),
      result);
    this.#tools.set(id, { li, status, result });
    this.#timeline.append(li);
  }

  #toolResult(d: Data): void {
    const id = String(d["call_id"] ?? "");
    if (!this.#tools.has(id)) this.#toolCall({ call_id: id, tool_name: d["tool_name"] });
    const row = this.#tools.get(id);
    if (!row) return;
    const ok = Boolean(d["success"]);
    row.status.textContent = `${ok ? "done" : "failed"} in ${Number(d["duration_ms"] ?? 0)} ms`;
    row.li.dataset["state"] = ok ? "done" : "failed";
    const text = ok ? String(d["output"] ?? "") : String(d["error"] ?? d["output"] ?? "");
    row.result.replaceChildren(h("details", {}, h("summary", {}, ok ? "Result" : "Error"), h("pre", {}, text)));
  }

  #deliverable(d: Data): void {
    const path = String(d["path"] ?? "");
    const name = path.split("/").pop() ?? path;
    this.#files.append(
      h("li", {},
        h("button", { type: "button", class: "link",
          onclick: () => this.hooks.download(String(d["download_path"] ?? ""), name) },
          `Download ${path}`),
        ` (${Number(d["size"] ?? 0)} bytes)`),
    );
    this.hooks.filesChanged();
  }

  #promptCard(d: Data): void {
    const id = String(d["prompt_id"] ?? "");
    if (!id || this.#promptCards.has(id)) return;
    const args = h("textarea", { rows: 4, "aria-label": "Arguments (JSON; edit to approve with changes)" });
    args.value = pretty(d["arguments"] ?? {});
    const original = args.value;
    const reason = h("input", { type: "text", "aria-label": "Reason (optional)", placeholder: "Reason (optional)", maxlength: 2000 });
    const remember = h("select", { "aria-label": "Remember this decision" },
      h("option", { value: "call" }, "this call only"),
      h("option", { value: "session" }, "for this session"),
      h("option", { value: "agent" }, "for this agent"));
    // An "always ask" tool is asked about every time: nothing to remember.
    if (d["always_ask"]) remember.disabled = true;
    const outcome = h("p", { class: "prompt-outcome", role: "status", tabindex: -1 });
    const decide = async (decision: "approve" | "deny") => {
      const body: Data = { decision, remember: decision === "deny" ? "call" : remember.value };
      if (reason.value) body["reason"] = reason.value;
      if (decision === "approve" && args.value !== original) {
        try {
          body["arguments"] = JSON.parse(args.value);
        } catch {
          outcome.textContent = "The edited arguments are not valid JSON.";
          return;
        }
      }
      try {
        const sent = await this.hooks.api.request<Data>("POST", `/agent/prompts/${encodeURIComponent(id)}`, body);
        // The stream's tool_approval_resolved may have come first: it has the last word.
        if (card.dataset["state"] === "resolved") return;
        const said = decision === "approve" ? "Approved, waiting for the tool" : "Denied";
        // An "always ask" tool is never remembered: say so rather than let the person expect it.
        outcome.textContent = sent?.["remember_ignored"] ? `${said} (not remembered: this tool always asks)` : said;
        card.dataset["state"] = "decided";
      } catch (err) {
        if (card.dataset["state"] === "resolved") return;
        outcome.textContent = `Could not send the decision: ${(err as Error).message}`;
      }
    };
    const card = h("section", { class: "prompt-card", "aria-label": `Approval for ${String(d["tool_name"])}` },
      h("h3", {}, `Allow ${String(d["tool_name"] ?? "tool")}?`),
      h("p", {}, `Risk: ${String(d["risk"] ?? "?")}. ${String(d["reason"] ?? "")}`),
      args, reason, remember,
      h("div", { class: "actions" },
        h("button", { type: "button", class: "primary", onclick: () => void decide("approve") }, "Approve"),
        h("button", { type: "button", onclick: () => void decide("deny") }, "Deny")),
      outcome);
    this.#promptCards.set(id, card);
    this.#prompts.append(card);
    const row = this.#tools.get(String(d["call_id"] ?? ""));
    if (row) row.status.textContent = "waiting for your approval";
    announce(`The agent asks to run ${String(d["tool_name"] ?? "a tool")}: approve or deny it in the conversation`);
  }

  #resolvePrompt(d: Data): void {
    const card = this.#promptCards.get(String(d["prompt_id"] ?? ""));
    if (!card) return;
    const row = this.#tools.get(String(d["call_id"] ?? ""));
    if (row && !row.li.dataset["state"]) {
      row.status.textContent = d["outcome"] === "approved" ? "running" : String(d["outcome"] ?? "");
    }
    card.dataset["state"] = "resolved";
    const hadFocus = card.contains(document.activeElement);
    for (const control of card.querySelectorAll("button, textarea, input, select")) {
      (control as HTMLButtonElement).disabled = true;
    }
    const out = card.querySelector(".prompt-outcome");
    const how = [d["edited"] ? "with your edits" : "", d["remember"] && d["remember"] !== "call" ? `remembered for this ${String(d["remember"])}` : ""]
      .filter(Boolean).join(", ");
    if (out) out.textContent = `Resolved: ${String(d["outcome"] ?? "")}${how ? ` (${how})` : ""}`;
    // A keyboard user who just decided keeps a place in the page (a disabled button drops focus).
    if (hadFocus) (out as HTMLElement | null)?.focus();
  }

  #complete(d: Data): void {
    this.ended = true;
    const status = String(d["status"] ?? "completed");
    // The complete event's answer is the one stored: it wins when the deltas were lost,
    // never sent, or are not it (a stop after tool results streams a closing answer, and
    // the cut round's text is in no stored message; the engine sends no marker for it).
    const final = typeof d["final_answer"] === "string" ? d["final_answer"] : "";
    if (final && final !== this.answerText()) {
      this.#rounds.clear();
      this.#rounds.set(0, { text: final, dropped: false });
    }
    this.renderAnswer();
    this.el.dataset["status"] = status;
    if (status !== "completed") {
      const said = this.#status.textContent ? `${this.#status.textContent} ` : "";
      this.#status.textContent = `${said}(turn ${status})`;
    }
  }

  showFollowUps(questions: Data[]): void {
    this.#chips.replaceChildren(
      ...questions.map((q) =>
        h("button", { type: "button", class: "chip",
          onclick: () => this.hooks.ask(String(q["text"] ?? ""), {
            placement: "follow_up", assistant_message_id: this.assistantMessageId, question_id: q["id"],
          }) }, String(q["text"] ?? ""))),
    );
  }

  /** A stored turn (user message + assistant message) rendered the same way. */
  static fromMessages(hooks: TurnHooks, user: Message | undefined, assistant: Message | undefined): TurnView {
    const view = new TurnView(hooks);
    view.ended = true;
    view.requestId = (assistant ?? user)?.request_id;
    view.assistantMessageId = assistant?.id;
    if (user) view.#question.replaceChildren(h("p", {}, user.content));
    for (const step of assistant?.agent_steps ?? []) {
      const round = Number(step["round"] ?? 0);
      const thought = String(step["thought"] ?? step["reasoning"] ?? "");
      if (thought) view.#thought(round, thought);
      for (const call of (step["tool_calls"] as Data[] | undefined) ?? []) {
        view.#toolCall(call);
        view.#toolResult(call);
      }
    }
    for (const ref of assistant?.references ?? []) view.#addReference(ref);
    if (assistant) view.#rounds.set(0, { text: assistant.content, dropped: false });
    view.renderAnswer();
    return view;
  }
}
