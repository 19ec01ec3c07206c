// The console's script: reads /status.json every 2 s and /history.json every 5 s and draws
// them. It only reads: no request it makes changes anything, and every value is drawn as text
// (textContent), never as HTML.
"use strict";

const REFRESH_MS = 2000;
const HISTORY_MS = 5000;
// The data is stale when no fetch brought a newer document for this long (measured on this
// browser's clock only: the server's `at` is compared with the previous `at`, never with the
// browser's time, so a skewed clock cannot make the page look stale or fresh).
const STALE_SECS = 6;

// When (browser time, seconds) a document newer than the one before arrived.
let lastOk = 0;
let lastDoc = null;
let history = { series: {} };

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else e.setAttribute(k, v);
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : String(c));
  }
  return e;
}

function bytes(b) {
  if (b === null || b === undefined || !isFinite(b)) return "unknown";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = Math.abs(b), u = 0;
  while (v >= 1024 && u < units.length - 1) { v /= 1024; u++; }
  return (b < 0 ? "-" : "") + (u === 0 ? v.toFixed(0) : v.toFixed(1)) + " " + units[u];
}

function secs(s) {
  if (s === null || s === undefined || !isFinite(s) || s < 0) return "n/a";
  if (s < 60) return s.toFixed(1) + " s";
  if (s < 3600) return Math.floor(s / 60) + " min " + Math.floor(s % 60) + " s";
  return Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " min";
}

function num(x, digits) {
  return x === null || x === undefined || !isFinite(x) ? "n/a" : x.toFixed(digits);
}

function row(label, ...value) {
  return el("tr", {}, el("th", {}, label), el("td", {}, ...value));
}

function badge(text, cls) {
  return el("span", { class: "badge " + cls }, text.toUpperCase());
}

// A small line chart of one field of a history series.
function chart(title, points, field, fmt) {
  const w = 300, h = 60, pad = 2;
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("width", w);
  svg.setAttribute("height", h);
  svg.setAttribute("viewBox", `0 0 ${w} ${h}`);
  const values = (points || []).map(p => p[field]);
  const max = Math.max(1e-9, ...values);
  if (values.length > 1) {
    const t0 = points[0].t, t1 = points[points.length - 1].t;
    const span = Math.max(1, t1 - t0);
    const coords = points.map(p =>
      `${(pad + (p.t - t0) / span * (w - 2 * pad)).toFixed(1)},${(h - pad - p[field] / max * (h - 2 * pad)).toFixed(1)}`);
    const line = document.createElementNS(ns, "polyline");
    line.setAttribute("points", coords.join(" "));
    line.setAttribute("fill", "none");
    line.setAttribute("stroke", "#2563eb");
    line.setAttribute("stroke-width", "1.5");
    svg.append(line);
  }
  const last = values.length ? fmt(values[values.length - 1]) : "no samples yet";
  const label = el("div", {}, `${title}: ${last}` + (values.length > 1 ? ` (max ${fmt(max)})` : ""));
  return el("div", { class: "chart" }, label, svg);
}

function charts(key, specs) {
  const points = (history.series || {})[key] || [];
  const span = points.length > 1 ? secs(points[points.length - 1].t - points[0].t) : "none yet";
  return el("div", {},
    el("div", { class: "muted" }, `History (in memory, sampled every ${history.interval_secs || 5} s, ` +
      `last ${span} of at most 1 h)`),
    el("div", { class: "charts" }, ...specs.map(([t, f, fmt]) => chart(t, points, f, fmt))));
}

function forecast(s) {
  const f = s.loss_forecast_secs;
  if (f === null || f === undefined) return "unknown (no reading yet)";
  if (f < 0) return "none: the slot's headroom does not shrink";
  return `lost in ~${secs(f)} at the current rate`;
}

function retained(s) {
  const limit = s.max_slot_wal_keep_size_bytes;
  const parts = [bytes(s.retained_wal_bytes)];
  parts.push(limit === null || limit === undefined ? " (max_slot_wal_keep_size unlimited)"
    : ` of max_slot_wal_keep_size ${bytes(limit)}`);
  if (s.safe_wal_size_bytes !== null && s.safe_wal_size_bytes !== undefined)
    parts.push(`, safe_wal_size ${bytes(s.safe_wal_size_bytes)}`);
  if (s.wal_status) parts.push(`, wal_status ${s.wal_status}`);
  const cell = [parts.join("")];
  if (limit > 0 && s.retained_wal_bytes !== null) {
    const frac = Math.min(1, s.retained_wal_bytes / limit);
    const bar = el("div", { class: "bar" + (frac > 0.8 ? " high" : "") }, el("div", {}));
    bar.firstChild.style.width = (frac * 100).toFixed(1) + "%";
    cell.push(bar);
  }
  return cell;
}

function alertLines(alerts) {
  const firing = (alerts || []).filter(a => a.level >= 1);
  if (!firing.length) return [el("div", { class: "alert" }, "none firing")];
  return firing.map(a => {
    const level = a.level >= 2 ? "critical" : "warning";
    return el("div", { class: "alert " + level }, badge(level, level), " ", a.alert,
      a.summary ? ": " + a.summary : "", a.since ? ` (since ${a.since})` : "");
  });
}

function relaySource(s) {
  const name = s.name || "source";
  const holder = s.state === "streaming" ? "this instance"
    : s.slot_held_elsewhere ? "another instance (this one is passive)" : "no instance of this process";
  return el("section", { class: "source", "data-source": name },
    el("h2", {}, name, badge(s.state, s.state)),
    s.why ? el("p", { class: "why" }, s.why) : null,
    el("table", {},
      row("Slot held by", holder),
      row("Confirmed position", s.confirmed_lsn || "none", s.server_lsn ? ` (server WAL at ${s.server_lsn})` : ""),
      row("Lag", `${bytes(s.lag_bytes)}, ${secs(s.lag_secs)} behind`),
      row("Retained WAL", ...retained(s)),
      row("Forecast", forecast(s)),
      row("Events", `${num(s.events_per_sec, 1)} events/s, ${num(s.events_produced, 0)} acknowledged since start`),
      row("In flight", `${num(s.inflight_events, 0)} records (${bytes(s.inflight_bytes)}), ` +
        `${num(s.inflight_transactions, 0)} transactions`),
      row("Last confirmation", s.last_confirmation_age_secs === null || s.last_confirmation_age_secs === undefined
        ? "none since start" : `${secs(s.last_confirmation_age_secs)} ago`),
      row("Heartbeat age", secs(s.heartbeat_age_secs)),
      row("Oldest outbox row", s.oldest_row_age_secs === null || s.oldest_row_age_secs === undefined
        ? "not measured (needs created_at_column on the outbox table)" : secs(s.oldest_row_age_secs)),
      row("Alerts", ...alertLines(s.alerts))),
    charts(s.name || "", [
      ["Lag", "a", bytes], ["Retained WAL", "b", bytes], ["Events/s", "rate", x => num(x, 1)]]));
}

function renderRelay(doc) {
  document.getElementById("title").textContent = "outbox-relay";
  document.getElementById("subtitle").textContent =
    `relay ${doc.version}, ${doc.sources.length} source${doc.sources.length === 1 ? "" : "s"}`;
  return doc.sources.map(relaySource);
}

function renderApplier(doc) {
  document.getElementById("title").textContent = "outbox-relay applier";
  document.getElementById("subtitle").textContent =
    `consumer ${doc.consumer}, group ${doc.group}, version ${doc.version}`;
  const halted = doc.partitions.filter(p => p.halted).length;
  const parts = el("table", { class: "grid" },
    el("tr", {}, ...["Partition", "Position", "Log end", "Lag", "State", "Last error"].map(h => el("th", {}, h))),
    ...doc.partitions.map(p => el("tr", { class: "partition" },
      el("td", {}, `${p.topic}[${p.partition}]`),
      el("td", {}, p.position ?? "none"),
      el("td", {}, p.log_end ?? "?"),
      el("td", {}, p.lag ?? "?"),
      el("td", {}, p.halted ? badge("halted", "halted")
        : p.retrying ? badge("retrying", "retrying") : badge("applying", "applying"),
        p.halted ? " " + p.halted : ""),
      el("td", { class: "last-error" }, p.last_error
        ? `${p.last_error} (${secs(doc.at - p.last_error_at)} ago)` : "none"))));
  const partitions = el("section", { id: "partitions" },
    el("h2", {}, "Partitions", halted ? badge(`${halted} halted`, "halted") : null),
    doc.joined ? null : el("p", { class: "why" }, "not in the consumer group yet"),
    doc.partitions.length ? parts : el("p", { class: "muted" }, "no partition assigned to this instance"),
    el("p", {}, `${num(doc.records_per_sec, 1)} records/s`),
    charts(doc.consumer, [["Lag (records)", "a", x => num(x, 0)],
      ["Halted partitions", "b", x => num(x, 0)], ["Records/s", "rate", x => num(x, 1)]]));
  const st = doc.store;
  const dead = el("section", { id: "dead-letters" }, el("h2", {}, "Dead letters and claims"));
  if (doc.store_error) dead.append(el("p", { class: "why" }, "database: " + doc.store_error));
  if (!st) {
    dead.append(el("p", { class: "muted" }, "not read yet"));
  } else {
    const total = st.dead_letters.reduce((n, t) => n + t.count, 0);
    dead.append(el("p", {}, `${total} dead letter${total === 1 ? "" : "s"}; ` +
      `${st.claims} claims (oldest ${secs(st.oldest_claim_secs)} ago)`));
    for (const t of st.dead_letters) {
      dead.append(el("h3", {}, `${t.topic}: ${t.count}`),
        el("table", { class: "grid" },
          el("tr", {}, ...["Partition", "Offset", "Event type", "Error", "Failed at"].map(h => el("th", {}, h))),
          ...t.newest.map(d => el("tr", {}, el("td", {}, d.partition), el("td", {}, d.offset),
            el("td", {}, d.event_type ?? ""), el("td", {}, d.error), el("td", {}, d.failed_at)))),
        el("p", {}, "Re-drive them from a shell (this page runs nothing): ", el("code", {}, t.redrive)));
    }
  }
  return [partitions, dead];
}

function render() {
  if (!lastDoc) return;
  const sections = lastDoc.kind === "applier" ? renderApplier(lastDoc) : renderRelay(lastDoc);
  document.getElementById("content").replaceChildren(...sections);
}

function freshness() {
  const f = document.getElementById("freshness");
  const quiet = Date.now() / 1000 - lastOk;
  const stale = quiet > STALE_SECS;
  f.classList.toggle("stale", stale && (lastDoc !== null || performance.now() > STALE_SECS * 1000));
  document.body.dataset.stale = stale ? "yes" : "no";
  if (!lastDoc) {
    f.textContent = performance.now() > STALE_SECS * 1000 ? "STALE: no answer from the process" : "loading…";
    return;
  }
  const at = new Date(lastDoc.at * 1000).toLocaleTimeString();
  f.textContent = stale ? `STALE: no update since ${at} (${secs(quiet)} ago)` : `live, updated ${at}`;
}

async function refresh() {
  let doc = null;
  try {
    const r = await fetch("/status.json", { cache: "no-store" });
    if (!r.ok) throw new Error("HTTP " + r.status);
    doc = await r.json();
  } catch (e) {
    // Stale: the indicator says so; the last data stays on screen.
  }
  if (doc) {
    if (!lastDoc || doc.at > lastDoc.at) lastOk = Date.now() / 1000;
    lastDoc = doc;
  }
  freshness();
  // Outside the try: a drawing error is an uncaught error (the browser tests look for them).
  if (doc) render();
}

async function refreshHistory() {
  try {
    const r = await fetch("/history.json", { cache: "no-store" });
    if (r.ok) history = await r.json(); else return;
  } catch (e) { return; /* shown by the status fetch's freshness */ }
  render();
}

refresh();
refreshHistory();
setInterval(refresh, REFRESH_MS);
setInterval(refreshHistory, HISTORY_MS);
