// Entry point: sign-in, then the console (sessions, chat, knowledge, files).

import "./style.css";
import { Api, ApiError } from "./api";
import { ChatPane, lastSessionHint } from "./chat";
import { announce, h } from "./dom";
import { FilesPanel, KnowledgePanel } from "./knowledge";
import { beginSignIn, finishSignIn, loadSignInConfig, type OidcConfig } from "./oidc";
import { Sidebar } from "./sidebar";

type Data = Record<string, unknown>;
const app = document.getElementById("app") as HTMLElement;

function signIn(oidc: OidcConfig | null, error = ""): void {
  const key = h("input", { type: "password", id: "api-key", autocomplete: "off", required: true, spellcheck: "false" });
  const message = h("p", { class: "error", role: "alert" }, error);
  const form = h("form", { class: "signin", "aria-labelledby": "signin-title",
    onsubmit: (e: Event) => { e.preventDefault(); void start(key.value.trim(), message); } },
    h("h1", { id: "signin-title" }, "Weft console"),
    h("p", {}, "Sign in with an API key. It is kept in this page's memory only: a reload asks for it again."),
    h("label", { for: "api-key" }, "API key"), key,
    h("button", { type: "submit", class: "primary" }, "Sign in"),
    oidc && h("button", { type: "button", class: "oidc",
      onclick: () => void beginSignIn(oidc).catch((err: Error) => { message.textContent = err.message; }) },
      `Sign in with ${oidc.label}`),
    message);
  app.replaceChildren(h("main", { class: "signin-page" }, form));
  key.focus();
}

async function start(key: string, message: HTMLElement): Promise<void> {
  if (!key) return;
  const api = new Api(key);
  try {
    await api.request("GET", "/sessions?limit=1");
  } catch (err) {
    message.textContent = err instanceof ApiError && err.status === 401
      ? "That key was refused." : `Sign-in failed: ${(err as Error).message}`;
    return;
  }
  await mount(api);
}

async function mount(api: Api): Promise<void> {
  const passage = h("dialog", { class: "passage", "aria-labelledby": "passage-title" });
  const openPassage = (ref: Data) => {
    passage.replaceChildren(
      h("h2", { id: "passage-title" }, String(ref["title"] || "Cited passage")),
      h("p", { class: "meta" }, `[${String(ref["alias"] ?? "")}] document ${String(ref["document_id"] ?? "")}`),
      h("blockquote", {}, String(ref["excerpt"] ?? "")),
      h("form", { method: "dialog" }, h("button", { type: "submit", class: "primary" }, "Close")));
    passage.showModal();
  };
  const download = (path: string, name: string) => {
    void api.blob(path.replace(/^\/api\/v1/, "")).then((blob) => {
      const url = URL.createObjectURL(blob);
      const a = h("a", { href: url, download: name });
      document.body.append(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(url), 10_000);
    }, (err: Error) => announce(`Download failed: ${err.message}`, "error"));
  };

  let sidebar: Sidebar;
  let chat: ChatPane;
  const createSession = async (title: string): Promise<string> => {
    const created = await api.request<{ id: string }>("POST", "/sessions",
      { title: title || undefined, agent_id: sidebar.agent.value || undefined });
    sidebar.select(created.id);
    files.sessionId = created.id;
    void sidebar.refresh().then(() => sidebar.select(created.id));
    return created.id;
  };
  const files = new FilesPanel(api, download, async () => chat.sessionId ?? await chat.startNew().then(() => chat.sessionId ?? ""));
  chat = new ChatPane({
    api, openPassage, download, createSession,
    sessionsChanged: () => void sidebar.refresh(),
    filesChanged: () => files.changed(),
    agentId: () => sidebar.agent.value,
  });
  const fail = (err: Error) => announce(`Could not open it: ${err.message}`, "error");
  const open = (sessionId: string | undefined) => {
    document.body.classList.remove("menu-open");
    menu.setAttribute("aria-expanded", "false");
    if (!sessionId) {
      void chat.startNew().then(() => { files.sessionId = chat.sessionId; }, fail);
      return;
    }
    files.sessionId = sessionId;
    void chat.open(sessionId).catch(fail);
    const agent = sidebar.agent;
    void api.request<{ agent_id: string | null }>("GET", `/sessions/${encodeURIComponent(sessionId)}`)
      .then((s) => { if (s.agent_id) agent.value = s.agent_id; }, () => undefined);
  };
  const menu = h("button", { type: "button", class: "menu", "aria-label": "Show conversations",
    "aria-expanded": "false", "aria-controls": "sidebar",
    onclick: () => menu.setAttribute("aria-expanded", String(document.body.classList.toggle("menu-open"))) }, "☰");
  sidebar = new Sidebar(api, open);
  sidebar.agent.addEventListener("change", () => {
    void chat.agentChanged(sidebar.agent.value).then(() => { files.sessionId = chat.sessionId; }, fail);
  });
  const knowledge = new KnowledgePanel(api);
  const kbDialog = h("dialog", { class: "kb-dialog", "aria-label": "Knowledge bases" },
    knowledge.el, h("form", { method: "dialog" }, h("button", { type: "submit" }, "Close")));

  const header = h("header", { class: "top" },
    menu,
    h("h1", {}, "Weft console"),
    h("div", { class: "spacer" }),
    h("button", { type: "button", onclick: () => { void knowledge.refresh(); kbDialog.showModal(); } }, "Knowledge"),
    h("button", { type: "button", onclick: () => { sessionStorage.clear(); location.reload(); } }, "Sign out"));
  // The agents first: the page shows nothing a person could send with before the picker
  // holds them (a message sent before would have no agent).
  await sidebar.loadAgents();
  app.replaceChildren(header,
    h("div", { class: "layout" }, sidebar.el,
      h("main", { class: "main" }, chat.el, files.el)),
    h("p", { id: "status", role: "status", "aria-live": "polite" }), passage, kbDialog);
  await sidebar.refresh();
  const resume = lastSessionHint();
  if (resume) {
    sidebar.select(resume);
    open(resume);
  }
  chat.focusComposer();
}

async function boot(): Promise<void> {
  const oidc = await loadSignInConfig();
  let token: string | null = null;
  try {
    token = await finishSignIn(oidc);
  } catch (err) {
    signIn(oidc, `Sign-in failed: ${(err as Error).message}`);
    return;
  }
  signIn(oidc);
  if (token) await start(token, app.querySelector(".signin .error") as HTMLElement);
}

void boot();
