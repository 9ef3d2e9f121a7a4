// One event of the audit report, for people: its kind, its badge and a line of text; its time.

import { el } from "./dom.js";

export function ago(iso) {
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return "";
  const s = Math.round((Date.now() - t) / 1000);
  if (s < 60) return "just now";
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
  return iso.slice(0, 10);
}

export function clock(iso) {
  // UTC as the log stamps it, to the millisecond: several events often share a second.
  const m = /T(\d\d:\d\d:\d\d)(\.\d{1,3})?/.exec(iso || "");
  return m ? m[1] + (m[2] || ".").padEnd(4, "0") : "";
}

export function kindOf(e) {
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

export function badge(e, kind) {
  if (kind === "add" || kind === "erased" || kind === "duplicate") {
    const role = e.payload?.message?.role || "?";
    return el("span", { class: `badge role-${role}`, text: role });
  }
  return el("span", { class: `badge kind-${kind}`, text: KIND_LABEL[kind] || e.type });
}

// Where another event of the session sits, for people: its turn and offset ("turn 5 (@4)").
const offsetOnly = (offset) => `@${offset}`;

export function eventText(e, kind, at = offsetOnly) {
  const p = e.payload || {};
  switch (kind) {
    case "add":
    case "duplicate": {
      const m = p.message || {};
      const calls = (m.tool_calls || []).map((c) => `→ ${c.name}(${c.arguments || ""})`).join(" ");
      const text = [m.content, calls].filter(Boolean).join(" ");
      const prefix = kind === "duplicate" ? `retry of ${at(e.duplicate_of)}, not folded: ` : "";
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
      const what = p.retracts_offset !== null && p.retracts_offset !== undefined ? `the message at ${at(p.retracts_offset)}` : "nothing (no message left)";
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
