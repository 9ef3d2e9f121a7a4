// The Facts tab: a namespace's facts (GET /v1/{namespace}/facts) as a timeline picture. One row per
// fact, grouped by subject and predicate: a bar for when it held in the world (valid time, open to
// now), a thin bar under it for when the memory held it (known time, from the marker on). A
// superseded fact ends where the next value began; a retracted one is grey and struck through.
// SVG elements and text nodes only: nothing from the server is ever parsed as markup.

import { el, plural } from "./dom.js";

const NS = "http://www.w3.org/2000/svg";
const LABEL = 210; // the value's column, left of the bars
const PAD = 18; // right of the bars
const AXIS = 30; // the time axis on top
const GROUP = 24; // a subject and predicate's heading row
const ROW = 30; // one fact
const MAX_LABEL = 26; // characters of a value shown; the row's tooltip has all of it

const MINUTE = 60_000;
const HOUR = 60 * MINUTE;
const DAY = 24 * HOUR;
// Tick steps, shortest first: [milliseconds, label of a tick at that step].
const STEPS = [
  [MINUTE, (d) => d.toISOString().slice(11, 16)],
  [10 * MINUTE, (d) => d.toISOString().slice(11, 16)],
  [HOUR, (d) => d.toISOString().slice(11, 16)],
  [6 * HOUR, (d) => d.toISOString().slice(5, 16).replace("T", " ")],
  [DAY, (d) => d.toISOString().slice(0, 10)],
  [7 * DAY, (d) => d.toISOString().slice(0, 10)],
  [30 * DAY, (d) => d.toISOString().slice(0, 7)],
  [91 * DAY, (d) => d.toISOString().slice(0, 7)],
  [365 * DAY, (d) => d.toISOString().slice(0, 4)],
  [5 * 365 * DAY, (d) => d.toISOString().slice(0, 4)],
  [25 * 365 * DAY, (d) => d.toISOString().slice(0, 4)],
  [100 * 365 * DAY, (d) => d.toISOString().slice(0, 4)],
  [1000 * 365 * DAY, (d) => d.toISOString().slice(0, 4)],
];

function svg(tag, attrs = {}, ...children) {
  const node = document.createElementNS(NS, tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "data") for (const [k, v] of Object.entries(value)) node.dataset[k] = v;
    else node.setAttribute(name, String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

// A fact's state, which its row shows: retracted (the memory dropped it), superseded, or holding now.
export function kindOfFact(f) {
  if (f.known_to !== null) return "retracted";
  if (f.valid_to !== null) return "superseded";
  return "current";
}

function short(text) {
  const one = text.replace(/\s+/g, " ");
  return one.length > MAX_LABEL ? `${one.slice(0, MAX_LABEL - 1)}…` : one;
}

function when(iso) {
  return iso === null ? "now" : `${iso.slice(0, 19).replace("T", " ")} UTC`;
}

// Ticks of the axis: a round step that gives at most about one tick per 64 pixels.
function ticks(t0, t1, width) {
  const most = Math.max(2, Math.floor(width / 64));
  const [step, label] = STEPS.find(([ms]) => (t1 - t0) / ms <= most) || STEPS[STEPS.length - 1];
  const out = [];
  let t = step >= 30 * DAY ? roundMonths(t0, step) : Math.ceil(t0 / step) * step;
  while (t <= t1 && out.length < 60) {
    out.push([t, label(new Date(t))]);
    t = step >= 30 * DAY ? addMonths(t, Math.round(step / (30.4 * DAY))) : t + step;
  }
  return out;
}

function roundMonths(t, step) {
  // The first month (or year) boundary at or after t, in UTC.
  const d = new Date(t);
  const months = Math.round(step / (30.4 * DAY));
  let y = d.getUTCFullYear();
  let m = d.getUTCMonth() + (d.getUTCDate() > 1 || d.getUTCHours() || d.getUTCMinutes() ? 1 : 0);
  m = Math.ceil(m / Math.min(months, 12)) * Math.min(months, 12);
  y += Math.floor(m / 12);
  m %= 12;
  if (months > 12) y = Math.ceil(y / (months / 12)) * (months / 12);
  return Date.UTC(y, months > 12 ? 0 : m, 1);
}

function addMonths(t, months) {
  const d = new Date(t);
  return Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + months, 1);
}

// Facts in rows under their subject and predicate, in the order the server gave (valid time).
function grouped(facts) {
  const groups = new Map();
  for (const f of facts) {
    const key = `${f.subject.toLowerCase()}\u0000${f.predicate}`;
    if (!groups.has(key)) groups.set(key, { subject: f.subject, predicate: f.predicate, facts: [] });
    groups.get(key).facts.push(f);
  }
  return [...groups.values()];
}

// The picture: `facts` as the API answers them, `now` in ms, `width` in pixels.
export function factsChart(facts, now, width) {
  const times = facts.flatMap((f) => [f.valid_from, f.known_from, f.valid_to, f.known_to].filter(Boolean)).map(Date.parse);
  let t0 = Math.min(now, ...times);
  let t1 = Math.max(now, ...times);
  if (t1 - t0 < MINUTE) t0 -= 30 * MINUTE;
  const margin = (t1 - t0) * 0.03;
  t0 -= margin;
  t1 += margin;
  const groups = grouped(facts);
  const height = AXIS + groups.length * GROUP + facts.length * ROW + 8;
  const span = width - LABEL - PAD;
  const x = (t) => LABEL + ((t - t0) / (t1 - t0)) * span;
  const chart = svg("svg", {
    class: "facts-svg",
    width,
    height,
    viewBox: `0 0 ${width} ${height}`,
    role: "img",
    "aria-label": `${plural(facts.length, "fact")}: valid time as bars, known time as thin bars under them`,
  });
  // The axis: round times, a line down through every row, and now.
  const axis = svg("g", { class: "axis" });
  for (const [t, label] of ticks(t0, t1, span)) {
    axis.append(svg("line", { class: "grid", x1: x(t), x2: x(t), y1: AXIS - 6, y2: height }));
    const clear = x(t) < x(now) - 48 || x(t) > x(now) + 24; // "now" keeps its label
    if (clear) axis.append(svg("text", { class: "tick", x: x(t), y: AXIS - 11, "text-anchor": "middle" }, label));
  }
  axis.append(
    svg("line", { class: "now", x1: x(now), x2: x(now), y1: AXIS - 6, y2: height }),
    svg("text", { class: "now-label", x: x(now) - 3, y: AXIS - 11, "text-anchor": "end" }, "now"),
  );
  chart.append(axis);
  let y = AXIS;
  for (const group of groups) {
    chart.append(
      svg(
        "g",
        { class: "group", data: { subject: group.subject, predicate: group.predicate } },
        svg("rect", { class: "group-band", x: 0, y, width, height: GROUP }),
        svg("text", { class: "group-label", x: 8, y: y + 16 }, svg("tspan", { class: "subject" }, short(group.subject)), "  ", group.predicate),
      ),
    );
    y += GROUP;
    for (const f of group.facts) {
      chart.append(factRow(f, y, x, now));
      y += ROW;
    }
  }
  return chart;
}

function factRow(f, y, x, now) {
  const kind = kindOfFact(f);
  const by = f.model === null ? "person" : "model";
  const validEnd = f.valid_to === null ? now : Date.parse(f.valid_to);
  const knownEnd = f.known_to === null ? now : Date.parse(f.known_to);
  const vx = x(Date.parse(f.valid_from));
  const kx = x(Date.parse(f.known_from));
  const vw = Math.max(2, x(validEnd) - vx);
  const kw = Math.max(2, x(knownEnd) - kx);
  const title = [
    `${f.subject} ${f.predicate} ${f.value}`,
    `valid ${when(f.valid_from)} → ${when(f.valid_to)}`,
    `known ${when(f.known_from)} → ${when(f.known_to)}`,
    `${f.model === null ? "asserted by a person" : `extracted by ${f.model}`} · id ${f.id}`,
    kind === "retracted" ? "retracted: the memory no longer holds it" : kind === "superseded" ? "superseded by a newer value" : "",
  ];
  const row = svg(
    "g",
    { class: `fact ${kind} by-${by}`, data: { id: f.id, kind, value: f.value } },
    svg("title", {}, title.filter(Boolean).join("\n")),
    svg("rect", { class: "row-band", x: 0, y, width: "100%", height: ROW }),
    svg("text", { class: "value", x: 16, y: y + 15 }, short(f.value)),
    svg("text", { class: "by", x: 16, y: y + 26 }, f.model === null ? "person" : f.model),
    svg("rect", { class: "valid", x: vx, y: y + 5, width: vw, height: 12, rx: 3 }),
    svg("rect", { class: "known", x: kx, y: y + 21, width: kw, height: 4, rx: 2 }),
    svg("circle", { class: "known-from", cx: kx, cy: y + 23, r: 3.5 }),
  );
  if (f.valid_to !== null) row.append(svg("line", { class: "valid-end", x1: vx + vw, x2: vx + vw, y1: y + 2, y2: y + 20 }));
  else row.append(svg("path", { class: "open-end", d: `M${vx + vw} ${y + 5} l6 6 l-6 6 z` })); // holds on, past now
  if (f.known_to !== null) {
    row.append(
      svg("line", { class: "strike", x1: vx - 2, x2: vx + vw + 2, y1: y + 11, y2: y + 11 }),
      svg("line", { class: "known-end", x1: kx + kw, x2: kx + kw, y1: y + 18, y2: y + 28 }),
    );
  }
  return row;
}

export function factsLegend() {
  const swatch = (cls) => {
    const box = svg("svg", { class: "swatch", width: 30, height: 14, viewBox: "0 0 30 14", "aria-hidden": "true" });
    if (cls === "known") box.append(svg("rect", { class: "known", x: 2, y: 5, width: 26, height: 4, rx: 2 }));
    else box.append(svg("g", { class: `fact ${cls}` }, svg("rect", { class: "valid", x: 2, y: 1, width: 26, height: 12, rx: 3 })));
    if (cls === "retracted") box.append(svg("line", { class: "strike", x1: 0, x2: 30, y1: 7, y2: 7 }));
    return box;
  };
  const item = (cls, text) => el("span", { class: "legend-item" }, swatch(cls), text);
  return [
    item("current by-model", "held in the world (valid time), drawn by the model"),
    item("current by-person", "asserted by a person"),
    item("superseded by-model", "superseded"),
    item("retracted", "retracted"),
    item("known", "known to the memory (known time)"),
  ];
}

export function factsSummary(count, filters) {
  const what = filters.history ? "every fact, superseded and retracted ones too" : "holding now";
  const only = [filters.subject && `subject ${filters.subject}`, filters.predicate && `predicate ${filters.predicate}`].filter(Boolean);
  return `${plural(count, "fact")}, ${what}${only.length ? ` · ${only.join(", ")}` : ""}`;
}
