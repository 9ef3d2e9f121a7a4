// One event of the audit report, for people: its kind, its badge and a line of text; its time.

import { el, plural } from "./dom.js";
import { compactedText, forgottenText, subjectErasedText } from "./forget.js";

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

// Forgetting, compaction and erasure (schema v10), and the knowledge events (v9).
const KINDS = {
  MemoryForgotten: "forget",
  SessionCompacted: "compact",
  SubjectErased: "subject-erasure",
  FactsExtracted: "facts",
  FactAsserted: "assert",
  FactRetracted: "fact-retract",
  FactsMerged: "merge",
  FactsUnmerged: "unmerge",
};

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
      return KINDS[e.type] || "other";
  }
}

const KIND_LABEL = {
  clear: "cleared",
  summary: "summary",
  embedding: "embedding",
  retract: "retracted",
  erasure: "erased",
  erased: "erased",
  forget: "forgotten",
  compact: "compacted",
  "subject-erasure": "subject erased",
  facts: "facts",
  assert: "fact asserted",
  "fact-retract": "fact retracted",
  merge: "facts merged",
  unmerge: "merge undone",
  duplicate: "duplicate",
  unknown: "unknown",
};

// A retry's own kind, as if it were not one: what it would have done.
const retried = (e) => kindOf({ ...e, duplicate_of: null });

export function badge(e, kind) {
  if (kind === "duplicate" && e.type !== "MessageAdded") return badge(e, retried(e));
  if (kind === "add" || kind === "erased" || kind === "duplicate") {
    const role = e.payload?.message?.role || "?";
    return el("span", { class: `badge role-${role}`, text: role });
  }
  return el("span", { class: `badge kind-${kind}`, text: KIND_LABEL[kind] || e.type });
}

// --- facts: "Ana lives_in Lisbon (since 2025-05-01)" ----------------------------------------------------

const SHOWN_FACTS = 4;

function fact(f) {
  const since = f.valid_from ? ` (since ${String(f.valid_from).slice(0, 10)})` : "";
  return `${f.subject} ${f.predicate} ${f.value}${since}`;
}

const because = (reason) => (reason ? `: ${reason}` : "");

function factText(p, kind, e, at) {
  switch (kind) {
    case "facts": {
      const facts = p.facts || [];
      const head = `${p.model} read ${plural((p.sources || []).length, "turn")} and found ${facts.length ? plural(facts.length, "fact") : "no facts"}`;
      const more = facts.length > SHOWN_FACTS ? `; and ${facts.length - SHOWN_FACTS} more` : "";
      return facts.length ? `${head}: ${facts.slice(0, SHOWN_FACTS).map(fact).join("; ")}${more}` : head;
    }
    case "assert":
      return `a person asserted ${fact(p)}${because(p.reason)}`;
    case "fact-retract":
      return `took back ${p.subject} ${p.predicate} ${p.value} (fact ${p.fact_id})${because(p.reason)}`;
    case "merge": {
      const ids = p.fact_ids || [];
      return ids.length > 1 ? `merged facts ${ids.join(", ")} into ${ids[0]}` : `merged ${ids[0] || "no facts"}`;
    }
    default: {
      const m = p.merged || {};
      const where = m.topic === e.topic && m.partition === e.partition ? at(m.offset) : `${m.topic}/${m.partition}@${m.offset}`;
      return `undid the merge at ${where}`;
    }
  }
}

// Where another event of the session sits, for people: its turn and offset ("turn 5 (@4)").
const offsetOnly = (offset) => `@${offset}`;

export function eventText(e, kind, at = offsetOnly) {
  const p = e.payload || {};
  if (kind === "duplicate") return `retry of ${at(e.duplicate_of)}, not folded: ${eventText(e, retried(e), at)}`;
  switch (kind) {
    case "add": {
      const m = p.message || {};
      const calls = (m.tool_calls || []).map((c) => `→ ${c.name}(${c.arguments || ""})`).join(" ");
      const text = [m.content, calls].filter(Boolean).join(" ");
      return text || (m.tool_call_id ? `result of ${m.tool_call_id}` : "(empty)");
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
      return `session forgotten: every earlier message is unreadable${because(p.reason)}`;
    case "forget":
      return forgottenText(p, at);
    case "compact":
      return compactedText(p, at);
    case "subject-erasure":
      return subjectErasedText(p);
    case "facts":
    case "assert":
    case "fact-retract":
    case "merge":
    case "unmerge":
      return factText(p, kind, e, at);
    case "unknown":
      return `${p.avro_type || e.type} (written by a newer helix-es)`;
    default:
      return e.description || JSON.stringify(p);
  }
}
