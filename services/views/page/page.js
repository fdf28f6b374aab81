// The views page: the catalog (GET /views, every 5 s) and one view as a live table (its changes
// as Server-Sent Events: the snapshot, then each change). Every text shown is set with
// textContent: rows hold what customers typed.
"use strict";

const MAX_ROWS = 500;
let chosen = null;
let source = null;

function cell(row, text) {
  const td = document.createElement("td");
  td.textContent = text === null || text === undefined ? "" : String(text);
  row.appendChild(td);
  return td;
}

function ago(ms) {
  if (!ms) return "";
  const s = Math.max(0, Math.round((Date.now() - ms) / 1000));
  if (s < 120) return `${s} s ago`;
  if (s < 7200) return `${Math.round(s / 60)} min ago`;
  return s < 172800 ? `${Math.round(s / 3600)} h ago` : `${Math.round(s / 86400)} days ago`;
}

async function loadCatalog() {
  let views;
  try {
    const answer = await fetch("/views");
    views = (await answer.json()).views;
  } catch (err) {
    document.getElementById("status").textContent = `the service does not answer: ${err}`;
    return;
  }
  document.getElementById("status").textContent = `${views.length} views`;
  const body = document.querySelector("#catalog tbody");
  body.replaceChildren();
  for (const view of views) {
    const row = document.createElement("tr");
    row.dataset.view = view.name;
    if (view.name === chosen) row.classList.add("chosen");
    cell(row, view.name);
    const state = view.loading ? `${view.state}; loading` : view.state;
    cell(row, view.replacing ? `${state}; new version ${view.replacing.state}` : state);
    cell(row, view.rows);
    cell(row, (view.key || []).join(", "));
    cell(row, ago(view.freshness && view.freshness.max_rating_time));
    row.addEventListener("click", () => choose(view));
    body.appendChild(row);
    if (view.name === chosen) describe(view);
  }
  if (chosen === null && views.length) choose(views[0]);
}

function describe(view) {
  document.getElementById("view-name").textContent = view.name;
  const fresh = view.freshness || {};
  document.getElementById("view-freshness").textContent =
    `${view.state}; ${view.rows} rows; batch ${fresh.batch_id ?? "-"}; newest rating ${ago(fresh.max_rating_time) || "-"}`;
  const sql = document.getElementById("view-sql");
  sql.hidden = !view.sql;
  sql.textContent = view.sql || "";
  const error = document.getElementById("view-error");
  const problem = view.error || (view.replacing && view.replacing.error);
  error.hidden = !problem;
  error.textContent = view.error ? view.error : problem ? `its new version: ${problem}` : "";
}

function choose(view) {
  chosen = view.name;
  for (const row of document.querySelectorAll("#catalog tbody tr")) {
    row.classList.toggle("chosen", row.dataset.view === chosen);
  }
  document.getElementById("view").hidden = false;
  describe(view);
  follow(view);
}

function follow(view) {
  if (source) source.close();
  const head = document.querySelector("#rows thead");
  const body = document.querySelector("#rows tbody");
  const columns = (view.columns || []).map((c) => c.name);
  const header = document.createElement("tr");
  for (const name of columns) {
    const th = document.createElement("th");
    th.textContent = name;
    header.appendChild(th);
  }
  head.replaceChildren(header);
  body.replaceChildren();
  const rows = new Map();
  const key = document.getElementById("key-filter").value.trim();
  const query = key ? `?key=${encodeURIComponent(key)}` : "";
  source = new EventSource(`/views/${encodeURIComponent(view.name)}/changes${query}`);
  const show = (event, live) => {
    const change = JSON.parse(event.data);
    const id = JSON.stringify(change.key);
    let row = rows.get(id);
    if (change.row === null) {
      if (row) row.remove();
      rows.delete(id);
      return;
    }
    if (!row) {
      if (rows.size >= MAX_ROWS) return;
      row = document.createElement("tr");
      rows.set(id, row);
      body.appendChild(row);
    }
    row.dataset.key = id;
    row.replaceChildren();
    for (const name of columns) cell(row, change.row[name]);
    if (live) {
      row.classList.remove("changed");
      void row.offsetWidth;
      row.classList.add("changed");
    }
  };
  source.addEventListener("snapshot", (event) => show(event, false));
  source.addEventListener("change", (event) => show(event, true));
  source.addEventListener("live", () => {
    document.getElementById("status").textContent = `${view.name}: live`;
  });
  // Refused (503 while the service loads the view, or at its subscriber cap): asked again.
  const asked = source;
  asked.addEventListener("error", () => {
    if (asked.readyState !== EventSource.CLOSED || asked !== source) return;
    document.getElementById("status").textContent = `${view.name}: not served yet; asking again`;
    setTimeout(() => {
      if (asked === source && chosen === view.name) follow(view);
    }, 1000);
  });
  // A new version took over; its columns may differ: follow it from its own description.
  source.addEventListener("replaced", async () => {
    source.close();
    const answer = await fetch("/views");
    const now = (await answer.json()).views.find((v) => v.name === view.name);
    if (now && chosen === view.name) choose(now);
  });
}

document.addEventListener("DOMContentLoaded", () => {
  document.getElementById("key-filter").addEventListener("change", () => {
    const row = document.querySelector(`#catalog tbody tr.chosen`);
    if (row) row.click();
  });
  loadCatalog();
  setInterval(loadCatalog, 5000);
});
