// The helix-es web console: a session's events read back from the log, and what each view's
// get() returned at any point (the cut), side by side, with the difference between two points.
// Plain DOM, no build step, nothing fetched from elsewhere; data only ever reaches the page as
// text nodes (the server sends Content-Security-Policy: default-src 'self').

const KEY_STORE = "helix-es.console.key"; // sessionStorage: this tab only
const RECENT_STORE = "helix-es.console.namespaces"; // localStorage: names only, never a key
const API = new URL("../v1/", document.baseURI);

const state = {
  key: null,
  namespace: null,
  session: null,
  sessions: [],
  events: [], // the session's whole history, oldest first
  cut: null, // {offset} or {as_of}: point A
  compare: null, // {offset}: point B, or null
  reports: new Map(), // cut query -> Promise of the audit at that cut
  now: null, // Promise of GET .../messages while the "get() now" column is on, else null
  ticket: 0, // the newest render wins; older answers are dropped
};

const $ = (id) => document.getElementById(id);

// --- DOM building: text only ------------------------------------------------------------------

function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(props)) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "class") node.className = value;
    else if (name === "text") node.textContent = value;
    else if (name === "data") Object.assign(node.dataset, value);
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function clear(node, ...children) {
  node.replaceChildren(...children.flat().filter((c) => c !== null && c !== undefined && c !== false));
}

// --- the API ------------------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, message, field) {
    super(message);
    this.status = status;
    this.field = field;
  }
}

async function api(path, params = {}) {
  const url = new URL(path, API);
  for (const [k, v] of Object.entries(params)) if (v !== null && v !== undefined) url.searchParams.set(k, v);
  let response;
  try {
    response = await fetch(url, { headers: { Authorization: `Bearer ${state.key}`, Accept: "application/json" } });
  } catch (err) {
    throw new ApiError(0, `the server did not answer (${err.message}); is helix-es serve running?`);
  }
  let body = null;
  try {
    body = await response.json();
  } catch {
    body = null;
  }
  if (!response.ok) {
    const message = body && typeof body.error === "string" ? body.error : response.statusText;
    throw new ApiError(response.status, message, body ? body.field : undefined);
  }
  return body;
}

const enc = encodeURIComponent;
const sessionPath = (ns, sid) => `${enc(ns)}/sessions/${enc(sid)}`;

function audit(ns, sid, cut) {
  const query = cut ? (cut.offset !== undefined ? { offset: cut.offset } : { as_of: cut.as_of }) : {};
  const id = `${ns}\u0000${sid}\u0000${JSON.stringify(query)}`;
  if (!state.reports.has(id)) {
    const promise = api(`${sessionPath(ns, sid)}/audit`, query);
    promise.catch(() => state.reports.delete(id)); // a failure is asked again next time
    state.reports.set(id, promise);
  }
  return state.reports.get(id);
}

// --- notices: what went wrong and what to do -------------------------------------------------

function notice(title, body, kind = "error") {
  $("notice").className = `notice ${kind}`;
  $("notice-title").textContent = title;
  $("notice-body").textContent = body;
  $("notice").hidden = false;
}

function hideNotice() {
  $("notice").hidden = true;
}

function explain(err, what) {
  if (!(err instanceof ApiError)) {
    notice(`Could not show ${what}`, String(err));
    return;
  }
  if (err.status === 401) {
    forgetKey();
    notice(
      "This key was not accepted (401)",
      `The server knows no such API key. Enter a key listed in the server's keys file (helix-es serve --keys). Server said: ${err.message}`,
      "auth",
    );
    showKeyPanel();
  } else if (err.status === 403) {
    notice(
      `This key may not read namespace “${state.namespace}” (403)`,
      `Use a key whose entry in the keys file lists this namespace (or a pattern matching it), or open another namespace. Server said: ${err.message}`,
      "auth",
    );
  } else if (err.status === 0) {
    notice("The server is not answering", err.message);
  } else {
    const field = err.field ? ` (field ${err.field})` : "";
    notice(`Could not show ${what}: ${err.status}${field}`, err.message);
  }
}

// --- the key -------------------------------------------------------------------------------------

function forgetKey() {
  state.key = null;
  sessionStorage.removeItem(KEY_STORE);
  renderKeyState();
}

function renderKeyState() {
  // The last characters of a long key tell two keys apart; a short one is not shown at all.
  const shown = state.key && state.key.length >= 16 ? `key …${state.key.slice(-4)}` : "key set";
  $("key-state").textContent = state.key ? shown : "no key";
  $("key-change").hidden = !state.key;
}

function showKeyPanel() {
  $("workspace").hidden = true;
  $("key-panel").hidden = false;
  $("key-input").value = "";
  $("key-input").focus();
}

function takeKeyFromUrl() {
  // A link may carry ?key=K: keep it for this tab, then take it out of the address bar and history.
  const url = new URL(location.href);
  const key = url.searchParams.get("key");
  if (key === null) return;
  url.searchParams.delete("key");
  history.replaceState(history.state, "", url);
  if (key) {
    state.key = key;
    sessionStorage.setItem(KEY_STORE, key);
  }
}

// --- the URL: namespace, session, cut, second point ----------------------------------------------

function readUrl() {
  const p = new URL(location.href).searchParams;
  state.namespace = p.get("namespace") || null;
  state.session = state.namespace ? p.get("session") || null : null;
  const offset = p.get("offset");
  const asOf = p.get("as_of");
  state.cut = offset !== null && /^\d+$/.test(offset) ? { offset: Number(offset) } : asOf ? { as_of: asOf } : null;
  const compare = p.get("compare");
  state.compare = compare !== null && /^\d+$/.test(compare) ? { offset: Number(compare) } : null;
}

function writeUrl(push = false) {
  const url = new URL(location.href);
  url.search = "";
  const p = url.searchParams;
  if (state.namespace) p.set("namespace", state.namespace);
  if (state.session) p.set("session", state.session);
  if (state.session && state.cut?.offset !== undefined) p.set("offset", state.cut.offset);
  if (state.session && state.cut?.as_of !== undefined) p.set("as_of", state.cut.as_of);
  if (state.session && state.compare) p.set("compare", state.compare.offset);
  if (url.href === location.href) return;
  if (push) history.pushState(null, "", url);
  else history.replaceState(null, "", url);
}

// --- namespaces and sessions --------------------------------------------------------------------

function recentNamespaces() {
  try {
    const list = JSON.parse(localStorage.getItem(RECENT_STORE) || "[]");
    return Array.isArray(list) ? list.filter((n) => typeof n === "string").slice(0, 8) : [];
  } catch {
    return [];
  }
}

function remember(namespace) {
  const list = [namespace, ...recentNamespaces().filter((n) => n !== namespace)].slice(0, 8);
  localStorage.setItem(RECENT_STORE, JSON.stringify(list));
}

function renderNamespaces() {
  const recent = recentNamespaces();
  clear(
    $("ns-list"),
    recent.map((n) => el("option", { value: n })),
  );
  clear(
    $("ns-recent"),
    recent.map((n) =>
      el("a", {
        class: n === state.namespace ? "chip active" : "chip",
        href: `?namespace=${enc(n)}`,
        text: n,
        onclick: (e) => {
          e.preventDefault();
          openNamespace(n);
        },
      }),
    ),
  );
  $("ns-input").value = state.namespace || "";
}

function openNamespace(namespace) {
  state.namespace = namespace;
  state.session = null;
  state.cut = null;
  state.compare = null;
  writeUrl(true);
  route();
}

async function loadSessions() {
  const ns = state.namespace;
  clear($("sessions"), el("li", { class: "muted pad", text: "Loading sessions…" }));
  $("sessions-count").textContent = "";
  try {
    const body = await api(`${enc(ns)}/sessions`);
    if (ns !== state.namespace) return;
    remember(ns);
    renderNamespaces();
    state.sessions = [...body.sessions].sort((a, b) => String(b.last_time).localeCompare(String(a.last_time)));
    renderSessions();
  } catch (err) {
    if (ns !== state.namespace) return;
    state.sessions = [];
    clear($("sessions"), el("li", { class: "muted pad", text: "No sessions shown." }));
    if (!state.session) clear($("views"), el("p", { class: "empty", text: "Nothing to show: see the message above." }));
    explain(err, `the sessions of ${ns}`);
  }
}

function renderSessions() {
  const filter = $("session-filter").value.trim().toLowerCase();
  const shown = state.sessions.filter((s) => !filter || s.session_id.toLowerCase().includes(filter));
  $("session-filter").hidden = state.sessions.length < 8;
  $("sessions-count").textContent = state.sessions.length ? String(state.sessions.length) : "";
  if (!state.sessions.length) {
    clear($("sessions"), el("li", { class: "muted pad", text: `No sessions in ${state.namespace} yet.` }));
    return;
  }
  clear(
    $("sessions"),
    shown.map((s) =>
      el(
        "li",
        {},
        el(
          "a",
          {
            class: s.session_id === state.session ? "session active" : "session",
            href: `?namespace=${enc(state.namespace)}&session=${enc(s.session_id)}`,
            data: { session: s.session_id },
            onclick: (e) => {
              if (e.metaKey || e.ctrlKey || e.shiftKey || e.button !== 0) return; // a new tab or window
              e.preventDefault();
              openSession(s.session_id);
            },
          },
          el("span", { class: "sid", text: s.session_id }),
          el(
            "span",
            { class: "meta" },
            el("span", { text: `${s.events} event${s.events === 1 ? "" : "s"}` }),
            el("time", { datetime: s.last_time, title: s.last_time, text: ago(s.last_time) }),
          ),
        ),
      ),
    ),
  );
}

function openSession(sid) {
  state.session = sid;
  state.cut = null;
  state.compare = null;
  writeUrl(true);
  route();
}

// --- times ------------------------------------------------------------------------------------------

function ago(iso) {
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return "";
  const s = Math.round((Date.now() - t) / 1000);
  if (s < 60) return "just now";
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
  return iso.slice(0, 10);
}

function clock(iso) {
  // UTC as the log stamps it, to the millisecond: several events often share a second.
  const m = /T(\d\d:\d\d:\d\d)(\.\d{1,3})?/.exec(iso || "");
  return m ? m[1] + (m[2] || "").padEnd(4, "0").slice(0, 4) : "";
}

// --- events: what each one is -------------------------------------------------------------------

function kindOf(e) {
  if (e.duplicate_of !== null && e.duplicate_of !== undefined) return "duplicate";
  if (!e.known) return "unknown";
  switch (e.type) {
    case "MessageAdded":
      return e.erased ? "erased" : "add";
    case "MemoryCleared":
      return "clear";
    case "SummaryRecorded":
      return "summary";
    case "EmbeddingRecorded":
      return "embedding";
    case "MessageRetracted":
      return "retract";
    case "SessionErased":
      return "erasure";
    default:
      return "other";
  }
}

const KIND_LABEL = {
  clear: "cleared",
  summary: "summary",
  embedding: "embedding",
  retract: "retracted",
  erasure: "erased",
  erased: "erased",
  duplicate: "duplicate",
  unknown: "unknown",
};

function badge(e, kind) {
  if (kind === "add" || kind === "erased" || kind === "duplicate") {
    const role = e.payload?.message?.role || "?";
    return el("span", { class: `badge role-${role}`, text: role });
  }
  return el("span", { class: `badge kind-${kind}`, text: KIND_LABEL[kind] || e.type });
}

function eventText(e, kind) {
  const p = e.payload || {};
  switch (kind) {
    case "add":
    case "duplicate": {
      const m = p.message || {};
      const calls = (m.tool_calls || []).map((c) => `→ ${c.name}(${c.arguments || ""})`).join(" ");
      const text = [m.content, calls].filter(Boolean).join(" ");
      const prefix = kind === "duplicate" ? `retry of @${e.duplicate_of}, not folded: ` : "";
      return prefix + (text || (m.tool_call_id ? `result of ${m.tool_call_id}` : "(empty)"));
    }
    case "erased":
      return "content erased (its key was destroyed by forget)";
    case "clear":
      return p.reason ? `memory cleared: ${p.reason}` : "memory cleared";
    case "summary":
      return `${p.view}, covering ${p.covers} messages: ${p.text}`;
    case "embedding":
      return `${p.model}, ${p.dims} dims, text sha256 ${String(p.content_sha256 || "").slice(0, 12)}…`;
    case "retract": {
      const what = p.retracts_offset !== null && p.retracts_offset !== undefined ? `the message at @${p.retracts_offset}` : "nothing (no message left)";
      return `took back ${what}${p.reason ? `: ${p.reason}` : ""}`;
    }
    case "erasure":
      return "session forgotten: every earlier message is unreadable";
    case "unknown":
      return `${p.avro_type || e.type} (written by a newer helix-es)`;
    default:
      return e.description || JSON.stringify(p);
  }
}

// --- the session: timeline and cut ---------------------------------------------------------------

async function loadSession() {
  const { namespace: ns, session: sid } = state;
  const ticket = ++state.ticket;
  state.now = null;
  $("now-toggle").setAttribute("aria-pressed", "false");
  clear($("timeline"), el("li", { class: "muted pad", text: "Reading the session from the log…" }));
  clear($("session-head"), el("h2", { class: "sid", text: sid }));
  clear($("views"));
  clear($("views-head"));
  $("cut-controls").hidden = true;
  $("now-toggle").hidden = true;
  let report;
  try {
    report = await audit(ns, sid, null);
  } catch (err) {
    if (ticket !== state.ticket) return;
    clear($("timeline"), el("li", { class: "muted pad", text: "The session could not be read." }));
    explain(err, `session ${sid}`);
    return;
  }
  if (ticket !== state.ticket) return;
  state.events = report.events;
  renderSessionHead(report);
  renderTimeline();
  if (!state.events.length) {
    clear($("views"), el("p", { class: "empty", text: "This session has no events on the log." }));
    return;
  }
  $("cut-controls").hidden = false;
  $("now-toggle").hidden = false;
  if (!state.cut) state.cut = { offset: state.events[state.events.length - 1].offset };
  showCut();
}

function renderSessionHead(report) {
  const first = state.events[0];
  const last = state.events[state.events.length - 1];
  const span = first ? `${first.time.slice(0, 10)} ${clock(first.time)} → ${clock(last.time)} UTC` : "";
  const notes = [];
  if (report.erased) notes.push(el("span", { class: "pill danger", text: `forgotten at ${report.erased.at}` }));
  if (report.skipped) notes.push(el("span", { class: "pill warn", text: `${report.skipped} record(s) skipped` }));
  if (report.sealed) notes.push(el("span", { class: "pill", title: report.sealed, text: "sealed" }));
  clear(
    $("session-head"),
    el("h2", { class: "sid", title: report.topic, text: state.session }),
    el(
      "div",
      { class: "muted small" },
      `${state.events.length} event${state.events.length === 1 ? "" : "s"} · ${report.topic}${span ? ` · ${span}` : ""}`,
    ),
    notes.length ? el("div", { class: "notes" }, notes) : null,
  );
}

function renderTimeline() {
  const items = state.events.map((e, i) => {
    const kind = kindOf(e);
    return el(
      "li",
      {
        class: `ev kind-${kind}`,
        data: { offset: e.offset, index: i, kind },
        title: `${e.type} at offset ${e.offset}, partition ${e.partition}, ${e.time}`,
        onclick: (ev) => pick(i, ev.shiftKey || $("compare-mode").checked),
        onmousedown: (ev) => ev.shiftKey && ev.preventDefault(), // Shift picks B; it should not select text
      },
      el("span", { class: "rail", "aria-hidden": "true" }, el("span", { class: "dot" })),
      el(
        "div",
        { class: "ev-body" },
        el(
          "div",
          { class: "ev-meta" },
          el("span", { class: "off", text: `@${e.offset}` }),
          badge(e, kind),
          kind === "duplicate" ? el("span", { class: "badge kind-duplicate", text: "duplicate" }) : null,
          el("time", { datetime: e.time, text: clock(e.time) }),
          el("span", { class: "marks" }),
        ),
        el("div", { class: "ev-text", text: eventText(e, kind) }),
      ),
    );
  });
  clear($("timeline"), items);
  const range = $("cut-range");
  range.max = String(Math.max(0, state.events.length - 1));
}

function indexOfCut(cut) {
  // The last event inside the cut: at or below an offset, or stamped at or before a time.
  if (!cut) return state.events.length - 1;
  if (cut.offset !== undefined) {
    let found = -1;
    state.events.forEach((e, i) => {
      if (e.offset <= cut.offset) found = i;
    });
    return found;
  }
  const t = Date.parse(cut.resolved || cut.as_of);
  if (Number.isNaN(t)) return -1;
  let found = -1;
  state.events.forEach((e, i) => {
    if (Date.parse(e.time) <= t) found = i;
  });
  return found;
}

function pick(index, asCompare = false) {
  const i = Math.max(0, Math.min(state.events.length - 1, index));
  const offset = state.events[i].offset;
  if (asCompare) state.compare = { offset };
  else state.cut = { offset };
  showCut();
}

function move(step, asCompare = false) {
  const from = indexOfCut(asCompare && state.compare ? state.compare : state.cut);
  pick(from + step, asCompare);
}

function markTimeline() {
  const a = indexOfCut(state.cut);
  const b = state.compare ? indexOfCut(state.compare) : -2;
  const [lo, hi] = b >= 0 ? [Math.min(a, b), Math.max(a, b)] : [-1, -1];
  for (const li of $("timeline").children) {
    const i = Number(li.dataset.index);
    if (Number.isNaN(i)) continue;
    li.classList.toggle("after", i > Math.max(a, b));
    li.classList.toggle("cut", i === a);
    li.classList.toggle("compare", i === b);
    li.classList.toggle("between", lo >= 0 && i > lo && i <= hi);
    const marks = li.querySelector(".marks");
    clear(
      marks,
      i === a ? el("span", { class: "mark-a", text: "A" }) : null,
      i === b ? el("span", { class: "mark-b", text: "B" }) : null,
    );
  }
  const current = $("timeline").children[a];
  if (current) current.scrollIntoView({ block: "nearest" });
  $("cut-range").value = String(Math.max(0, a));
  $("compare-clear").hidden = !state.compare;
}

async function showCut() {
  hideNotice();
  markTimeline();
  writeUrl();
  const { namespace: ns, session: sid } = state;
  const ticket = ++state.ticket;
  $("views-pane").classList.add("loading");
  const cuts = [state.cut, state.compare].filter(Boolean);
  let reports;
  let now = null;
  try {
    [now, ...reports] = await Promise.all([state.now, ...cuts.map((c) => audit(ns, sid, c))]);
  } catch (err) {
    if (ticket !== state.ticket) return;
    $("views-pane").classList.remove("loading");
    explain(err, "the views at this point");
    return;
  }
  if (ticket !== state.ticket) return;
  $("views-pane").classList.remove("loading");
  const [atA, atB] = reports;
  if (state.cut.as_of !== undefined) {
    state.cut.resolved = atA.cut?.as_of || state.cut.as_of; // the server's reading of "-10m" and the like
    markTimeline();
  }
  $("asof-input").value = state.cut.as_of ?? "";
  if (atB) renderDiff(atA, atB);
  else renderViews(atA);
  if (now) $("views").append(nowColumn(now.messages));
}

// --- views at the cut, and the difference between two points ------------------------------------

function cutLabel(report, cut) {
  if (cut.offset !== undefined) {
    const e = state.events[indexOfCut(cut)];
    return `@${cut.offset}${e ? ` · ${clock(e.time)}` : ""}`;
  }
  return `as of ${report.cut?.as_of || cut.as_of}`;
}

function messageCard(m, change = null) {
  const role = m.role || "?";
  const parts = [
    el(
      "div",
      { class: "msg-meta" },
      el("span", { class: `badge role-${role}`, text: role }),
      m.name ? el("span", { class: "muted", text: m.name }) : null,
      m.tool_call_id ? el("span", { class: "muted mono", text: `↳ ${m.tool_call_id}` }) : null,
      change ? el("span", { class: `change ${change}`, text: change === "added" ? "+ added" : "− removed" }) : null,
    ),
  ];
  if (m.content) parts.push(el("div", { class: "msg-text", text: m.content }));
  for (const call of m.tool_calls || []) {
    parts.push(
      el(
        "div",
        { class: "tool-call" },
        el("span", { class: "mono strong", text: `${call.name}()` }),
        el("span", { class: "muted mono", text: ` ${call.id}` }),
        call.arguments ? el("pre", { class: "args", text: call.arguments }) : null,
      ),
    );
  }
  const meta = Object.entries(m.metadata || {});
  if (meta.length) parts.push(el("div", { class: "muted small mono", text: meta.map(([k, v]) => `${k}=${v}`).join(" ") }));
  return el("li", { class: `msg role-${role}${change ? ` ${change}` : ""}` }, parts);
}

function column(name, count, body, extra = null) {
  return el(
    "section",
    { class: "view", data: { view: name } },
    el("header", {}, el("h3", { title: name, text: name }), el("div", { class: "sub" }, el("span", { class: "count", text: count }), extra)),
    body,
  );
}

function nowColumn(messages) {
  // Served by the memory's own view (Redis, Postgres, in process), not folded here: a check on it.
  const body = messages.length
    ? el("ol", { class: "msgs" }, messages.map((m) => messageCard(m)))
    : el("p", { class: "empty", text: "empty now" });
  const count = `${messages.length} message${messages.length === 1 ? "" : "s"}`;
  const view = column("get() now", count, body);
  view.classList.add("now");
  return view;
}

function renderViews(report) {
  clear(
    $("views-head"),
    el("h2", {}, "Each view at ", el("span", { class: "cut-name", text: cutLabel(report, state.cut) })),
    el("p", { class: "muted small", text: "What get() returned at this point, folded from the log up to it." }),
  );
  const views = Object.entries(report.views || {});
  if (!views.length) {
    clear($("views"), el("p", { class: "empty", text: "This config has no views to fold." }));
    return;
  }
  clear(
    $("views"),
    views.map(([name, messages]) =>
      column(
        name,
        `${messages.length} message${messages.length === 1 ? "" : "s"}`,
        messages.length
          ? el("ol", { class: "msgs" }, messages.map((m) => messageCard(m)))
          : el("p", { class: "empty", text: "empty at this point" }),
      ),
    ),
  );
}

const identity = (m) => JSON.stringify([m.role, m.content, m.name, m.tool_calls, m.tool_call_id, m.metadata]);

function diff(before, after) {
  // Longest common subsequence on whole messages: what stayed, in order, and what came and went.
  const a = before.map(identity);
  const b = after.map(identity);
  const n = a.length;
  const m = b.length;
  if (n * m > 4_000_000) {
    const left = new Set(a);
    const right = new Set(b);
    return [
      ...before.filter((_, i) => !right.has(a[i])).map((msg) => ["removed", msg]),
      ...after.map((msg, j) => [left.has(b[j]) ? "kept" : "added", msg]),
    ];
  }
  const table = Array.from({ length: n + 1 }, () => new Uint32Array(m + 1));
  for (let i = n - 1; i >= 0; i--)
    for (let j = m - 1; j >= 0; j--)
      table[i][j] = a[i] === b[j] ? table[i + 1][j + 1] + 1 : Math.max(table[i + 1][j], table[i][j + 1]);
  const out = [];
  let i = 0;
  let j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && a[i] === b[j]) {
      out.push(["kept", after[j]]);
      i++;
      j++;
    } else if (j < m && (i === n || table[i][j + 1] >= table[i + 1][j])) {
      out.push(["added", after[j]]);
      j++;
    } else {
      out.push(["removed", before[i]]);
      i++;
    }
  }
  return out;
}

function renderDiff(atA, atB) {
  // From the earlier point to the later one, whichever of A and B that is.
  const aFirst = indexOfCut(state.cut) <= indexOfCut(state.compare);
  const [from, to] = aFirst ? [atA, atB] : [atB, atA];
  const [fromCut, toCut] = aFirst ? [state.cut, state.compare] : [state.compare, state.cut];
  clear(
    $("views-head"),
    el(
      "h2",
      {},
      "What changed from ",
      el("span", { class: "cut-name", text: cutLabel(from, fromCut) }),
      " to ",
      el("span", { class: "cut-name", text: cutLabel(to, toCut) }),
    ),
    el("p", { class: "muted small", text: "Per view: messages added (green) and removed (red) between the two points." }),
  );
  const names = [...new Set([...Object.keys(from.views || {}), ...Object.keys(to.views || {})])];
  clear(
    $("views"),
    names.map((name) => {
      const ops = diff(from.views?.[name] || [], to.views?.[name] || []);
      const added = ops.filter(([op]) => op === "added").length;
      const removed = ops.filter(([op]) => op === "removed").length;
      const kept = ops.length - added - removed;
      const changed = ops.filter(([op]) => op !== "kept");
      const body = changed.length
        ? el("ol", { class: "msgs" }, changed.map(([op, msg]) => messageCard(msg, op)))
        : el("p", { class: "empty", text: "no change between the two points" });
      return column(
        name,
        `${kept} unchanged`,
        body,
        el(
          "span",
          { class: "delta" },
          el("span", { class: "plus", text: `+${added}` }),
          el("span", { class: "minus", text: `−${removed}` }),
        ),
      );
    }),
  );
}

// --- routing: the URL decides what is shown ------------------------------------------------------

function renderCrumbs() {
  const parts = [];
  if (state.namespace) {
    parts.push(
      el("a", {
        href: `?namespace=${enc(state.namespace)}`,
        text: state.namespace,
        onclick: (e) => {
          e.preventDefault();
          openNamespace(state.namespace);
        },
      }),
    );
  }
  if (state.session) parts.push(el("span", { class: "sep", text: "/" }), el("span", { text: state.session }));
  clear($("crumbs"), parts);
}

let shownNamespace = null;

function route() {
  hideNotice();
  renderKeyState();
  if (!state.key) {
    shownNamespace = null;
    showKeyPanel();
    return;
  }
  $("key-panel").hidden = true;
  $("workspace").hidden = false;
  document.body.classList.toggle("has-session", Boolean(state.session));
  $("sidebar-toggle").hidden = !state.session;
  renderCrumbs();
  renderNamespaces();
  if (!state.namespace) {
    shownNamespace = null;
    clear($("sessions"), el("li", { class: "muted pad", text: "Open a namespace to list its sessions." }));
    $("sessions-count").textContent = "";
  } else if (state.namespace !== shownNamespace) {
    shownNamespace = state.namespace;
    loadSessions();
  } else {
    renderSessions();
  }
  if (state.session) {
    loadSession();
  } else {
    state.ticket++;
    state.events = [];
    $("cut-controls").hidden = true;
    $("now-toggle").hidden = true;
    clear($("timeline"));
    clear($("session-head"));
    clear($("views-head"));
    clear(
      $("views"),
      el(
        "div",
        { class: "welcome" },
        el("h2", { text: state.namespace ? "Pick a session" : "Open a namespace" }),
        el("p", {
          text: state.namespace
            ? "Its timeline shows every event on the log; pick any point to see what each view returned then."
            : "Type the namespace (the agent or tenant) your key may read, then pick one of its sessions.",
        }),
      ),
    );
  }
}

// --- wiring ----------------------------------------------------------------------------------------

function typing(target) {
  return target instanceof HTMLElement && (target.isContentEditable || ["INPUT", "TEXTAREA", "SELECT"].includes(target.tagName));
}

function wire() {
  $("key-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const key = $("key-input").value.trim();
    if (!key) return;
    state.key = key;
    sessionStorage.setItem(KEY_STORE, key);
    state.reports.clear();
    shownNamespace = null;
    route();
  });
  $("key-change").addEventListener("click", () => {
    forgetKey();
    state.reports.clear();
    route();
  });
  $("notice-close").addEventListener("click", hideNotice);
  $("sidebar-toggle").addEventListener("click", () => {
    const open = document.body.classList.toggle("sidebar-open");
    $("sidebar-toggle").setAttribute("aria-expanded", String(open));
  });
  $("ns-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const ns = $("ns-input").value.trim();
    if (ns) openNamespace(ns);
  });
  $("session-filter").addEventListener("input", renderSessions);
  $("cut-range").addEventListener("input", (e) => pick(Number(e.target.value)));
  $("cut-prev").addEventListener("click", () => move(-1));
  $("cut-next").addEventListener("click", () => move(1));
  $("now-toggle").addEventListener("click", () => {
    const on = state.now === null;
    state.now = on ? api(`${sessionPath(state.namespace, state.session)}/messages`) : null;
    $("now-toggle").setAttribute("aria-pressed", String(on));
    showCut();
  });
  $("compare-clear").addEventListener("click", () => {
    state.compare = null;
    showCut();
  });
  $("asof-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const value = $("asof-input").value.trim();
    if (!value || !state.events.length) return;
    state.cut = { as_of: value };
    showCut();
  });
  document.addEventListener("keydown", (e) => {
    if (!state.events.length || typing(e.target) || e.altKey || e.ctrlKey || e.metaKey) return;
    const step = { ArrowLeft: -1, ArrowUp: -1, ArrowRight: 1, ArrowDown: 1 }[e.key];
    if (step) {
      e.preventDefault();
      move(step, e.shiftKey);
    } else if (e.key === "Home" || e.key === "End") {
      e.preventDefault();
      pick(e.key === "Home" ? 0 : state.events.length - 1, e.shiftKey);
    } else if (e.key === "Escape" && state.compare) {
      state.compare = null;
      showCut();
    }
  });
  window.addEventListener("popstate", () => {
    readUrl();
    route();
  });
}

function start() {
  state.key = sessionStorage.getItem(KEY_STORE);
  takeKeyFromUrl();
  readUrl();
  wire();
  route();
}

start();
