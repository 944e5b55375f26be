// The interactive topology page: draws the Picture (converters/picture.py) that the page
// embeds as JSON. ELK places the boxes (rectangle packing for hosts and NUMA nodes, layered
// inside a box); this file only draws them as SVG and handles zoom, pan, collapse, hover,
// findings and search. Host strings reach the DOM through textContent and setAttribute only,
// never as markup.
"use strict";

(function () {
  const embedded = document.getElementById("wp-data").textContent.trim();
  if (embedded) start(JSON.parse(embedded));
  else mcpApp(start); // the MCP App shell: the picture comes from the host
})();

// As an MCP App (the ui:// resource of wp_layer and wp_run_skill): the host renders this page
// in an iframe and talks JSON-RPC over postMessage. After the handshake it sends the tool's
// result; the snapshot id in it names the picture, read through the host as the resource
// wp://snapshots/ID/picture.
function mcpApp(start) {
  const pending = new Map();
  let nextId = 1;
  const post = (message) => window.parent.postMessage({ jsonrpc: "2.0", ...message }, "*");
  const request = (method, params) =>
    new Promise((resolve, reject) => {
      const id = nextId++;
      pending.set(id, { resolve, reject });
      post({ id, method, params });
    });
  let started = false;
  window.addEventListener("message", async (event) => {
    if (event.source !== window.parent || !event.data || event.data.jsonrpc !== "2.0") return;
    const message = event.data;
    if (message.id !== undefined && pending.has(message.id) && !message.method) {
      const waiter = pending.get(message.id);
      pending.delete(message.id);
      message.error ? waiter.reject(new Error(message.error.message)) : waiter.resolve(message.result);
      return;
    }
    if (message.method !== "ui/notifications/tool-result" || started) return;
    const snapshot = message.params?.structuredContent?.snapshot_id;
    if (typeof snapshot !== "string") return;
    started = true;
    const read = await request("resources/read", { uri: `wp://snapshots/${snapshot}/picture` });
    start(JSON.parse(read.contents[0].text));
  });
  request("ui/initialize", {
    protocolVersion: "2026-01-26",
    appInfo: { name: "wp-mcp picture", version: "1" },
    appCapabilities: {},
  }).then(() => post({ method: "ui/notifications/initialized", params: {} }));
}

function start(data) {
  const SVG = "http://www.w3.org/2000/svg";
  const LINE = 14; // px per label line
  const CHAR = 7; // px per character of the 12 px monospace font
  document.querySelector("h1").textContent = data.title;
  document.getElementById("notes").textContent = data.notes.join(" · ");
  const boxes = new Map(data.boxes.map((b) => [b.id, b]));
  const kids = new Map();
  for (const b of data.boxes) {
    if (!kids.has(b.parent)) kids.set(b.parent, []);
    kids.get(b.parent).push(b);
  }
  const collapsed = new Set(data.boxes.filter((b) => b.folded).map((b) => b.id));
  const elk = new ELK();
  const view = { x: 0, y: 0, k: 1 };
  let positions = new Map(); // box id -> absolute {x, y, w, h}
  let highlighted = null; // mark index

  const svg = document.getElementById("canvas");
  const scene = document.createElementNS(SVG, "g");
  svg.appendChild(scene);

  function el(name, attrs, parent) {
    const node = document.createElementNS(SVG, name);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
    if (parent) parent.appendChild(node);
    return node;
  }

  function lines(box) {
    const text = box.label.split("\n");
    const inside = (kids.get(box.id) || []).length;
    if (collapsed.has(box.id) && inside) text.push(`[+] ${inside} inside`);
    return text;
  }

  function textSize(text) {
    const width = Math.max(...text.map((t) => t.length)) * CHAR + 16;
    return { width: Math.max(width, 60), height: text.length * LINE + 10 };
  }

  function elkNode(box) {
    const text = lines(box);
    const children = collapsed.has(box.id) ? [] : kids.get(box.id) || [];
    if (!children.length) return { id: box.id, ...textSize(text) };
    const ids = new Set(children.map((c) => c.id));
    const edges = data.links
      .filter((l) => ids.has(l.src) && ids.has(l.dst))
      .map((l, i) => ({ id: `${box.id}#${i}`, sources: [l.src], targets: [l.dst] }));
    const leafOnly = children.every((c) => !(kids.get(c.id) || []).length);
    const top = text.length * LINE + 14;
    return {
      id: box.id,
      layoutOptions: {
        "elk.algorithm": leafOnly ? "layered" : "rectpacking",
        "elk.direction": "RIGHT",
        "elk.padding": `[top=${top},left=12,bottom=12,right=12]`,
        "elk.spacing.nodeNode": "18",
        "elk.layered.spacing.nodeNodeBetweenLayers": "60",
        "elk.aspectRatio": "1.6",
        "elk.nodeSize.minimum": `(${textSize(text).width},${top + 20})`,
        "elk.nodeSize.constraints": "MINIMUM_SIZE",
      },
      children: children.map(elkNode),
      edges,
    };
  }

  function place(node, dx, dy) {
    const x = dx + (node.x || 0);
    const y = dy + (node.y || 0);
    if (node.id !== "root") positions.set(node.id, { x, y, w: node.width, h: node.height });
    for (const child of node.children || []) place(child, x, y);
  }

  function visible(id) {
    // the box itself, or its nearest drawn ancestor (a link to a folded box ends on its host)
    let box = boxes.get(id);
    while (box && !positions.has(box.id)) box = boxes.get(box.parent);
    return box ? box.id : null;
  }

  async function layout() {
    const roots = kids.get(null) || [];
    const graph = {
      id: "root",
      layoutOptions: {
        "elk.algorithm": "rectpacking",
        "elk.aspectRatio": "1.6",
        "elk.spacing.nodeNode": "24",
        "elk.padding": "[top=20,left=20,bottom=20,right=20]",
      },
      children: roots.map(elkNode),
    };
    const result = await elk.layout(graph);
    positions = new Map();
    place(result, 0, 0);
    draw(result.width, result.height);
  }

  function draw(width, height) {
    scene.replaceChildren();
    svg.setAttribute("data-width", width);
    svg.setAttribute("data-height", height);
    const depth = (b) => (b.parent ? 1 + depth(boxes.get(b.parent)) : 0);
    const drawn = data.boxes.filter((b) => positions.has(b.id));
    drawn.sort((a, b) => depth(a) - depth(b));
    // open boxes, then lines, then leaves, then line labels: a line never hides a name
    const isOpen = (b) => (kids.get(b.id) || []).length && !collapsed.has(b.id);
    for (const box of drawn.filter(isOpen)) drawBox(box);
    const linkLayer = el("g", { class: "links" }, scene);
    for (const box of drawn.filter((b) => !isOpen(b))) drawBox(box);
    const labelLayer = el("g", { class: "link-labels" }, scene);
    data.links.forEach((link, i) => drawLink(link, i, linkLayer, labelLayer));
    applyHighlight();
    applySearch();
  }

  function drawBox(box) {
    const p = positions.get(box.id);
    const isOpen = (kids.get(box.id) || []).length && !collapsed.has(box.id);
    const g = el("g", {
      class: `box kind-${box.kind}${box.priority ? " " + box.priority : ""}${isOpen ? " open" : ""}`,
      "data-id": box.id,
      "data-kind": box.kind,
      transform: `translate(${p.x},${p.y})`,
    }, scene);
    if (box.priority) g.setAttribute("data-priority", box.priority);
    if (!isOpen && box.inner_priority) g.classList.add(`inner-${box.inner_priority}`);
    el("rect", { width: p.w, height: p.h, rx: box.kind === "process" ? 8 : 3 }, g);
    const title = el("title", {}, g);
    title.textContent = tooltip(box);
    lines(box).forEach((line, i) => {
      const t = el("text", { x: 8, y: 16 + i * LINE, class: i ? "fact" : "name" }, g);
      t.textContent = line;
    });
    g.addEventListener("mouseenter", () => showDetail(box));
    if ((kids.get(box.id) || []).length) {
      g.addEventListener("click", (event) => {
        if (event.target.closest("g.box") !== g) return;
        event.stopPropagation();
        collapsed.has(box.id) ? collapsed.delete(box.id) : collapsed.add(box.id);
        layout();
      });
    }
  }

  function tooltip(box) {
    const parts = [box.label.replace(/\n/g, " · ")];
    for (const [k, v] of box.detail) parts.push(`${k}: ${v}`);
    for (const i of box.marks) parts.push(`${data.marks[i].priority} ${data.marks[i].title}`);
    return parts.join("\n");
  }

  function clip(from, to) {
    // where the line from the centre of `from` towards `to` leaves the rectangle `from`
    const cx = from.x + from.w / 2, cy = from.y + from.h / 2;
    const dx = to.x + to.w / 2 - cx, dy = to.y + to.h / 2 - cy;
    const sx = dx ? from.w / 2 / Math.abs(dx) : Infinity;
    const sy = dy ? from.h / 2 / Math.abs(dy) : Infinity;
    const s = Math.min(sx, sy, 1);
    return { x: cx + dx * s, y: cy + dy * s };
  }

  function drawLink(link, index, layer, labelLayer) {
    const src = visible(link.src), dst = visible(link.dst);
    if (!src || !dst || src === dst) return;
    const a = positions.get(src), b = positions.get(dst);
    const p = clip(a, b), q = clip(b, a);
    const g = el("g", {
      class: `link kind-${link.kind}${link.priority ? " " + link.priority : ""}`,
      "data-src": link.src,
      "data-dst": link.dst,
      "data-index": index,
    }, layer);
    el("line", { x1: p.x, y1: p.y, x2: q.x, y2: q.y, "marker-end": "url(#arrow)" }, g);
    if (link.label) {
      const t = el("text", {
        x: (p.x + q.x) / 2, y: (p.y + q.y) / 2 - 3, "text-anchor": "middle",
        class: `link-label${link.priority ? " " + link.priority : ""}`,
      }, labelLayer);
      t.textContent = link.label;
    }
  }

  function showDetail(box) {
    const panel = document.getElementById("detail");
    panel.replaceChildren();
    const head = document.createElement("h3");
    head.textContent = box.label.split("\n")[0];
    panel.appendChild(head);
    const table = document.createElement("table");
    for (const [k, v] of [["id", box.id], ...box.detail.filter(([k]) => k !== "id")]) {
      const row = table.insertRow();
      row.insertCell().textContent = k;
      row.insertCell().textContent = v;
    }
    panel.appendChild(table);
    for (const i of box.marks) {
      const p = document.createElement("p");
      p.className = `mark-note ${data.marks[i].priority}`;
      p.textContent = `${data.marks[i].priority} · ${data.marks[i].title}`;
      panel.appendChild(p);
      const chain = document.createElement("ul");
      for (const line of data.marks[i].evidence) {
        chain.appendChild(document.createElement("li")).textContent = line;
      }
      panel.appendChild(chain);
    }
  }

  // ------------------------------------------------------------ findings and search

  function listFindings() {
    const list = document.getElementById("findings");
    data.marks.forEach((mark, i) => {
      const item = document.createElement("li");
      item.className = `mark ${mark.priority}`;
      item.dataset.mark = String(i);
      item.textContent = `${mark.priority} · ${mark.title}`;
      item.title = ["evidence:", ...mark.evidence].join("\n");
      item.addEventListener("click", () => {
        highlighted = highlighted === i ? null : i;
        if (highlighted !== null) openAncestors(mark.subjects);
        else applyHighlight();
      });
      list.appendChild(item);
    });
    if (!data.marks.length) list.textContent = "no findings given";
  }

  function openAncestors(ids) {
    let changed = false;
    for (const id of ids) {
      for (let b = boxes.get(boxes.get(id)?.parent); b; b = boxes.get(b.parent)) {
        if (collapsed.delete(b.id)) changed = true;
      }
    }
    changed ? layout() : applyHighlight();
  }

  function applyHighlight() {
    const subjects = new Set(highlighted === null ? [] : data.marks[highlighted].subjects);
    svg.classList.toggle("highlighting", highlighted !== null);
    for (const g of scene.querySelectorAll("g.box")) {
      g.classList.toggle("highlight", subjects.has(g.dataset.id));
    }
    for (const g of scene.querySelectorAll("g.link")) {
      g.classList.toggle("highlight", subjects.has(g.dataset.src) && subjects.has(g.dataset.dst));
    }
    for (const li of document.querySelectorAll("#findings li")) {
      li.classList.toggle("selected", Number(li.dataset.mark) === highlighted);
    }
  }

  function applySearch() {
    const query = document.getElementById("search").value.trim().toLowerCase();
    let count = 0;
    for (const g of scene.querySelectorAll("g.box")) {
      const box = boxes.get(g.dataset.id);
      const hay = [box.id, box.label, ...box.detail.map(([, v]) => v)].join("\n").toLowerCase();
      const hit = query !== "" && hay.includes(query);
      g.classList.toggle("match", hit);
      if (hit) count++;
    }
    document.getElementById("matches").textContent = query ? `${count} found` : "";
  }

  // ------------------------------------------------------------ zoom and pan

  function applyView() {
    scene.setAttribute("transform", `translate(${view.x},${view.y}) scale(${view.k})`);
  }

  svg.addEventListener("wheel", (event) => {
    event.preventDefault();
    const factor = Math.exp(-event.deltaY * 0.0015);
    const r = svg.getBoundingClientRect();
    const mx = event.clientX - r.left, my = event.clientY - r.top;
    view.x = mx - (mx - view.x) * factor;
    view.y = my - (my - view.y) * factor;
    view.k *= factor;
    applyView();
  }, { passive: false });

  let drag = null;
  svg.addEventListener("pointerdown", (event) => {
    drag = { x: event.clientX - view.x, y: event.clientY - view.y };
  });
  window.addEventListener("pointermove", (event) => {
    if (!drag) return;
    view.x = event.clientX - drag.x;
    view.y = event.clientY - drag.y;
    applyView();
  });
  window.addEventListener("pointerup", () => (drag = null));

  document.getElementById("fit").addEventListener("click", fit);
  document.getElementById("search").addEventListener("input", applySearch);

  function fit() {
    const r = svg.getBoundingClientRect();
    const w = Number(svg.getAttribute("data-width")) || 1;
    const h = Number(svg.getAttribute("data-height")) || 1;
    view.k = Math.min(r.width / w, r.height / h, 1.5);
    view.x = (r.width - w * view.k) / 2;
    view.y = 0;
    applyView();
  }

  listFindings();
  layout().then(() => {
    fit();
    document.body.dataset.drawnMs = String(Math.round(performance.now())); // for the benchmark
    document.body.dataset.ready = "1";
  }).catch((error) => {
    document.getElementById("notes").textContent = `layout failed: ${error}`;
    throw error;
  });
}
