// Columns of messages: one view's get() at a cut, or what changed in it between two cuts.

import { el, plural } from "./dom.js";

export function messageCard(m, change = null) {
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

export function column(name, count, body, extra = null) {
  return el(
    "section",
    { class: "view", data: { view: name } },
    el("header", {}, el("h3", { title: name, text: name }), el("div", { class: "sub" }, el("span", { class: "count", text: count }), extra)),
    body,
  );
}

export function nowColumn(messages) {
  // Served by the memory's own view (Redis, Postgres, in process), not folded here: a check on it.
  const body = messages.length
    ? el("ol", { class: "msgs" }, messages.map((m) => messageCard(m)))
    : el("p", { class: "empty", text: "empty now" });
  const view = column("get() now", plural(messages.length, "message"), body);
  view.classList.add("now");
  return view;
}

const identity = (m) => JSON.stringify([m.role, m.content, m.name, m.tool_calls, m.tool_call_id, m.metadata]);

export function diff(before, after) {
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

export function viewColumns(views) {
  // One column per view (each part of a composite), in the config's order.
  const entries = Object.entries(views);
  if (!entries.length) return [el("p", { class: "empty", text: "This config has no views to fold." })];
  return entries.map(([name, messages]) =>
    column(
      name,
      plural(messages.length, "message"),
      messages.length
        ? el("ol", { class: "msgs" }, messages.map((m) => messageCard(m)))
        : el("p", { class: "empty", text: "empty at this point" }),
    ),
  );
}

export function diffColumns(before, after) {
  // Per view, what the later point added and what it no longer holds; unchanged messages are counted.
  const names = [...new Set([...Object.keys(before), ...Object.keys(after)])];
  return names.map((name) => {
    const ops = diff(before[name] || [], after[name] || []);
    const added = ops.filter(([op]) => op === "added").length;
    const removed = ops.filter(([op]) => op === "removed").length;
    const changed = ops.filter(([op]) => op !== "kept");
    const body = changed.length
      ? el("ol", { class: "msgs" }, changed.map(([op, msg]) => messageCard(msg, op)))
      : el("p", { class: "empty", text: "no change between the two points" });
    const delta = el(
      "span",
      { class: "delta" },
      el("span", { class: "plus", text: `+${added}` }),
      el("span", { class: "minus", text: `−${removed}` }),
    );
    return column(name, `${ops.length - added - removed} unchanged`, body, delta);
  });
}
