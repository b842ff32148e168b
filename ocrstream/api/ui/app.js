// ocrstream's web UI: sign in with an API key, upload, watch documents being read, view a
// page with its recognised lines. Plain JavaScript, no build step, nothing from elsewhere.
//
// OCR text (and every other string from the API) is untrusted: it reaches the page only as
// text (textContent, text nodes, attribute values), never as HTML. The page's
// Content-Security-Policy requires Trusted Types, so the browser would refuse to parse a
// string as markup anyway.
"use strict";

const KEY_ITEM = "ocrstream.key";
const NAMES_ITEM = "ocrstream.names"; // doc_id → file name, for this tab's uploads
const TERMINAL = new Set(["completed", "partial", "failed"]);
const MAX_STREAMS = 4; // live event streams at once (browsers allow 6 connections a host)
const REFRESH_MS = 4000; // the list's refresh while something is not finished
const SVG = "http://www.w3.org/2000/svg";

const $ = (id) => document.getElementById(id);

// --- small helpers -------------------------------------------------------------------------

/** An element with attributes and children (strings become text nodes, never markup). */
function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value !== null && value !== undefined && value !== false) node.setAttribute(name, value);
  }
  for (const child of children) {
    node.append(typeof child === "string" ? document.createTextNode(child) : child);
  }
  return node;
}

function svg(tag, attrs = {}) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, String(value));
  return node;
}

function show(section) {
  for (const id of ["sign-in", "documents", "viewer"]) $(id).hidden = id !== section;
  $("sign-out").hidden = section === "sign-in";
}

function notice(message) {
  $("notice").textContent = message || "";
  $("notice").hidden = !message;
}

function names() {
  try {
    return JSON.parse(sessionStorage.getItem(NAMES_ITEM) || "{}");
  } catch {
    return {};
  }
}

function remember(docId, name) {
  const all = names();
  all[docId] = name;
  sessionStorage.setItem(NAMES_ITEM, JSON.stringify(all));
}

function title(docId) {
  return names()[docId] || docId;
}

/** Red (50% or less) through amber to green (100%). */
function confidenceColour(confidence) {
  const c = Math.max(0, Math.min(1, (Number(confidence) - 0.5) / 0.5));
  return `hsl(${Math.round(c * 120)} 80% 38%)`;
}

const enc = encodeURIComponent;

// --- the API -------------------------------------------------------------------------------

class SignedOut extends Error {}

/** fetch with the key; a 401 signs out. */
async function api(path, options = {}) {
  const key = sessionStorage.getItem(KEY_ITEM);
  if (!key) throw new SignedOut("not signed in");
  const headers = { ...(options.headers || {}), Authorization: `Bearer ${key}` };
  const response = await fetch(path, { ...options, headers });
  if (response.status === 401) {
    signOut("The key was refused: sign in again.");
    throw new SignedOut("the key was refused");
  }
  return response;
}

async function detail(response) {
  try {
    const body = await response.json();
    return typeof body.detail === "string" ? body.detail : JSON.stringify(body.detail);
  } catch {
    return `${response.status} ${response.statusText}`;
  }
}

// --- signing in ----------------------------------------------------------------------------

async function signIn(event) {
  event.preventDefault();
  const key = $("api-key").value.trim();
  if (!key) return;
  const response = await fetch("/v1/documents?limit=1", {
    headers: { Authorization: `Bearer ${key}` },
  });
  if (!response.ok) {
    notice(response.status === 401 ? "That key is not valid." : await detail(response));
    return;
  }
  sessionStorage.setItem(KEY_ITEM, key);
  $("api-key").value = "";
  notice("");
  route();
}

function signOut(message) {
  sessionStorage.removeItem(KEY_ITEM);
  for (const id of [...streams.keys()]) closeStream(id);
  $("document-rows").replaceChildren();
  rows.clear();
  nextPage = null;
  loadedMore = false;
  notice(message || "");
  show("sign-in");
  $("api-key").focus();
}

// --- the document list ---------------------------------------------------------------------

const rows = new Map(); // doc_id → {row, doc}
const streams = new Map(); // doc_id → {source, lastId}
let nextPage = null;
let loadedMore = false;
let refreshTimer = null;

function statusText(doc) {
  if (doc.status === "failed" && doc.error) return `failed: ${doc.error.code}`;
  return doc.status;
}

function renderRow(doc) {
  let entry = rows.get(doc.doc_id);
  if (!entry) {
    const row = el("tr", { "data-doc-id": doc.doc_id });
    entry = { row, doc };
    rows.set(doc.doc_id, entry);
  }
  entry.doc = { ...entry.doc, ...doc };
  doc = entry.doc;
  const finished = TERMINAL.has(doc.status);
  const name = finished && doc.status !== "failed"
    ? el("a", { href: `#/documents/${enc(doc.doc_id)}` }, title(doc.doc_id))
    : el("span", {}, title(doc.doc_id));
  const progress = el("progress", {
    max: String(doc.page_count || 1),
    "aria-label": `Pages of ${title(doc.doc_id)} done`,
  });
  if (doc.page_count) progress.value = doc.pages_done; // no value: indeterminate (queued)
  const pages = doc.page_count ? `${doc.pages_done} / ${doc.page_count} pages` : "";
  const submitted = doc.submitted_at ? new Date(doc.submitted_at).toLocaleString() : "";
  entry.row.className = `status-${doc.status}`;
  entry.row.replaceChildren(
    el("td", { class: "name" }, name),
    el("td", {}, submitted),
    el("td", { class: "state" }, statusText(doc)),
    el("td", { class: "progress" }, progress, el("span", { class: "pages" }, pages)),
  );
  return entry.row;
}

async function loadList(more = false) {
  const after = more && nextPage ? `&after=${enc(nextPage)}` : "";
  const response = await api(`/v1/documents?limit=50${after}`);
  if (!response.ok) {
    notice(await detail(response));
    return;
  }
  const body = await response.json();
  if (more || !loadedMore) nextPage = body.next;
  loadedMore ||= more;
  const tbody = $("document-rows");
  const listed = body.documents.map((doc) => {
    const live = streams.has(doc.doc_id) && rows.has(doc.doc_id) && !TERMINAL.has(doc.status);
    return live ? rows.get(doc.doc_id).row : renderRow(doc); // a live stream is newer
  });
  if (more) {
    tbody.append(...listed.filter((row) => !row.parentNode));
  } else { // the first page, newest first; older pages loaded before stay below it
    const rest = [...tbody.children].filter((row) => !listed.includes(row));
    tbody.replaceChildren(...listed, ...rest);
  }
  $("empty").hidden = rows.size > 0;
  $("more").hidden = !nextPage;
  watchAll();
}

/** Live streams for unfinished documents, a few at a time; the list refresh for the rest. */
function watchAll() {
  const waiting = [...rows.values()].filter((e) => !TERMINAL.has(e.doc.status));
  for (const { doc } of waiting) {
    if (streams.size >= MAX_STREAMS) break;
    if (!streams.has(doc.doc_id)) openStream(doc.doc_id, null).catch(report);
  }
  clearTimeout(refreshTimer);
  if (waiting.length && !$("documents").hidden) {
    refreshTimer = setTimeout(() => loadList().catch(report), REFRESH_MS);
  }
}

/** The document's event stream, opened with a short-lived token (EventSource sends no
 * header, and the key never goes into a URL); reopened with a new token after an error. */
async function openStream(docId, lastId) {
  const entry = { source: null, lastId };
  streams.set(docId, entry);
  let response;
  try {
    response = await api(`/v1/documents/${enc(docId)}/events/token`, { method: "POST" });
  } catch (e) {
    streams.delete(docId);
    throw e;
  }
  if (!response.ok) {
    streams.delete(docId);
    return;
  }
  const { events_url: url } = await response.json();
  if (streams.get(docId) !== entry) return; // closed meanwhile
  const source = new EventSource(lastId ? `${url}&last_event_id=${enc(lastId)}` : url);
  entry.source = source;
  const seen = (event) => { entry.lastId = event.lastEventId || entry.lastId; };
  source.addEventListener("progress", (event) => {
    seen(event);
    const data = JSON.parse(event.data);
    const doc = rows.get(docId)?.doc;
    if (doc && !TERMINAL.has(doc.status)) {
      renderRow({ ...doc, status: "processing", pages_done: data.pages_done,
        page_count: data.page_count });
    }
  });
  source.addEventListener("page", seen);
  source.addEventListener("terminal", (event) => {
    seen(event);
    closeStream(docId);
    renderRow(JSON.parse(event.data));
    watchAll();
  });
  source.addEventListener("error", () => {
    // CONNECTING: the browser reconnects by itself (with Last-Event-ID). CLOSED: refused,
    // e.g. the token expired: a new token, going on after the last event seen.
    if (source.readyState !== EventSource.CLOSED || streams.get(docId) !== entry) return;
    streams.delete(docId);
    setTimeout(() => {
      if (rows.has(docId) && !TERMINAL.has(rows.get(docId).doc.status)) {
        openStream(docId, entry.lastId).catch(report);
      }
    }, 1000);
  });
}

function closeStream(docId) {
  const entry = streams.get(docId);
  if (entry && entry.source) entry.source.close();
  streams.delete(docId);
}

// --- uploading -----------------------------------------------------------------------------

async function upload(files) {
  const mode = document.querySelector('input[name="mode"]:checked').value;
  const textLayer = $("text-layer").checked;
  const status = $("upload-status");
  for (const file of files) {
    status.textContent = `Uploading ${file.name} …`;
    const form = new FormData();
    form.append("mode", mode);
    if (textLayer) form.append("attributes", JSON.stringify({ text_layer: "true" }));
    form.append("file", file, file.name);
    const response = await api("/v1/documents", { method: "POST", body: form });
    if (response.status !== 202) {
      status.textContent = `${file.name}: not accepted (${response.status}): ${
        await detail(response)}`;
      continue;
    }
    const accepted = await response.json();
    remember(accepted.doc_id, file.name);
    const row = renderRow({ doc_id: accepted.doc_id, status: "queued", pages_done: 0,
      page_count: null, outputs: {}, error: null, submitted_at: new Date().toISOString() });
    $("document-rows").prepend(row);
    $("empty").hidden = true;
    status.textContent = `${file.name} uploaded.`;
  }
  watchAll();
}

function setUpUploads() {
  const drop = $("drop");
  $("files").addEventListener("change", (event) => {
    upload([...event.target.files]).catch(report);
    event.target.value = "";
  });
  for (const name of ["dragenter", "dragover"]) {
    drop.addEventListener(name, (event) => {
      event.preventDefault();
      drop.classList.add("over");
    });
  }
  for (const name of ["dragleave", "drop"]) {
    drop.addEventListener(name, () => drop.classList.remove("over"));
  }
  drop.addEventListener("drop", (event) => {
    event.preventDefault();
    upload([...event.dataTransfer.files]).catch(report);
  });
}

// --- the viewer ----------------------------------------------------------------------------

const view = {
  docId: null,
  document: null, // document.json
  pageNo: 1,
  imageUrl: null,
  selected: null,
};

async function openViewer(docId, pageNo) {
  show("viewer");
  $("viewer-title").textContent = title(docId);
  if (view.docId !== docId || !view.document) { // not loaded yet, or not finished last time
    view.docId = docId;
    view.document = null;
    $("search").value = "";
    $("lines").replaceChildren();
    $("overlay").replaceChildren();
    $("downloads").replaceChildren();
    $("page-image").removeAttribute("src");
    $("viewer-status").textContent = "Loading …";
    const response = await api(`/v1/documents/${enc(docId)}`);
    if (!response.ok) {
      $("viewer-status").textContent = await detail(response);
      return;
    }
    const status = await response.json();
    renderDownloads(docId, status.outputs);
    if (!status.outputs.json) {
      $("viewer-status").textContent = `The document is ${status.status}: nothing to show yet.`;
      return;
    }
    const json = await api(status.outputs.json);
    if (!json.ok) {
      $("viewer-status").textContent = await detail(json);
      return;
    }
    view.document = await json.json();
    const layout = view.document.pages.some((p) => Array.isArray(p.blocks));
    $("blocks-option").hidden = !layout;
    $("viewer-status").textContent = `${status.status}: ${view.document.pages.length} of ${
      view.document.page_count} pages read.`;
  }
  if (view.document) await showPage(pageNo);
}

function renderDownloads(docId, outputs) {
  const buttons = Object.entries(outputs || {}).map(([fmt, url]) => {
    const button = el("button", { type: "button", class: "download" }, `document.${fmt}`);
    button.addEventListener("click", () => download(url, `${title(docId)}.${fmt}`)
      .catch(report));
    return button;
  });
  $("downloads").replaceChildren(...buttons);
}

/** An output fetched with the key, then saved: a plain link could not send the header. */
async function download(url, filename) {
  const response = await api(url);
  if (!response.ok) {
    notice(await detail(response));
    return;
  }
  const blobUrl = URL.createObjectURL(await response.blob());
  const link = el("a", { href: blobUrl, download: filename.replace(/[\\/]/g, "_") });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(blobUrl), 60000);
}

function currentPage() {
  return view.document.pages.find((p) => p.page_no === view.pageNo) || null;
}

async function showPage(pageNo) {
  const pages = view.document.pages.map((p) => p.page_no);
  view.pageNo = pages.includes(pageNo) ? pageNo : pages[0] || 1;
  view.selected = null;
  const page = currentPage();
  const count = view.document.page_count;
  $("page-label").textContent = `Page ${view.pageNo} of ${count}`;
  $("prev-page").disabled = !pages.some((n) => n < view.pageNo);
  $("next-page").disabled = !pages.some((n) => n > view.pageNo);
  renderLines(page);
  renderOverlay(page);
  applySearch();
  await loadImage(view.docId, view.pageNo);
}

async function loadImage(docId, pageNo) {
  const image = $("page-image");
  image.alt = `Page ${pageNo}`;
  delete image.dataset.page;
  const response = await api(`/v1/documents/${enc(docId)}/pages/${pageNo}.jpg`);
  if (view.docId !== docId || view.pageNo !== pageNo) return; // moved on meanwhile
  if (view.imageUrl) URL.revokeObjectURL(view.imageUrl);
  view.imageUrl = null;
  if (!response.ok) {
    image.removeAttribute("src");
    image.alt = `No image of page ${pageNo}: ${await detail(response)}`;
    return;
  }
  view.imageUrl = URL.createObjectURL(await response.blob());
  image.addEventListener("load", () => { image.dataset.page = String(pageNo); }, { once: true });
  image.src = view.imageUrl;
}

function renderLines(page) {
  const items = (page ? page.lines : []).map((line, index) => {
    const percent = `${Math.round(Number(line.confidence) * 100)}%`;
    const swatch = el("span", { class: "swatch", "aria-hidden": "true" });
    swatch.style.backgroundColor = confidenceColour(line.confidence);
    const button = el("button", { type: "button", class: "line", "data-index": String(index),
      "aria-pressed": "false" },
    swatch, el("span", { class: "text" }, String(line.text)),
    el("span", { class: "confidence", title: "confidence" }, percent));
    button.addEventListener("click", () => select(index, "line"));
    return el("li", {}, button);
  });
  $("lines").replaceChildren(...items);
  $("lines-title").textContent = page
    ? `Lines (${items.length})${page.status === "failed" ? ": the page failed" : ""}`
    : "Lines";
}

function renderOverlay(page) {
  const overlay = $("overlay");
  overlay.replaceChildren();
  const width = page && page.width > 0 ? page.width : 1;
  const height = page && page.height > 0 ? page.height : 1;
  overlay.setAttribute("viewBox", `0 0 ${width} ${height}`);
  $("page-view").style.aspectRatio = `${width} / ${height}`;
  if (!page) return;
  overlay.setAttribute("aria-label",
    `Page ${page.page_no} with ${page.lines.length} recognised lines`);
  const blocks = svg("g", { class: "blocks" });
  for (const block of page.blocks || []) {
    const [x0, y0, x1, y1] = block.bbox.map(Number);
    const type = /^[a-z]+$/.test(block.type) ? block.type : "other";
    const rect = svg("rect", { class: `block block-${type}`, x: x0, y: y0,
      width: Math.max(0, x1 - x0), height: Math.max(0, y1 - y0) });
    const label = svg("text", { class: "block-label", x: x0, y: y0 });
    label.textContent = String(block.type);
    const tip = svg("title");
    tip.textContent = `${block.type}: ${block.text}`;
    rect.append(tip);
    blocks.append(rect, label);
  }
  blocks.style.display = $("show-blocks").checked ? "" : "none";
  const boxes = svg("g", { class: "boxes" });
  page.lines.forEach((line, index) => {
    const points = line.polygon.map(([x, y]) => `${Number(x)},${Number(y)}`).join(" ");
    const box = svg("polygon", { class: "box", points, "data-index": index,
      stroke: confidenceColour(line.confidence) });
    const tip = svg("title");
    tip.textContent = `${line.text} (${Math.round(Number(line.confidence) * 100)}%)`;
    box.append(tip);
    box.addEventListener("click", () => select(index, "box"));
    boxes.append(box);
  });
  overlay.append(blocks, boxes);
}

function select(index, from) {
  for (const node of document.querySelectorAll("#lines .selected, #overlay .selected")) {
    node.classList.remove("selected");
  }
  for (const node of document.querySelectorAll('#lines button[aria-pressed="true"]')) {
    node.setAttribute("aria-pressed", "false");
  }
  view.selected = index;
  const button = document.querySelector(`#lines button[data-index="${index}"]`);
  const box = document.querySelector(`#overlay polygon[data-index="${index}"]`);
  if (button) {
    button.classList.add("selected");
    button.setAttribute("aria-pressed", "true");
  }
  if (box) {
    box.classList.add("selected");
    box.parentNode.append(box); // drawn last: on top of its neighbours
  }
  if (from === "box" && button) {
    button.scrollIntoView({ block: "nearest" });
    button.focus({ preventScroll: true });
  } else if (from === "line" && box) {
    box.scrollIntoView({ block: "nearest", inline: "nearest" });
  }
}

function applySearch() {
  const query = $("search").value.trim().toLocaleLowerCase();
  const hits = (line) => query !== "" && String(line.text).toLocaleLowerCase().includes(query);
  const page = currentPage();
  (page ? page.lines : []).forEach((line, index) => {
    const match = hits(line);
    document.querySelector(`#lines button[data-index="${index}"]`)?.classList.toggle("match",
      match);
    document.querySelector(`#overlay polygon[data-index="${index}"]`)?.classList.toggle("match",
      match);
  });
  const counts = view.document.pages
    .map((p) => [p.page_no, p.lines.filter(hits).length])
    .filter(([, n]) => n > 0);
  const total = counts.reduce((sum, [, n]) => sum + n, 0);
  $("search-result").textContent = query ? `${total} ${total === 1 ? "line" : "lines"}` : "";
  const buttons = counts.map(([pageNo, n]) => {
    const button = el("button", { type: "button", class: "quiet",
      "aria-current": pageNo === view.pageNo ? "page" : null }, `page ${pageNo} (${n})`);
    button.addEventListener("click", () => goTo(view.docId, pageNo));
    return button;
  });
  $("search-pages").replaceChildren(...buttons);
}

function goTo(docId, pageNo) {
  location.hash = `#/documents/${enc(docId)}/${pageNo}`;
}

function setUpViewer() {
  $("prev-page").addEventListener("click", () => {
    const before = view.document.pages.map((p) => p.page_no).filter((n) => n < view.pageNo);
    if (before.length) goTo(view.docId, before[before.length - 1]);
  });
  $("next-page").addEventListener("click", () => {
    const after = view.document.pages.map((p) => p.page_no).filter((n) => n > view.pageNo);
    if (after.length) goTo(view.docId, after[0]);
  });
  $("search").addEventListener("input", () => {
    if (view.document) applySearch();
  });
  $("search").addEventListener("keydown", (event) => {
    if (event.key !== "Enter") return;
    event.preventDefault();
    const matches = [...document.querySelectorAll("#lines button.match")]
      .map((b) => Number(b.dataset.index));
    if (!matches.length) return;
    const next = matches.find((i) => view.selected === null || i > view.selected);
    select(next === undefined ? matches[0] : next, "box");
    $("search").focus();
  });
  $("show-blocks").addEventListener("change", () => {
    const blocks = document.querySelector("#overlay .blocks");
    if (blocks) blocks.style.display = $("show-blocks").checked ? "" : "none";
  });
}

// --- routing -------------------------------------------------------------------------------

function report(error) {
  if (error instanceof SignedOut) return;
  console.error(error);
  notice(String(error.message || error));
}

async function route() {
  if (!sessionStorage.getItem(KEY_ITEM)) {
    show("sign-in");
    return;
  }
  const match = location.hash.match(/^#\/documents\/([^/]+)(?:\/(\d+))?$/);
  if (match) {
    clearTimeout(refreshTimer);
    await openViewer(decodeURIComponent(match[1]), Number(match[2] || 1));
    return;
  }
  show("documents");
  await loadList();
}

document.addEventListener("DOMContentLoaded", () => {
  $("sign-in-form").addEventListener("submit", (event) => signIn(event).catch(report));
  $("sign-out").addEventListener("click", () => signOut());
  $("more").addEventListener("click", () => loadList(true).catch(report));
  setUpUploads();
  setUpViewer();
  window.addEventListener("hashchange", () => route().catch(report));
  route().catch(report);
});
