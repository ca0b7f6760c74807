// Phalanx's live view: polls api/cluster (the picture Phalanx publishes at a bounded rate) and draws it.
// Plain DOM and canvas, no library: clusters are often offline. Text goes in with textContent only.
"use strict";

const POLL_MS = 2000;
let CELL = 7; // px per accelerator cell: larger on small clusters (renderMap sets it)
const GAP = 1;
let NODE_GAP = 4; // px between nodes (2 on large clusters)
const FREE = 0, OTHERS = 1, FIRST_GANG = 2;

const view = { picture: null, etag: null, layout: new Map(), gang: null, timeline: null, playing: null,
  cards: new Map(), cols: 8 };

function colourOf(code, owners) {
  if (code === FREE) return "#eceff1";
  if (code === OTHERS) return "#90a4ae";
  const key = owners[code - FIRST_GANG] || "";
  let hash = 0;
  for (const ch of key) hash = (hash * 31 + ch.codePointAt(0)) >>> 0;
  return `hsl(${hash % 360}, 65%, ${42 + (hash >> 9) % 16}%)`;
}

function el(tag, text, attrs) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, value);
  return node;
}

function ago(seconds) {
  // Before the picture was taken (a recorded run's moments are its own clock's, not this browser's).
  if (!seconds) return "";
  const now = view.picture ? view.picture.taken : Date.now() / 1000;
  const s = Math.max(0, now - seconds);
  if (s < 90) return `${Math.round(s)} s`;
  if (s < 5400) return `${Math.round(s / 60)} min`;
  return `${(s / 3600).toFixed(1)} h`;
}

async function refresh() {
  try {
    const headers = view.etag ? { "If-None-Match": view.etag } : {};
    const response = await fetch("api/cluster", { headers, cache: "no-store" });
    if (response.status === 304) return;
    if (response.status === 503) { document.getElementById("status").textContent = "Phalanx is busy; the view waits"; return; }
    if (!response.ok) throw new Error(`api/cluster answered ${response.status}`);
    view.etag = response.headers.get("ETag");
    view.picture = await response.json();
    document.getElementById("status").textContent = "";
    render(view.picture);
    if (view.gang) showGang(view.gang);
  } catch (error) {
    document.getElementById("status").textContent = `Not updated: ${error.message}`;
  }
}

function render(picture) {
  const t = picture.totals;
  const unit = picture.resource || "accelerators";
  const leading = picture.leading ? "" : " (this replica is not the leader: no gang is being scheduled here)";
  document.getElementById("summary").textContent =
    `${t.nodes} nodes, ${t.free} of ${t.cells} ${unit} free; ${t.gangs} gangs, ${t.waiting} waiting${leading}`;
  renderLegend(picture);
  renderMap(picture);
  renderGangs(picture);
  renderChanges(picture);
}

function renderLegend(picture) {
  const legend = document.getElementById("legend");
  legend.replaceChildren();
  for (const [code, words] of [[FREE, "free"], [OTHERS, "not Phalanx's"]]) {
    const swatch = el("span", null, { class: "swatch" });
    swatch.style.background = colourOf(code, picture.owners);
    legend.append(swatch, document.createTextNode(words));
  }
  legend.append(document.createTextNode(" · each gang its own colour"));
}

function renderMap(picture) {
  // A rack whose cells, owners and counts are as last drawn keeps its canvas: on a large cluster most do.
  const map = document.getElementById("map");
  const nodes = picture.totals.nodes;
  CELL = nodes <= 64 ? 12 : nodes <= 1024 ? 9 : nodes <= 4096 ? 6 : 3;
  view.cols = nodes <= 4096 ? 8 : 4; // large clusters: nodes as 4 x 2 blocks, two racks to a row
  NODE_GAP = nodes <= 4096 ? 4 : 2;
  const full = Math.max(240, Math.min(map.clientWidth || 1200, 1400));
  const width = nodes <= 4096 ? full - 18 : (full - 8) / 2 - 18; // a card's padding and border, the gap
  const palette = [colourOf(FREE, []), colourOf(OTHERS, []), ...picture.owners.map((_, i) => colourOf(FIRST_GANG + i, picture.owners))];
  const cards = new Map();
  view.layout = new Map();
  for (const domain of picture.domains) {
    const room = ` · ${domain.free} free, ${domain.freeNodes} node(s) wholly free, most on one node ${domain.largest}`;
    const signature = [CELL, view.cols, NODE_GAP, width, room, ...domain.nodes.map((node) =>
      `${node.name}:${node.cells.map((code) => (code >= FIRST_GANG ? picture.owners[code - FIRST_GANG] : code)).join(",")}`)].join("|");
    let drawn = view.cards.get(domain.name);
    if (!drawn || drawn.signature !== signature) {
      const card = el("div", null, { class: "domain", "data-domain": domain.name });
      const title = el("h3", domain.name);
      title.append(el("span", room, { class: "room" }));
      const layout = [];
      card.append(title, drawDomain(domain, picture, palette, width, layout));
      drawn = { signature, card, layout };
    }
    for (const [name, placed] of drawn.layout) view.layout.set(name, placed);
    cards.set(domain.name, drawn);
  }
  map.replaceChildren(...[...cards.values()].map((drawn) => drawn.card));
  view.cards = cards;
}

function nodeSize(cells) {
  const cols = Math.max(1, Math.min(view.cols, cells));
  const rows = Math.max(1, Math.ceil(cells / cols));
  return { cols, rows, w: cols * (CELL + GAP) + GAP, h: rows * (CELL + GAP) + GAP };
}

function drawDomain(domain, picture, palette, width, layout) {
  // Nodes left to right, wrapping; each node a grid of its cells (one per accelerator).
  const placed = [];
  let x = 0, y = 0, line = 0, widest = 0;
  for (const node of domain.nodes) {
    const size = nodeSize(node.cells.length);
    if (x > 0 && x + size.w > width) { x = 0; y += line + NODE_GAP; line = 0; }
    placed.push({ node, x, y, size });
    x += size.w + NODE_GAP;
    widest = Math.max(widest, x);
    line = Math.max(line, size.h);
  }
  const canvas = el("canvas", null, { "aria-label": `${domain.name}: ${domain.free} free` });
  canvas.width = Math.max(1, widest);
  canvas.height = Math.max(1, y + line);
  const ctx = canvas.getContext("2d");
  for (const { node, x: nx, y: ny, size } of placed) {
    ctx.fillStyle = "#cfd8dc";
    ctx.fillRect(nx, ny, size.w, size.h);
    node.cells.forEach((code, i) => {
      ctx.fillStyle = palette[code];
      const cx = nx + GAP + (i % size.cols) * (CELL + GAP);
      const cy = ny + GAP + Math.floor(i / size.cols) * (CELL + GAP);
      ctx.fillRect(cx, cy, CELL, CELL);
    });
    layout.push([node.name, { canvas, x: nx, y: ny, size, node }]);
  }
  canvas.addEventListener("mousemove", (event) => tip(event, placed, picture));
  canvas.addEventListener("mouseleave", () => { document.getElementById("tip").hidden = true; });
  canvas.addEventListener("click", (event) => {
    const hit = nodeAt(event, placed);
    const code = hit && cellAt(event, hit);
    if (code >= FIRST_GANG) openGang(picture.owners[code - FIRST_GANG]);
  });
  return canvas;
}

function nodeAt(event, placed) {
  const box = event.target.getBoundingClientRect();
  const x = event.clientX - box.left, y = event.clientY - box.top;
  return placed.find((p) => x >= p.x && x < p.x + p.size.w && y >= p.y && y < p.y + p.size.h) || null;
}

function cellAt(event, hit) {
  const box = event.target.getBoundingClientRect();
  const col = Math.floor((event.clientX - box.left - hit.x - GAP) / (CELL + GAP));
  const row = Math.floor((event.clientY - box.top - hit.y - GAP) / (CELL + GAP));
  if (col < 0 || col >= hit.size.cols || row < 0) return undefined; // the node's border, not a cell
  return hit.node.cells[row * hit.size.cols + col];
}

function tip(event, placed, picture) {
  const hit = nodeAt(event, placed);
  const box = document.getElementById("tip");
  if (!hit) { box.hidden = true; return; }
  const counts = new Map();
  for (const code of hit.node.cells) counts.set(code, (counts.get(code) || 0) + 1);
  const lines = [`${hit.node.name}: ${hit.node.free} free`];
  for (const [code, count] of counts) {
    if (code >= FIRST_GANG) lines.push(`${picture.owners[code - FIRST_GANG]}: ${count}`);
    else if (code === OTHERS) lines.push(`not Phalanx's: ${count}`);
  }
  box.textContent = lines.join("\n");
  box.style.left = `${event.clientX + 12}px`;
  box.style.top = `${event.clientY + 12}px`;
  box.hidden = false;
}

function renderGangs(picture) {
  const filter = document.getElementById("filter").value.trim().toLowerCase();
  const body = document.querySelector("#gangs tbody");
  body.replaceChildren();
  for (const gang of picture.gangs) {
    const text = `${gang.key} ${gang.state} ${gang.reason}`.toLowerCase();
    if (filter && !text.includes(filter)) continue;
    const row = el("tr", null, { "data-gang": gang.key, "data-state": gang.state });
    const name = el("td");
    const swatch = el("span", null, { class: "swatch" });
    swatch.style.background = colourOf(gang.owner, picture.owners);
    name.append(swatch, document.createTextNode(gang.key));
    row.append(
      name,
      el("td", gang.state),
      el("td", `${gang.bound}/${gang.pods} (min ${gang.minimum})`),
      el("td", gang.state === "running" ? "" : ago(gang.since)),
      el("td", gang.queue ?? ""),
      el("td", gang.reservation || gang.nomination),
      el("td", gang.reason, { class: "why" }),
    );
    row.addEventListener("click", () => openGang(gang.key));
    body.append(row);
  }
}

function renderChanges(picture) {
  const list = document.getElementById("changes");
  list.replaceChildren();
  for (const change of picture.changes.slice(0, 50)) {
    const item = el("li");
    item.append(el("time", `${ago(change.at)} ago`), document.createTextNode(`${change.gang} ${change.what}`));
    if (change.note) item.append(el("div", change.note, { class: "why" }));
    list.append(item);
  }
}

function openGang(key) {
  if (view.timeline) { // a recorded run has no gang pages: show its row alone
    document.getElementById("filter").value = key;
    renderGangs(view.picture);
    return;
  }
  location.hash = `gang=${encodeURIComponent(key)}`;
}

// -- a recorded run (phalanx simulate --serve): a slider over its moments instead of polling --------

function duration(seconds) {
  const s = Math.round(seconds), h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60);
  return h ? `${h}h ${String(m).padStart(2, "0")}m ${String(s % 60).padStart(2, "0")}s` : m ? `${m}m ${String(s % 60).padStart(2, "0")}s` : `${s}s`;
}

async function showMoment(index) {
  const response = await fetch(`api/cluster?frame=${index}`, { cache: "no-store" });
  if (!response.ok) { document.getElementById("status").textContent = `Frame ${index}: ${response.status}`; return; }
  view.picture = await response.json();
  const at = view.timeline.at;
  document.getElementById("moment").value = String(index);
  document.getElementById("moment-label").textContent = `${duration(at[index])} into the run (moment ${index + 1} of ${at.length})`;
  render(view.picture);
}

async function startTimeline() {
  const response = await fetch("api/timeline", { cache: "no-store" });
  if (!response.ok) return false;
  view.timeline = await response.json();
  const slider = document.getElementById("moment");
  slider.max = String(view.timeline.at.length - 1);
  document.getElementById("timeline").hidden = false;
  document.title = `Phalanx simulate: ${view.timeline.title}`;
  slider.addEventListener("input", () => showMoment(Number(slider.value)));
  document.getElementById("play").addEventListener("click", () => {
    const button = document.getElementById("play");
    if (view.playing) { clearInterval(view.playing); view.playing = null; button.textContent = "Play"; return; }
    if (Number(slider.value) >= view.timeline.at.length - 1) slider.value = "0";
    button.textContent = "Pause";
    view.playing = setInterval(() => {
      const next = Number(slider.value) + 1;
      if (next >= view.timeline.at.length) { clearInterval(view.playing); view.playing = null; button.textContent = "Play"; return; }
      showMoment(next);
    }, 600);
  });
  await showMoment(view.timeline.at.length - 1);
  return true;
}

async function showGang(key) {
  view.gang = key;
  const panel = document.getElementById("gang");
  const response = await fetch(`api/gang?key=${encodeURIComponent(key)}`, { cache: "no-store" });
  if (!response.ok) {
    document.getElementById("gang-title").textContent = key;
    const wait = Number(response.headers.get("Retry-After")) || 2;
    document.getElementById("gang-state").textContent = response.status === 404 ? "Phalanx does not know this gang (any more)."
      : response.status === 429 ? `Phalanx is busy; this gang's page comes in ${wait} s.` : `api/gang answered ${response.status}`;
    if (response.status === 429) setTimeout(() => { if (view.gang === key) showGang(key); }, wait * 1000);
    panel.hidden = false;
    return;
  }
  const page = await response.json();
  const gang = page.gang;
  document.getElementById("gang-title").textContent = gang.key;
  const extra = gang.reservation ? `; reserves ${gang.reservation}` : gang.nomination ? `; nominated in ${gang.nomination}` : "";
  document.getElementById("gang-state").textContent =
    `${gang.state}: ${gang.bound} of ${gang.pods} pods bound (minimum ${gang.minimum})${extra}. ${gang.reason}`;
  const pods = document.querySelector("#gang-pods tbody");
  pods.replaceChildren(...page.pods.map((pod) => {
    const row = el("tr");
    row.append(el("td", pod.name), el("td", pod.node || ""), el("td", pod.state), el("td", pod.reason, { class: "why" }));
    return row;
  }));
  const room = document.querySelector("#gang-room tbody");
  room.replaceChildren(...page.domains.map((domain) => {
    const row = el("tr");
    row.append(el("td", domain.domain), el("td", domain.free), el("td", `${domain.fits} of ${domain.wanted}`));
    return row;
  }));
  panel.hidden = false;
}

function route() {
  const match = location.hash.match(/^#gang=(.+)$/);
  let key = null;
  try { key = match && decodeURIComponent(match[1]); } catch { key = null; } // a hand-edited address
  if (key) showGang(key);
  else { view.gang = null; document.getElementById("gang").hidden = true; }
}

// What a test (or a curious operator's console) can ask of the page: the picture drawn, and the colour a
// node's cell has on the screen.
window.phalanxView = {
  picture: () => view.picture,
  moment: (index) => showMoment(index), // a recorded run: show its moment ``index``
  forget: () => { view.cards = new Map(); }, // draw every rack afresh at the next render
  colourOf: (code) => colourOf(code, view.picture ? view.picture.owners : []),
  cellPixel(node, index) {
    const placed = view.layout.get(node);
    if (!placed) return null;
    const col = index % placed.size.cols, row = Math.floor(index / placed.size.cols);
    const x = placed.x + GAP + col * (CELL + GAP) + Math.floor(CELL / 2);
    const y = placed.y + GAP + row * (CELL + GAP) + Math.floor(CELL / 2);
    return Array.from(placed.canvas.getContext("2d").getImageData(x, y, 1, 1).data.slice(0, 3));
  },
};

document.getElementById("filter").addEventListener("input", () => view.picture && renderGangs(view.picture));
document.getElementById("close").addEventListener("click", () => { history.replaceState(null, "", location.pathname); route(); });
window.addEventListener("hashchange", route);
startTimeline().then((recorded) => {
  if (recorded) return;
  refresh().then(route);
  setInterval(refresh, POLL_MS);
});
