// The model's Markdown, rendered to a DOM fragment that cannot run anything, in three layers:
// raw HTML in the model's text is never HTML (marked's html tokens are shown as escaped text,
// so an onerror or style attribute never even reaches a parser, and the page's CSP has nothing
// to refuse); DOMPurify sanitises what Markdown itself makes (no javascript: URL, no event
// handler, no style); every image is replaced by its alt text, so neither a remote image nor
// a broken one is loaded. The page's CSP (no inline script, img-src 'self' data: blob:) is
// the last layer.

import DOMPurify from "dompurify";
import { Marked } from "marked";

const marked = new Marked({
  gfm: true,
  breaks: false,
  async: false,
  renderer: {
    html: ({ text }) => escapeHtml(text),
  },
});

function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

const purifier = DOMPurify();
purifier.addHook("uponSanitizeElement", (node, data) => {
  if (data.tagName === "img" && node instanceof Element) {
    const alt = node.getAttribute("alt") ?? "";
    node.replaceWith(document.createTextNode(alt ? `[image: ${alt}]` : "[image]"));
  }
});
purifier.addHook("afterSanitizeAttributes", (node) => {
  if (node instanceof HTMLAnchorElement) {
    node.setAttribute("target", "_blank");
    node.setAttribute("rel", "noopener noreferrer nofollow");
  }
});

const PURIFY = {
  RETURN_DOM_FRAGMENT: true as const,
  FORBID_TAGS: ["style", "form", "input", "button", "textarea", "select", "iframe", "svg", "math"],
  FORBID_ATTR: ["style", "class", "id", "srcset"],
  ALLOW_DATA_ATTR: false,
};

/** The sanitised fragment of `markdown`. */
export function renderMarkdown(markdown: string): DocumentFragment {
  const html = marked.parse(markdown) as string;
  return purifier.sanitize(html, PURIFY);
}

const CITATION = /\[([A-Za-z0-9_.:-]{1,80})\]/g;

/** Turn `[alias]` markers whose alias `known` names into buttons calling `open`. */
export function linkCitations(
  root: Node,
  known: (alias: string) => boolean,
  open: (alias: string) => void,
): void {
  const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  const texts: Text[] = [];
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    if (!(n.parentElement?.closest("code, pre"))) texts.push(n as Text);
  }
  for (const text of texts) {
    const value = text.data;
    if (!CITATION.test(value)) continue;
    CITATION.lastIndex = 0;
    const frag = document.createDocumentFragment();
    let last = 0;
    for (const m of value.matchAll(CITATION)) {
      const alias = m[1] ?? "";
      if (!known(alias)) continue;
      frag.append(value.slice(last, m.index));
      const button = document.createElement("button");
      button.type = "button";
      button.className = "cite";
      button.textContent = alias;
      button.setAttribute("aria-label", `Open cited passage ${alias}`);
      button.addEventListener("click", () => open(alias));
      frag.append(button);
      last = (m.index ?? 0) + m[0].length;
    }
    if (last === 0) continue;
    frag.append(value.slice(last));
    text.replaceWith(frag);
  }
}
