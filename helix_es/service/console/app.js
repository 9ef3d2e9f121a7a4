// The helix-es web console: a session's events read back from the log, and what each view's
// get() returned at any point (the cut), side by side, with the difference between two points;
// and a namespace's facts (the Facts tab), when and how long each held, drawn on a timeline.
// Plain DOM, no build step, nothing fetched from elsewhere; data only ever reaches the page as
// text nodes (the server sends Content-Security-Policy: default-src 'self').

import { ApiError, api, enc, sessionPath } from "./api.js";
import { $, clear, el, plural } from "./dom.js";
import { ago, badge, clock, eventText, kindOf } from "./events.js";
import { factsChart, factsLegend, factsSummary } from "./facts.js";
import { eventDetail, fateMarks, fatesOf } from "./forget.js";
import { hitsList } from "./recall.js";
import { diffColumns, nowColumn, viewColumns } from "./views.js";

const KEY_STORE = "helix-es.console.key"; // sessionStorage: this tab only
const RECENT_STORE = "helix-es.console.namespaces"; // localStorage: names only, never a key

const state = {
  key: null,
  namespace: null,
  session: null,
  sessions: [], // the pages read so far, newest activity first
  sessionsNext: null, // the cursor of the next page, or null
  sessionsTotal: 0, // sessions that match the filter, on every page
  sessionsFiltered: false, // the pages shown are those of a filter
  events: [], // the session's whole history, oldest first
  cut: null, // {offset} or {as_of}: point A
  compare: null, // {offset}: point B, or null
  reports: new Map(), // namespace, session and offset -> Promise of the audit at that cut
  now: null, // Promise of GET .../messages while the "get() now" column is on, else null
  served: null, // the namespaces on the log this key may use (GET /v1/namespaces), once asked
  tab: "sessions", // or "facts": the namespace's facts instead of a session
  facts: { subject: null, predicate: null, history: false }, // the Facts tab's filters
  factsShown: null, // the facts last read, drawn again when the window changes width
  ticket: 0, // the newest render wins; older answers are dropped
};

// --- the audit, asked once per offset cut ------------------------------------------------------------

function audit(ns, sid, cut) {
  const query = cut ? (cut.offset !== undefined ? { offset: cut.offset } : { as_of: cut.as_of }) : {};
  const ask = () => api(state.key, `${sessionPath(ns, sid)}/audit`, query);
  // What the log held up to an offset never changes; the whole history and a time ("-10m") may.
  if (cut?.offset === undefined) return ask();
  const id = `${ns}\u0000${sid}\u0000${cut.offset}`;
  if (!state.reports.has(id)) {
    const promise = ask();
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
  state.served = null;
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
    state.served = null;
    sessionStorage.setItem(KEY_STORE, key);
  }
}

// --- the URL: namespace, session, cut, second point ----------------------------------------------

function readUrl() {
  const p = new URL(location.href).searchParams;
  state.namespace = p.get("namespace") || null;
  state.tab = state.namespace && p.get("tab") === "facts" ? "facts" : "sessions";
  state.session = state.namespace && state.tab === "sessions" ? p.get("session") || null : null;
  state.facts = { subject: p.get("subject") || null, predicate: p.get("predicate") || null, history: p.get("history") === "1" };
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
  if (state.namespace && state.tab === "facts") {
    p.set("tab", "facts");
    if (state.facts.subject) p.set("subject", state.facts.subject);
    if (state.facts.predicate) p.set("predicate", state.facts.predicate);
    if (state.facts.history) p.set("history", "1");
  }
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

function loadServed() {
  const key = state.key;
  state.served = [];
  api(key, "namespaces")
    .then((body) => {
      if (key !== state.key) return;
      state.served = Array.isArray(body.namespaces) ? body.namespaces : [];
      renderNamespaces();
    })
    .catch(() => {}); // the recent names still serve; a bad key shows on the next call
}

function renderNamespaces() {
  if (state.served === null && state.key) loadServed();
  const served = state.served || [];
  const recent = [...recentNamespaces().filter((n) => !served.includes(n)), ...served].slice(0, 24);
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

function openNamespace(namespace, tab = state.tab) {
  // The namespace's sessions or its facts (a new namespace keeps the tab that was open).
  state.namespace = namespace;
  state.tab = tab;
  state.session = null;
  state.cut = null;
  state.compare = null;
  writeUrl(true);
  route();
}

const PAGE = 200; // sessions asked at a time: "Show more" asks the next page
const FILTER_MS = 250; // the filter asks the server once typing pauses
let filterTimer = 0;

async function loadSessions(more = false) {
  const ns = state.namespace;
  const q = $("session-filter").value.trim();
  if (!more) {
    clear($("sessions"), el("li", { class: "muted pad", text: "Loading sessions…" }));
    $("sessions-count").textContent = "";
  }
  try {
    const query = { limit: PAGE, q: q || null, after: more ? state.sessionsNext : null };
    const body = await api(state.key, `${enc(ns)}/sessions`, query);
    if (ns !== state.namespace || q !== $("session-filter").value.trim()) return; // a newer ask wins
    remember(ns);
    renderNamespaces();
    state.sessions = more ? [...state.sessions, ...body.sessions] : body.sessions;
    state.sessionsNext = body.next;
    state.sessionsTotal = body.total;
    state.sessionsFiltered = Boolean(q);
    renderSessions();
  } catch (err) {
    if (ns !== state.namespace) return;
    state.sessions = [];
    state.sessionsNext = null;
    clear($("sessions"), el("li", { class: "muted pad", text: "No sessions shown." }));
    if (!state.session) clear($("views"), el("p", { class: "empty", text: "Nothing to show: see the message above." }));
    explain(err, `the sessions of ${ns}`);
  }
}

function filterSessions() {
  clearTimeout(filterTimer);
  filterTimer = setTimeout(() => loadSessions(), FILTER_MS);
}

function renderSessions() {
  const shown = state.sessions;
  $("session-filter").hidden = !state.sessionsFiltered && state.sessionsTotal < 8;
  $("sessions-count").textContent = state.sessionsTotal ? String(state.sessionsTotal) : "";
  if (!shown.length) {
    const none = state.sessionsFiltered ? "No session id holds that text." : `No sessions in ${state.namespace} yet.`;
    clear($("sessions"), el("li", { class: "muted pad", text: none }));
    return;
  }
  const items = shown.map((s) =>
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
            el("span", { text: plural(s.events, "event") }),
            el("time", { datetime: s.last_time, title: s.last_time, text: ago(s.last_time) }),
          ),
        ),
      ),
    );
  if (state.sessionsNext) {
    const left = state.sessionsTotal - shown.length;
    const more = el("button", { id: "sessions-more", type: "button", text: `Show more (${left} more)` });
    more.addEventListener("click", () => {
      more.disabled = true;
      more.textContent = "Loading…";
      loadSessions(true);
    });
    items.push(el("li", { class: "pad" }, more));
  }
  clear($("sessions"), items);
}

function openSession(sid, offset = null) {
  state.tab = "sessions";
  state.session = sid;
  state.cut = offset === null ? null : { offset };
  state.compare = null;
  writeUrl(true);
  route();
}

// --- recall: the namespace's best answers to a question ---------------------------------------------

async function recall(query) {
  const ns = state.namespace;
  clear($("recall-hits"), el("li", { class: "muted pad", text: "Searching…" }));
  $("recall-hits").hidden = false;
  try {
    // Recall reads the whole namespace; the session in the path only names whose writes to wait for.
    const sid = state.session || "console";
    const body = await api(state.key, `${sessionPath(ns, sid)}/recall`, { q: query, limit: 10, explain: "true" });
    if (ns !== state.namespace) return;
    clear($("recall-hits"), hitsList(body, openSession));
  } catch (err) {
    if (ns !== state.namespace) return;
    clear($("recall-hits"), el("li", { class: "muted pad", text: "No hits shown." }));
    if (err instanceof ApiError && err.status === 422 && err.field === "memory") {
      notice("This memory cannot search by meaning", `${err.message}. Configure a vector view with search: hybrid.`, "info");
    } else {
      explain(err, "the search");
    }
  }
}

// --- the Facts tab: the namespace's facts, drawn on a timeline -------------------------------------------

function renderTabs() {
  $("ns-tabs").hidden = !state.namespace;
  if (!state.namespace) return;
  for (const tab of $("ns-tabs").querySelectorAll("a.tab")) {
    const facts = tab.dataset.tab === "facts";
    tab.href = `?namespace=${enc(state.namespace)}${facts ? "&tab=facts" : ""}`;
    tab.classList.toggle("active", facts === (state.tab === "facts"));
    tab.setAttribute("aria-current", facts === (state.tab === "facts") ? "page" : "false");
  }
}

async function loadFacts() {
  const ns = state.namespace;
  const ticket = ++state.ticket;
  const asked = state.facts;
  $("facts-subject").value = asked.subject || "";
  $("facts-predicate").value = asked.predicate || "";
  $("facts-history").checked = asked.history;
  clear($("facts-legend"), factsLegend());
  $("facts-pane").classList.add("loading");
  if (state.factsShown === null) clear($("facts-chart"), el("p", { class: "muted pad", text: "Reading the facts view…" }));
  let body;
  try {
    const query = { subject: asked.subject, predicate: asked.predicate, history: asked.history ? "true" : null };
    body = await api(state.key, `${enc(ns)}/facts`, query);
  } catch (err) {
    if (ticket !== state.ticket) return;
    $("facts-pane").classList.remove("loading");
    state.factsShown = null;
    renderFactsHead(null);
    clear($("facts-chart"), el("p", { class: "empty", text: "No facts shown." }));
    if (err instanceof ApiError && err.status === 422 && err.field === "memory") {
      notice("This memory holds no facts", `${err.message}. Add a facts view (type: facts) to the server's config.`, "info");
    } else {
      explain(err, `the facts of ${ns}`);
    }
    return;
  }
  if (ticket !== state.ticket) return;
  $("facts-pane").classList.remove("loading");
  state.factsShown = body.facts;
  renderFacts();
}

function renderFactsHead(count) {
  clear(
    $("facts-head"),
    el("h2", {}, "Facts of ", el("span", { class: "cut-name", text: state.namespace })),
    el("p", {
      class: "muted small",
      text: count === null ? "What the memory learned from the namespace's conversations." : factsSummary(count, state.facts),
    }),
  );
}

function renderFacts() {
  const facts = state.factsShown || [];
  renderFactsHead(facts.length);
  if (!facts.length) {
    const filtered = state.facts.subject || state.facts.predicate;
    const none = filtered ? "No fact matches these filters." : `No facts in ${state.namespace}${state.facts.history ? "" : " hold now"}.`;
    clear($("facts-chart"), el("p", { class: "empty", text: none }));
    return;
  }
  const width = Math.max(640, $("facts-chart").clientWidth - 2);
  clear($("facts-chart"), factsChart(facts, Date.now(), width));
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
      `${plural(state.events.length, "event")} · ${report.topic}${span ? ` · ${span}` : ""}`,
    ),
    notes.length ? el("div", { class: "notes" }, notes) : null,
  );
}

function renderTimeline() {
  const fates = fatesOf(state.events, position); // what became of each message: forgotten, compacted, erased
  const items = state.events.map((e, i) => {
    const kind = kindOf(e);
    const fate = kind === "add" || kind === "erased" ? fates.get(e.offset) : null;
    return el(
      "li",
      {
        class: `ev kind-${kind}${(fate || []).map((f) => ` fated-${f.kind}`).join("")}`,
        data: { offset: e.offset, index: i, kind },
        title: `${e.type}, turn ${i + 1} of the session, at offset ${e.offset} of partition ${e.partition}, ${e.time}`,
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
          el("span", { class: "turn", text: `turn ${i + 1}` }),
          el("span", { class: "off", text: `@${e.offset}` }),
          badge(e, kind),
          kind === "duplicate" ? el("span", { class: "badge kind-duplicate", text: "duplicate" }) : null,
          el("time", { datetime: e.time, text: clock(e.time) }),
          el("span", { class: "marks" }),
        ),
        el("div", { class: "ev-text", text: eventText(e, kind, position) }),
        eventDetail(e, kind),
        fateMarks(fate),
      ),
    );
  });
  clear($("timeline"), items);
  const range = $("cut-range");
  range.max = String(Math.max(0, state.events.length - 1));
}

function position(offset) {
  // A point of the session as people count it, its turn (1 for its first event), with the log's offset.
  const i = state.events.findIndex((e) => e.offset === offset);
  return i < 0 ? `@${offset}` : `turn ${i + 1} (@${offset})`;
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

const SETTLE_MS = 120;
let pending = null;

function pick(index, asCompare = false, settle = 0) {
  const i = Math.max(0, Math.min(state.events.length - 1, index));
  const offset = state.events[i].offset;
  if (asCompare) state.compare = { offset };
  else state.cut = { offset };
  clearTimeout(pending);
  if (!settle) {
    showCut();
    return;
  }
  // Sliding or holding an arrow key: mark the timeline now, ask the server once the cut rests.
  markTimeline();
  writeUrl();
  pending = setTimeout(showCut, settle);
}

function move(step, asCompare = false) {
  const from = indexOfCut(asCompare && state.compare ? state.compare : state.cut);
  pick(from + step, asCompare, SETTLE_MS);
}

function markTimeline() {
  const a = indexOfCut(state.cut);
  const b = state.compare ? indexOfCut(state.compare) : -2;
  const [lo, hi] = b >= 0 ? [Math.min(a, b), Math.max(a, b)] : [-1, -1];
  const timeline = $("timeline");
  timeline.querySelector(".cut-line")?.remove();
  for (const li of timeline.children) {
    const i = Number(li.dataset.index);
    if (Number.isNaN(i)) continue;
    li.classList.toggle("after", i > Math.max(a, b));
    li.classList.toggle("cut", i === a);
    li.classList.toggle("compare", i === b);
    li.classList.toggle("between", lo >= 0 && i > lo && i <= hi);
    // A message's fate past the cut had not happened yet at it.
    for (const fate of li.querySelectorAll(".fate")) fate.classList.toggle("later", Number(fate.dataset.by) > a);
    const marks = li.querySelector(".marks");
    clear(
      marks,
      i === a ? el("span", { class: "mark-a", text: "A" }) : null,
      i === b ? el("span", { class: "mark-b", text: "B" }) : null,
    );
  }
  // The events past the cut (dimmed) start under a label, so the cut reads as a line in the history.
  const last = timeline.querySelector(`li.ev[data-index="${Math.max(a, b)}"]`);
  if (last?.nextElementSibling) {
    last.after(el("li", { class: "cut-line", role: "separator", text: "after the cut" }));
  }
  const current = timeline.querySelector(`li.ev[data-index="${a}"]`);
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
    const i = indexOfCut(cut);
    const e = state.events[i];
    return e ? `turn ${i + 1} · @${cut.offset} · ${clock(e.time)}` : `@${cut.offset}`;
  }
  return `as of ${report.cut?.as_of || cut.as_of}`;
}

function renderViews(report) {
  clear(
    $("views-head"),
    el("h2", {}, "Each view at ", el("span", { class: "cut-name", text: cutLabel(report, state.cut) })),
    el("p", { class: "muted small", text: "What get() returned at this point, folded from the log up to it." }),
  );
  clear($("views"), viewColumns(report.views || {}));
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
  clear($("views"), diffColumns(from.views || {}, to.views || {}));
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
          openNamespace(state.namespace, "sessions"); // its href: the sessions
        },
      }),
    );
  }
  if (state.session) parts.push(el("span", { class: "sep", text: "/" }), el("span", { text: state.session }));
  if (state.tab === "facts") parts.push(el("span", { class: "sep", text: "/" }), el("span", { text: "facts" }));
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
  renderTabs();
  document.body.classList.toggle("facts-mode", state.tab === "facts");
  $("facts-pane").hidden = state.tab !== "facts";
  $("recall-form").hidden = !state.namespace;
  if (!state.namespace) {
    shownNamespace = null;
    clear($("sessions"), el("li", { class: "muted pad", text: "Open a namespace to list its sessions." }));
    $("sessions-count").textContent = "";
  } else if (state.namespace !== shownNamespace) {
    shownNamespace = state.namespace;
    $("session-filter").value = ""; // a filter belongs to the namespace it was typed for
    $("recall-input").value = ""; // and so do a question and its hits
    clear($("recall-hits"));
    $("recall-hits").hidden = true;
    state.factsShown = null;
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
  if (state.tab === "facts") loadFacts();
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
    state.served = null;
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
  $("session-filter").addEventListener("input", filterSessions);
  for (const tab of $("ns-tabs").querySelectorAll("a.tab")) {
    tab.addEventListener("click", (e) => {
      if (e.metaKey || e.ctrlKey || e.shiftKey || e.button !== 0) return;
      e.preventDefault();
      openNamespace(state.namespace, tab.dataset.tab);
    });
  }
  const askFacts = () => {
    const text = (id) => $(id).value.trim() || null;
    state.facts = { subject: text("facts-subject"), predicate: text("facts-predicate"), history: $("facts-history").checked };
    writeUrl(true);
    loadFacts();
  };
  $("facts-form").addEventListener("submit", (e) => {
    e.preventDefault();
    askFacts();
  });
  $("facts-history").addEventListener("change", askFacts);
  let resized = 0;
  window.addEventListener("resize", () => {
    clearTimeout(resized);
    resized = setTimeout(() => state.tab === "facts" && state.factsShown?.length && renderFacts(), 150);
  });
  $("recall-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const query = $("recall-input").value.trim();
    if (query && state.namespace) recall(query);
  });
  $("cut-range").addEventListener("input", (e) => pick(Number(e.target.value), false, SETTLE_MS));
  $("cut-prev").addEventListener("click", () => move(-1));
  $("cut-next").addEventListener("click", () => move(1));
  $("now-toggle").addEventListener("click", () => {
    const on = state.now === null;
    $("now-toggle").setAttribute("aria-pressed", String(on));
    state.now = !on
      ? null
      : api(state.key, `${sessionPath(state.namespace, state.session)}/messages`).catch((err) => {
          state.now = null; // a failed read turns the column off rather than failing every cut after it
          $("now-toggle").setAttribute("aria-pressed", "false");
          explain(err, "what get() returns now");
          return null;
        });
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
  state.served = null;
  takeKeyFromUrl();
  readUrl();
  wire();
  route();
}

start();
