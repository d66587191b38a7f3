// Knowledge bases: list, create, upload files with a progress bar for the upload and then for
// the ingestion (the document's embedded chunks out of all, polled until ready or failed).

import type { Api } from "./api";
import { announce, h } from "./dom";

type Data = Record<string, unknown>;
const POLL_MS = 700;

export class KnowledgePanel {
  readonly el: HTMLElement;
  #list = h("ul", { class: "kbs" });
  #name = h("input", { type: "text", id: "kb-name", maxlength: 200, placeholder: "New knowledge base", autocomplete: "off" });

  constructor(private readonly api: Api) {
    const form = h("form", { class: "row", onsubmit: (e: Event) => { e.preventDefault(); void this.#create(); } },
      h("label", { for: "kb-name", class: "visually-hidden" }, "Name of a new knowledge base"),
      this.#name, h("button", { type: "submit" }, "Create"));
    this.el = h("section", { class: "panel knowledge", "aria-labelledby": "kb-title" },
      h("h2", { id: "kb-title" }, "Knowledge bases"), form, this.#list);
  }

  async refresh(): Promise<void> {
    const kbs = await this.api.request<Data[]>("GET", "/knowledge-bases");
    this.#list.replaceChildren(...kbs.map((kb) => this.#kbItem(kb)));
  }

  async #create(): Promise<void> {
    const name = this.#name.value.trim();
    if (!name) return;
    try {
      await this.api.request("POST", "/knowledge-bases", { name });
      this.#name.value = "";
      await this.refresh();
    } catch (err) {
      announce(`Could not create it: ${(err as Error).message}`, "error");
    }
  }

  #kbItem(kb: Data): HTMLLIElement {
    const id = String(kb["id"]);
    const inputId = `kb-file-${id}`;
    const input = h("input", { type: "file", id: inputId, accept: ".txt,.md,.csv,.xlsx,.pdf" });
    const uploads = h("ul", { class: "uploads", "aria-label": `Uploads to ${String(kb["name"])}` });
    input.addEventListener("change", () => {
      for (const file of input.files ?? []) void this.#upload(id, file, uploads);
      input.value = "";
    });
    return h("li", { class: "kb" }, h("strong", {}, String(kb["name"] ?? id)),
      h("label", { for: inputId }, "Upload a file"), input, uploads);
  }

  async #upload(kbId: string, file: File, into: HTMLElement): Promise<void> {
    const bar = h("progress", { max: 100, value: 0, "aria-label": `Progress of ${file.name}` });
    const state = h("span", { class: "upload-state", role: "status" }, "uploading");
    const row = h("li", { class: "upload", "data-file": file.name }, `${file.name} `, bar, " ", state);
    into.append(row);
    const form = new FormData();
    form.append("file", file, file.name);
    try {
      const queued = await this.api.upload<Data>(`/knowledge-bases/${encodeURIComponent(kbId)}/files`, form,
        (f) => { bar.value = Math.round(f * 30); });
      await this.#watch(kbId, String(queued["id"]), bar, state);
    } catch (err) {
      state.textContent = `failed: ${(err as Error).message}`;
      row.dataset["state"] = "failed";
    }
    row.dataset["state"] = state.textContent ?? "";
  }

  /** Poll the document until it is ready or failed; the bar's last 70% is ingestion. */
  async #watch(kbId: string, docId: string, bar: HTMLProgressElement, state: HTMLElement): Promise<void> {
    for (;;) {
      const doc = await this.api.request<Data>("GET",
        `/knowledge-bases/${encodeURIComponent(kbId)}/documents/${encodeURIComponent(docId)}`);
      const status = String(doc["status"] ?? "pending");
      const chunks = Number(doc["chunk_count"] ?? 0);
      const embedded = Number(doc["embedded_count"] ?? 0);
      const share = chunks > 0 ? embedded / chunks : 0;
      bar.value = status === "ready" ? 100 : 30 + Math.round(share * 70);
      state.textContent = status === "failed" ? `failed: ${String(doc["error"] ?? "")}` : status;
      if (status === "ready" || status === "failed") return;
      await new Promise((r) => setTimeout(r, POLL_MS));
    }
  }
}

export class FilesPanel {
  readonly el: HTMLDetailsElement;
  #list = h("ul", { class: "files", "aria-label": "Files of this conversation" });
  #input = h("input", { type: "file", id: "session-file" });
  #sessionId: string | undefined;

  constructor(
    private readonly api: Api,
    private readonly download: (path: string, name: string) => void,
    /** The open session, or a new one (attaching a file to no conversation starts one). */
    private readonly ensureSession: () => Promise<string>,
  ) {
    this.#input.addEventListener("change", () => void this.#upload());
    this.el = h("details", { class: "panel files-panel" },
      h("summary", {}, "Session files"),
      h("label", { for: "session-file" }, "Attach a file to this conversation"), this.#input,
      h("button", { type: "button", onclick: () => void this.refresh() }, "Refresh"),
      this.#list);
    // Listed when shown, and again whenever the conversation or its files change while shown.
    this.el.addEventListener("toggle", () => { if (this.el.open) void this.refresh(); });
  }

  get sessionId(): string | undefined {
    return this.#sessionId;
  }

  set sessionId(id: string | undefined) {
    if (id === this.#sessionId) return;
    this.#sessionId = id;
    this.changed();
  }

  /** The session's files changed (a deliverable, another conversation): list them again if shown. */
  changed(): void {
    if (this.el.open) void this.refresh();
    else this.#list.replaceChildren();
  }

  async refresh(): Promise<void> {
    const sessionId = this.#sessionId;
    if (!sessionId) { this.#list.replaceChildren(h("li", {}, "No conversation open.")); return; }
    const sid = encodeURIComponent(sessionId);
    let output: Data;
    let input: Data;
    try {
      [output, input] = await Promise.all([
        this.api.request<Data>("GET", `/sessions/${sid}/files?dir=output`),
        this.api.request<Data>("GET", `/sessions/${sid}/files?dir=input`),
      ]);
    } catch (err) {
      announce(`Could not list the files: ${(err as Error).message}`, "error");
      return;
    }
    if (sessionId !== this.#sessionId) return;
    const files = [...((input["files"] as Data[]) ?? []), ...((output["files"] as Data[]) ?? [])];
    this.#list.replaceChildren(...(files.length ? files.map((f) =>
      h("li", { "data-path": String(f["path"]) }, h("button", { type: "button", class: "link",
        onclick: () => this.download(`/sessions/${sid}/files/${String(f["path"])}`, String(f["name"])) },
        `Download ${String(f["path"])}`), ` (${Number(f["size"] ?? 0)} bytes)`)) : [h("li", {}, "No files yet.")]));
  }

  async #upload(): Promise<void> {
    const file = this.#input.files?.[0];
    if (!file) return;
    const form = new FormData();
    form.append("file", file, file.name);
    try {
      const sessionId = await this.ensureSession();
      this.sessionId = sessionId;
      await this.api.request("POST", `/sessions/${encodeURIComponent(sessionId)}/files`, form);
      announce(`Attached ${file.name}`);
      await this.refresh();
    } catch (err) {
      announce(`Attach failed: ${(err as Error).message}`, "error");
    }
    this.#input.value = "";
  }
}
