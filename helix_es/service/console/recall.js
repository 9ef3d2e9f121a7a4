// The search box: a question asked of the namespace (GET .../recall), its hits with what each ranker gave.

import { el, plural } from "./dom.js";
import { ago } from "./events.js";

const RANKERS = ["vector", "keyword", "substring"];

// "keyword #1 (5.21) · vector #3 (0.62)": what put the hit where it is, in words a person reads.
export function explainText(explain) {
  if (!explain) return "";
  const parts = RANKERS.filter((name) => explain[name]).map((name) => {
    const { rank, score } = explain[name];
    return `${name} #${rank} (${Number(score).toFixed(2)})`;
  });
  const missing = explain.mode === "hybrid" ? RANKERS.slice(0, 2).filter((name) => !explain[name]) : [];
  for (const name of missing) parts.push(`no ${name} match`);
  return parts.join(" · ");
}

export function hitsList(body, onOpen) {
  const hits = body.hits;
  if (!hits.length) return [el("li", { class: "muted pad", text: "Nothing in this namespace answers that." })];
  const items = hits.map((hit, i) => {
    const open = (e) => {
      if (e.metaKey || e.ctrlKey || e.shiftKey || e.button !== 0) return;
      e.preventDefault();
      onOpen(hit.session_id, hit.position.offset);
    };
    const href = `?namespace=${encodeURIComponent(body.namespace)}&session=${encodeURIComponent(hit.session_id)}&offset=${hit.position.offset}`;
    const who = hit.message.name ? `${hit.message.name} (${hit.message.role})` : hit.message.role;
    return el(
      "li",
      { class: "hit" },
      el(
        "a",
        { href, onclick: open, data: { session: hit.session_id, offset: String(hit.position.offset) } },
        el(
          "span",
          { class: "hit-head" },
          el("b", { class: "hit-rank", text: `${i + 1}` }),
          el("span", { class: "sid", text: hit.session_id }),
          el("span", { class: "muted", text: who }),
          el("time", { datetime: hit.occurred_at, title: hit.occurred_at, text: ago(hit.occurred_at) }),
        ),
        el("span", { class: "hit-text", text: hit.message.content }),
        el(
          "span",
          { class: "hit-why muted" },
          el("span", { class: "hit-score", text: `score ${Number(hit.score).toFixed(3)}` }),
          hit.explain ? ` · ${explainText(hit.explain)}` : "",
        ),
      ),
    );
  });
  items.unshift(el("li", { class: "muted pad", text: `${plural(hits.length, "hit")}, best first` }));
  return items;
}
