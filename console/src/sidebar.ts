// The sessions list with search, the agent picker and the "new conversation" button.

import type { Agent, Api, Session } from "./api";
import { announce, h } from "./dom";

const SEARCH_DELAY_MS = 250;

export class Sidebar {
  readonly el: HTMLElement;
  readonly agent = h("select", { id: "agent-picker" });
  #search = h("input", { type: "search", id: "session-search", maxlength: 200, placeholder: "Search conversations", autocomplete: "off" });
  #list = h("ul", { class: "sessions", "aria-label": "Conversations" });
  #timer: number | undefined;
  #current: string | undefined;

  constructor(
    private readonly api: Api,
    private readonly onOpen: (sessionId: string | undefined) => void,
  ) {
    this.#search.addEventListener("input", () => {
      window.clearTimeout(this.#timer);
      this.#timer = window.setTimeout(() => void this.refresh(), SEARCH_DELAY_MS);
    });
    this.el = h("nav", { class: "sidebar", id: "sidebar", "aria-label": "Conversations and agents" },
      h("button", { type: "button", class: "primary new", onclick: () => { this.select(undefined); onOpen(undefined); } }, "New conversation"),
      h("label", { for: "agent-picker" }, "Agent"), this.agent,
      h("label", { for: "session-search" }, "Search"), this.#search,
      this.#list);
  }

  async loadAgents(): Promise<void> {
    const agents = await this.api.request<(Agent & { available?: boolean })[]>("GET", "/agents");
    const usable = agents.filter((a) => a.available !== false);
    this.agent.replaceChildren(...usable.map((a) => h("option", { value: a.id }, a.name || a.id)));
    const preferred = usable.find((a) => a.id === "builtin-smart-reasoning");
    if (preferred) this.agent.value = preferred.id;
  }

  async refresh(): Promise<void> {
    const q = this.#search.value.trim();
    const query = q ? `&q=${encodeURIComponent(q)}` : "";
    try {
      const sessions = await this.api.request<Session[]>("GET", `/sessions?limit=50${query}`);
      this.#render(sessions, q);
    } catch (err) {
      announce(`Could not list conversations: ${(err as Error).message}`, "error");
    }
  }

  #render(sessions: Session[], q: string): void {
    if (sessions.length === 0) {
      this.#list.replaceChildren(h("li", { class: "empty" }, q ? "No conversation matches." : "No conversations yet."));
      return;
    }
    this.#list.replaceChildren(...sessions.map((s) =>
      h("li", {},
        h("button", {
          type: "button", class: "session", "data-session": s.id,
          "aria-current": s.id === this.#current ? "page" : undefined,
          onclick: () => { this.select(s.id); this.onOpen(s.id); },
        }, s.title || "Untitled conversation"))));
  }

  select(sessionId: string | undefined): void {
    this.#current = sessionId;
    for (const b of this.#list.querySelectorAll<HTMLButtonElement>("button.session")) {
      if (b.dataset["session"] === sessionId) b.setAttribute("aria-current", "page");
      else b.removeAttribute("aria-current");
    }
  }
}
