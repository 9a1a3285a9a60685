// Shared by Tether's operator pages (tether_common.pages inlines it into each page's
// script): DOM helpers that only ever set text, and an event-stream reader.
const $ = (id) => document.getElementById(id);

// Code points that draw nothing or reorder what is drawn around them (bidi controls,
// zero-width characters, tag characters …) and the escape's own bracket: the class is
// tether_common.display's, put here when the page is assembled.
const INVISIBLE = new RegExp("%INVISIBLE%", "gu");

// `text` as a reader should see it: each such code point as a visible ⟨U+202E⟩, so a
// file named "invoice\u202egpj.sh" never reads "invoicehs.jpg".
function shown(text) {
  return String(text).replace(INVISIBLE, (c) => "\u27e8U+" + c.codePointAt(0).toString(16).toUpperCase().padStart(4, "0") + "\u27e9");
}

// The only way text goes into the page: as text (never parsed as HTML), and shown.
function setText(node, text) {
  node.textContent = shown(text);
}

// An element whose text is `text`, set as above.
function el(tag, attrs, text) {
  const node = document.createElement(tag);
  Object.entries(attrs || {}).forEach(([k, v]) => node.setAttribute(k, v));
  if (text !== undefined && text !== null) setText(node, text);
  return node;
}

// A fetch-based SSE reader, because EventSource cannot send an Authorization header:
// `onEvent({id, event, data})` for each event, until the stream ends.
async function readEvents(response, onEvent) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  let event = {};
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buffer.search(/\r?\n/)) >= 0) {
      const line = buffer.slice(0, cut);
      buffer = buffer.slice(cut + (buffer[cut] === "\r" ? 2 : 1));
      if (line === "") {
        if (event.data) onEvent(event);
        event = {};
      } else if (!line.startsWith(":")) {
        const at = line.indexOf(":");
        const key = at < 0 ? line : line.slice(0, at);
        const val = at < 0 ? "" : line.slice(at + 1).replace(/^ /, "");
        event[key] = key === "data" && event.data ? event.data + "\n" + val : val;
      }
    }
  }
}

// A staged effect: what approving applies, exactly. Paths, diffs and output are the
// call's own text (attacker-controlled): every piece goes in as text, never as markup.
function changeSet(set) {
  const box = el("div", { "class": "changes" });
  const count = set.entries.length;
  box.appendChild(el("h3", {}, "Approving applies exactly these changes (" + count + "; digest " + set.digest.slice(0, 12) + ")"));
  if (!count) box.appendChild(el("p", { "class": "empty" }, "No change to the workspace."));
  for (const entry of set.entries) box.appendChild(changeEntry(entry));
  if (set.output) box.appendChild(el("pre", { "class": "output" }, set.output));
  return box;
}

function changeEntry(entry) {
  const wrap = el("div", { "class": "change", "data-change": entry.change });
  let line = entry.change + " " + entry.path;
  if (entry.type === "dir") line += " (folder)";
  if (entry.type === "binary") {
    line += " (binary, " + (entry.size_before ?? "-") + " → " + (entry.size_after ?? "-") + " bytes"
      + (entry.digest ? ", sha256 " + entry.digest : "") + ")";
  }
  wrap.appendChild(el("p", { "class": "entry" }, line));
  if (entry.diff) {
    const pre = el("pre", { "class": "diff" });
    for (const text of entry.diff.split("\n")) {
      const kind = text.startsWith("@@") ? "hunk" : text.startsWith("+") ? "add" : text.startsWith("-") ? "del" : "";
      pre.appendChild(el("span", kind ? { "class": kind } : {}, text + "\n"));
    }
    wrap.appendChild(pre);
  }
  return wrap;
}
