// Forgetting, compaction and erasure on the timeline (schema v10), for people: the rows of
// MemoryForgotten, SessionCompacted and SubjectErased, and what became of each message they name
// (its fates: forgotten by a policy, compacted into a summary, erased), each naming the event that did it.

import { el, plural } from "./dom.js";

const SHOWN = 6; // positions or ids listed before "and N more"
const ROUND_MS = 60_000; // a policy's events this close together are one round: one mark on a message

// "2026-12-07 20:51:17 UTC": when something happened, to the second, as the log stamps it.
export function stamp(iso) {
  const m = /^(\d{4}-\d\d-\d\d)T(\d\d:\d\d:\d\d)/.exec(iso || "");
  return m ? `${m[1]} ${m[2]} UTC` : iso || "";
}

function listed(items, show) {
  const more = items.length > SHOWN ? ` and ${items.length - SHOWN} more` : "";
  return items.slice(0, SHOWN).map(show).join(", ") + more;
}

// "max_age (max_age=720h)", "erasure (erase-1)": the policy and the reason it recorded.
const why = (p) => `${p.policy}${p.reason ? ` (${p.reason})` : ""}`;

export function forgottenText(p, at) {
  const what = [];
  if (p.session) what.push("the whole session");
  const offsets = p.offsets || [];
  if (offsets.length) what.push(`${plural(offsets.length, "message")} (${listed(offsets, at)})`);
  const ids = p.ids || [];
  if (ids.length) what.push(`${plural(ids.length, "item")} (${listed(ids, String)})`);
  const views = (p.views || []).join(", ") || "no view";
  return `${why(p)} took ${what.join(" and ") || "nothing"} out of ${views}; the log keeps them`;
}

export function compactedText(p, at) {
  const how = [p.model && `model ${p.model}`, p.reason && (p.reason === "request" ? "on request" : p.reason)];
  const by = how.filter(Boolean).join(", ");
  return `${p.view}: ${plural(p.covers, "message")}, ${at(p.first)} to ${at(p.last)}, compacted into this summary${by ? ` (${by})` : ""}`;
}

export function subjectErasedText(p) {
  return `erasure ${p.request} of subject ${p.subject}; its receipt:`;
}

// --- the receipt: JSON text (helix_es.history.subject_erasure: subject, sessions, views, key_ids, ...) -----

function readReceipt(text) {
  try {
    const receipt = JSON.parse(text);
    return receipt && typeof receipt === "object" && !Array.isArray(receipt) ? receipt : null;
  } catch {
    return null;
  }
}

function count(value) {
  if (Array.isArray(value)) return value.length;
  if (value && typeof value === "object") return Object.keys(value).length;
  return Number(value) || 0;
}

// A view's part in the erasure: "long-term (1 session, 3 messages)", "facts (2 facts)".
function viewText(name, v) {
  if (!v || typeof v !== "object") return name;
  const what = [
    count(v.sessions) && plural(count(v.sessions), "session"),
    count(v.messages) && plural(count(v.messages), "message"),
    count(v.ids) && plural(count(v.ids), v.kind === "facts" ? "fact" : "item"),
    count(v.kept) && `${count(v.kept)} kept: it forgets whole sessions only`,
  ].filter(Boolean);
  return what.length ? `${name} (${what.join(", ")})` : name;
}

// A list of names, or a map of them: "s-1, s-2"; "conversation (1 session), facts (2 facts)".
function names(value, show = (name) => name) {
  const entries = Array.isArray(value) ? value.map((v) => [String(v)]) : Object.entries(value || {});
  return entries.length ? listed(entries, ([name, v]) => show(name, v)) : "none";
}

// {session: [offsets]}: "3 in 2 sessions".
function elsewhere(messages) {
  if (Array.isArray(messages)) return String(messages.length);
  const lists = Object.values(messages);
  return `${lists.reduce((n, offsets) => n + count(offsets), 0)} in ${plural(lists.length, "session")}`;
}

function receiptLines(text) {
  const r = readReceipt(text);
  if (!r) return [el("div", { class: "receipt-line muted", text: `receipt (not JSON): ${String(text).slice(0, 200)}` })];
  const line = (label, value) => el("div", { class: "receipt-line" }, el("span", { class: "muted", text: `${label}: ` }), value);
  const lines = [];
  if (r.sessions !== undefined) lines.push(line(plural(count(r.sessions), "session"), names(r.sessions)));
  if (count(r.not_shredded)) lines.push(line("not shredded, readable on the log", names(r.not_shredded)));
  if (count(r.messages)) lines.push(line("messages naming the subject elsewhere", elsewhere(r.messages)));
  if (count(r.facts)) lines.push(line("facts about the subject", String(count(r.facts))));
  if (r.views !== undefined) lines.push(line("views", names(r.views, viewText)));
  if (r.key_ids !== undefined) lines.push(line("keys destroyed", String(count(r.key_ids))));
  if (count(r.undecodable)) lines.push(line("records not decodable", String(count(r.undecodable))));
  if (r.log) lines.push(line("log", String(r.log)));
  if (r.abridged) lines.push(line("abridged", `the log keeps its short form (sha256 ${String(r.sha256 || "").slice(0, 12)}…)`));
  const v = r.verification;
  if (v === null) lines.push(line("verification", "not run"));
  else if (v !== undefined) {
    const passed = typeof v === "object" ? Boolean(v.passed) : Boolean(v);
    const verdict = `verification ${passed ? "passed" : "failed"}`;
    lines.push(el("div", { class: "receipt-line" }, el("span", { class: `verdict ${passed ? "passed" : "failed"}`, text: verdict })));
    for (const failure of (typeof v === "object" && v.failures) || []) lines.push(el("div", { class: "receipt-line failure", text: String(failure) }));
  }
  return lines;
}

// What a row shows under its line: a compaction's summary, an erasure's receipt; null for other rows.
export function eventDetail(e, kind) {
  const p = e.payload || {};
  if (kind === "compact") return el("div", { class: "ev-detail summary-text", text: p.summary || "(an empty summary)" });
  if (kind === "subject-erasure") return el("div", { class: "ev-detail receipt" }, receiptLines(p.receipt));
  return null;
}

// --- fates: what became of each message --------------------------------------------------------------

// For a session's events (oldest first), the marks of each of its adds, by offset: [{kind, text, title, by}],
// `by` the index of the (first) event that did it. Retries are left out: no view folds them.
export function fatesOf(events, at) {
  const fates = new Map();
  const mark = (offset, fate) => fates.set(offset, [...(fates.get(offset) || []), fate]);
  const held = []; // the adds since the last clear or erasure: what a whole-session forgetting takes
  const erasure = events.findLast((e) => e.type === "SessionErased" && e.duplicate_of == null);
  events.forEach((e, by) => {
    if (e.duplicate_of !== null && e.duplicate_of !== undefined) return;
    const p = e.payload || {};
    switch (e.type) {
      case "MessageAdded":
        held.push(e.offset);
        if (e.erased && erasure) {
          const reason = erasure.payload?.reason ? `: ${erasure.payload.reason}` : "";
          const title = `SessionErased at ${at(erasure.offset)}: its key was destroyed, the log holds only sealed bytes`;
          mark(e.offset, { kind: "erased", text: `erased at ${stamp(erasure.time)}${reason}`, title, by: events.indexOf(erasure) });
        }
        break;
      case "MemoryCleared":
      case "SessionErased":
        held.length = 0;
        break;
      case "MemoryForgotten": {
        const title = `MemoryForgotten at ${at(e.offset)}; the log keeps the message`;
        const t = Date.parse(e.time);
        for (const offset of new Set([...(p.session ? held : []), ...(p.offsets || [])])) {
          // One mark for the views one round of a policy took it out of: "… · left conversation, long-term".
          let same = (fates.get(offset) || []).find((f) => f.kind === "forgotten" && f.why === why(p) && t - f.t < ROUND_MS);
          if (!same) mark(offset, (same = { kind: "forgotten", why: why(p), t, views: [], title, by }));
          same.views.push(...(p.views || []));
          same.text = `forgotten by ${same.why} at ${stamp(events[same.by].time)} · left ${same.views.join(", ") || "no view"}`;
        }
        break;
      }
      case "SessionCompacted":
        for (const offset of held.filter((o) => o >= p.first && o <= p.last)) {
          // compacted again with its summary: one mark per view, "…@9, then @14"
          const before = (fates.get(offset) || []).find((f) => f.kind === "compacted" && f.view === p.view);
          if (before) {
            before.text += `, then @${e.offset}`;
          } else {
            const title = `SessionCompacted at ${at(e.offset)}; the log keeps the message (expand reads it back)`;
            mark(offset, { kind: "compacted", view: p.view, text: `compacted into summary @${e.offset} in ${p.view}`, title, by });
          }
        }
        break;
    }
  });
  return fates;
}

export function fateMarks(fates) {
  if (!fates?.length) return null;
  return el(
    "div",
    { class: "fates" },
    fates.map((f) => el("span", { class: `fate fate-${f.kind}`, title: f.title, data: { by: f.by }, text: f.text })),
  );
}
