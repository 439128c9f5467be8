// corral dashboard: polls the service API with the bearer token and draws the cluster, the
// jobs and one job's page. No libraries, no network beyond this service: works offline.
"use strict";

const POLL_MS = 1000;
const TOKEN_KEY = "corral-token";
const PAGE_SIZE = 100;  // jobs in a page of the job table
const COLORS = ["#1e88e5", "#43a047", "#e53935", "#8e24aa", "#fb8c00", "#00897b", "#6d4c41",
                "#3949ab", "#c0ca33", "#d81b60", "#00acc1", "#5e35b1"];
let timer = null;

function $(id) { return document.getElementById(id); }

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v; else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}

function colorOf(jobId) {
  const n = parseInt(String(jobId).replace(/\D/g, ""), 10) || 0;
  return COLORS[n % COLORS.length];
}

function fmt(v, digits) {
  if (v === null || v === undefined) return "-";
  return typeof v === "number" ? v.toFixed(digits === undefined ? 0 : digits) : String(v);
}

function duration(s) {
  if (s === null || s === undefined) return "-";
  if (s < 120) return s.toFixed(0) + " s";
  if (s < 7200) return (s / 60).toFixed(1) + " min";
  return (s / 3600).toFixed(1) + " h";
}

class Unauthorized extends Error {}

async function api(path) {
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (!token) throw new Unauthorized("no token");
  const resp = await fetch(path, {headers: {"Authorization": "Bearer " + token}});
  if (resp.status === 401) throw new Unauthorized("the token was refused");
  if (!resp.ok) {
    let detail = resp.statusText;
    try { detail = (await resp.json()).detail; } catch (e) { /* not JSON */ }
    throw new Error(path + ": " + resp.status + " " + detail);
  }
  return resp.json();
}

function showOnly(id) {
  for (const s of ["login", "overview", "job-page"]) $(s).hidden = s !== id;
}

function askToken(message) {
  sessionStorage.removeItem(TOKEN_KEY);
  $("login-error").textContent = message || "";
  $("service-info").textContent = "not connected";
  showOnly("login");
  $("token-input").focus();
}

// ---- overview -------------------------------------------------------------------------

function drawCluster(cluster, jobs, others) {
  // others: GPUs per node that other queues' jobs hold (GET /queues, a queue's token), shown
  // as taken without naming the job
  const box = $("cluster");
  const perNode = cluster.nodes.map(n => []);  // node index -> [job per GPU]
  for (const j of jobs) {
    if (j.status !== "running" && j.status !== "queued") continue;
    for (const [node, gpus] of j.slots || []) {
      for (let g = 0; g < gpus && node < perNode.length; g++) perNode[node].push(j);
    }
  }
  const nodes = cluster.nodes.map((n, i) => {
    const cells = [];
    for (let g = 0; g < n.gpus; g++) {
      const job = perNode[i][g];
      if (job) {
        const cell = el("div", {"class": "gpu busy", "data-job": job.id,
                                "title": job.id + " " + job.name, "style": "background:" + colorOf(job.id)},
                        el("a", {"href": "#/job/" + encodeURIComponent(job.id)}, job.id));
        cells.push(cell);
      } else if (others && g - perNode[i].length < (others[i] || 0)) {
        cells.push(el("div", {"class": "gpu busy other", "title": "another queue's job"}, "other queue"));
      } else {
        cells.push(el("div", {"class": "gpu idle"}, "idle"));
      }
    }
    return el("div", {"class": "node", "data-node": n.name, "data-type": n.gpu_type || ""},
              el("div", {"class": "node-name"},
                 n.name + " (" + n.gpus + (n.gpu_type ? " " + n.gpu_type : "") + ")"),
              el("div", {"class": "gpus"}, ...cells));
  });
  box.replaceChildren(...nodes);
}

// The GPU type a job runs on (its placement's) and the one it is restricted to, as text.
function typeText(j) {
  const wanted = (j.spec || {}).gpu_type;
  return (j.gpu_type ? " " + j.gpu_type : "") + (wanted ? " (" + wanted + " only)" : "");
}

// The job table's page: its filters and the cursors of the pages before it (GET /jobs pages,
// newest first; `after` is the last id of the page before).
const jobsView = {status: "", queue: "", name: "", cursors: [null]};

function jobsQuery() {
  const q = new URLSearchParams({order: "newest", limit: String(PAGE_SIZE)});
  for (const k of ["status", "queue", "name"]) if (jobsView[k]) q.set(k, jobsView[k]);
  const after = jobsView.cursors[jobsView.cursors.length - 1];
  if (after) q.set("after", after);
  return "/jobs?" + q.toString();
}

function drawJobsPager(page) {
  const first = jobsView.cursors.length === 1;
  const shownFrom = (jobsView.cursors.length - 1) * PAGE_SIZE;
  $("jobs-count").textContent = page.jobs.length ? (shownFrom + 1) + "-" + (shownFrom + page.jobs.length) +
    " of " + page.total + " job(s)" : page.total + " job(s)";
  $("jobs-newer").disabled = first;  // (its click goes back a page: set once, below)
  $("jobs-older").disabled = !page.next;
  $("jobs-older").onclick = () => { jobsView.cursors.push(page.next); tick(); };
}

function drawJobs(jobs) {
  const rows = jobs.map(j => {
    const batch = j.batch ? j.batch[0] + "x" + (j.batch[1] + 1) : "-";
    return el("tr", {"data-job": j.id},
      el("td", {}, el("a", {"href": "#/job/" + encodeURIComponent(j.id)}, j.id)),
      el("td", {}, j.name),
      el("td", {"class": "status status-" + j.status}, j.status),
      el("td", {"class": "gpus-count"}, j.gpus),
      el("td", {}, j.placement + typeText(j)),
      el("td", {}, batch),
      // `progress` is scale-invariant training progress (samples at M0), not a fraction done
      el("td", {}, "epoch " + j.epoch + ", " + j.steps + " steps"),
      el("td", {}, j.throughput ? fmt(j.throughput, 1) + " samples/s" : "-"),
      el("td", {}, j.efficiency ? fmt(j.efficiency, 2) : "-"),
      el("td", {}, j.restarts),
      el("td", {}, duration(j.queue_time_s)),
      el("td", {}, duration(j.run_time_s)),
      el("td", {}, j.message || ""));
  });
  $("jobs-table").tBodies[0].replaceChildren(...rows);
}

function drawScheduler(cluster) {
  const rounds = (cluster.recent_rounds || []).slice(-10).reverse();
  const list = rounds.map(r => el("li", {}, "t=" + fmt(r.time_s, 1) + " s: " +
    fmt(1000 * r.decide_s, 1) + " ms to decide" + (r.jobs === undefined ? "" : ", " + r.jobs + " job(s)") +
    (r.fill_in ? " (fill-in)" : "")));
  $("scheduler").replaceChildren(
    el("p", {}, "policy ", el("b", {"id": "policy"}, cluster.policy), ", executor " + cluster.executor +
       ", a round every " + cluster.interval_s + " s; " + (cluster.rounds || 0) + " rounds so far"),
    el("p", {}, "recent rounds:"), el("ul", {"id": "rounds"}, ...list));
}

function drawQueues(doc) {
  // GET /queues: every queue for the admin token, a tenant's own for a queue's token;
  // null on a service without --queues: the section stays hidden
  $("queues").hidden = !doc;
  if (!doc) return;
  const cell = v => el("td", {}, v === null || v === undefined ? "-" : String(v));
  $("queues-table").tBodies[0].replaceChildren(...doc.queues.map(q => el("tr", {},
    cell(q.name), cell(q.parent), cell(q.quota), cell(q.limit), cell(q.used), cell(q.borrowed),
    cell(q.share), cell(q.jobs), cell(q.waiting))));
}

async function refreshOverview() {
  // the running jobs (they hold GPUs: at most one per GPU) for the cluster, the number
  // queued, and the page of the table: each a bounded request however many jobs there are
  const [cluster, running, queued, page] = await Promise.all([api("/cluster"),
    api("/jobs?status=running&limit=1000"), api("/jobs?status=queued&limit=0"), api(jobsQuery())]);
  // GET /queues only where the service runs with queues (cluster.queues), so a service
  // without them is not asked for what it answers 400 to
  const queues = cluster.queues ? await api("/queues") : null;
  $("service-info").textContent = cluster.policy + " on " + cluster.total_gpus + " GPUs, " +
    running.total + " running, " + queued.total + " queued";
  drawCluster(cluster, running.jobs, queues ? queues.other_queues_gpus_per_node : null);
  drawJobs(page.jobs);
  drawJobsPager(page);
  drawScheduler(cluster);
  drawQueues(queues);
}

// ---- job page -------------------------------------------------------------------------

function chart(points, opts) {
  // points: [[x, y], ...]; a step chart when opts.step. Returns an SVG element.
  const W = 380, H = 170, L = 44, B = 24, T = 8, R = 8;
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("width", W); svg.setAttribute("height", H);
  const add = (tag, attrs, text) => {
    const n = document.createElementNS(ns, tag);
    for (const [k, v] of Object.entries(attrs)) n.setAttribute(k, v);
    if (text !== undefined) n.textContent = text;
    svg.append(n); return n;
  };
  if (!points.length) { add("text", {x: W / 2, y: H / 2, "text-anchor": "middle"}, "no data yet"); return svg; }
  const xs = points.map(p => p[0]), ys = points.map(p => p[1]);
  const x0 = Math.min(...xs), x1 = Math.max(...xs, x0 + 1e-9);
  const y0 = Math.min(0, ...ys), y1 = Math.max(...ys, y0 + 1e-9);
  const sx = x => L + (W - L - R) * (x - x0) / (x1 - x0 || 1);
  const sy = y => H - B - (H - B - T) * (y - y0) / (y1 - y0 || 1);
  let d = "";
  points.forEach(([x, y], i) => {
    if (i === 0) d += "M" + sx(x) + "," + sy(y);
    else if (opts.step) d += "H" + sx(x) + "V" + sy(y);
    else d += "L" + sx(x) + "," + sy(y);
  });
  add("line", {x1: L, y1: H - B, x2: W - R, y2: H - B, stroke: "#999"});
  add("line", {x1: L, y1: T, x2: L, y2: H - B, stroke: "#999"});
  add("path", {d: d, fill: "none", stroke: opts.color || "#1e88e5", "stroke-width": 2});
  add("text", {x: 2, y: T + 10, "font-size": 10}, fmt(y1, opts.digits));
  add("text", {x: 2, y: H - B, "font-size": 10}, fmt(y0, opts.digits));
  add("text", {x: L, y: H - 6, "font-size": 10}, fmt(x0, 0) + " s");
  add("text", {x: W - R, y: H - 6, "font-size": 10, "text-anchor": "end"}, fmt(x1, 0) + " s (" + opts.xlabel + ")");
  return svg;
}

function launchesOf(telemetry) {
  const seen = new Map();
  for (const t of telemetry) {
    if (t.launch === null || seen.has(t.launch)) continue;
    seen.set(t.launch, t);
  }
  return [...seen.values()];
}

async function refreshJob(jobId) {
  const id = encodeURIComponent(jobId);
  const [job, telemetry] = await Promise.all([api("/jobs/" + id), api("/jobs/" + id + "/telemetry")]);
  $("service-info").textContent = "job " + job.id;
  $("job-title").textContent = job.id + ": " + job.name;
  const status = $("job-status");
  status.textContent = job.status;
  status.className = "status-" + job.status;
  $("job-line").textContent = " on " + job.gpus + " GPU(s) (" + job.placement + typeText(job) +
    "), " + job.steps +
    " steps, epoch " + job.epoch + ", " + job.launches + " launch(es), " + job.restarts +
    " restart(s), queued " + duration(job.queue_time_s) + ", running " + duration(job.run_time_s) +
    (job.message ? " - " + job.message : "");
  const now = job.finish_s !== null && job.finish_s !== undefined ? job.finish_s : null;
  const alloc = job.assignments.map(a => [a.time_s, a.num_gpus]);
  if (alloc.length) alloc.push([now !== null ? now : Math.max(alloc[alloc.length - 1][0],
                                telemetry.length ? telemetry[telemetry.length - 1].time_s : 0),
                               now !== null ? 0 : alloc[alloc.length - 1][1]]);
  $("alloc-chart").replaceChildren(chart(alloc, {step: true, xlabel: "service time", digits: 0, color: colorOf(job.id)}));
  const loss = telemetry.filter(t => t.loss !== null).map(t => [t.time_s, t.loss]);
  $("loss-chart").replaceChildren(chart(loss, {xlabel: "service time", digits: 3, color: "#e53935"}));
  const metric = telemetry.filter(t => t.metric !== null).map(t => [t.time_s, t.metric]);
  $("metric-chart").replaceChildren(chart(metric, {xlabel: "service time", digits: 3, color: "#43a047"}));
  $("launches").tBodies[0].replaceChildren(...launchesOf(telemetry).map(t => el("tr", {},
    el("td", {}, t.launch), el("td", {}, fmt(t.time_s, 1)), el("td", {}, fmt(t.world_size)),
    el("td", {}, t.local_bsz ? t.local_bsz + "x" + ((t.accum_steps || 0) + 1) : "-"),
    el("td", {}, fmt(t.resumed_steps)), el("td", {}, t.launch_start || "-"))));  // the service's words
  $("events").tBodies[0].replaceChildren(...job.events.map(e => el("tr", {"class": "event-" + e.kind},
    el("td", {}, fmt(e.time_s, 1)), el("td", {}, e.kind), el("td", {}, e.detail))));
  $("assignments").tBodies[0].replaceChildren(...job.assignments.map(a => el("tr", {},
    el("td", {}, fmt(a.time_s, 1)), el("td", {}, a.placement), el("td", {}, a.num_gpus),
    el("td", {}, a.batch || "-"))));
}

// ---- routing and polling ----------------------------------------------------------------

function route() {
  const m = location.hash.match(/^#\/job\/(.+)$/);
  return m ? {page: "job-page", job: decodeURIComponent(m[1])} : {page: "overview"};
}

async function tick() {
  clearTimeout(timer);
  if (!sessionStorage.getItem(TOKEN_KEY)) { askToken(); return; }
  const r = route();
  try {
    if (r.page === "job-page") await refreshJob(r.job); else await refreshOverview();
    showOnly(r.page);
    $("error").textContent = "";
  } catch (e) {
    if (e instanceof Unauthorized) { askToken(e.message === "no token" ? "" : e.message); return; }
    $("error").textContent = "cannot refresh: " + e.message;
  }
  timer = setTimeout(tick, POLL_MS);
}

$("token-form").addEventListener("submit", ev => {
  ev.preventDefault();
  const token = $("token-input").value.trim();
  if (!token) return;
  sessionStorage.setItem(TOKEN_KEY, token);
  $("token-input").value = "";
  tick();
});
$("jobs-filter").addEventListener("submit", ev => {
  ev.preventDefault();
  for (const k of ["status", "queue", "name"]) jobsView[k] = $("jobs-" + k).value.trim();
  jobsView.cursors = [null];  // new filters: from the newest again
  tick();
});
$("jobs-newer").addEventListener("click", () => { jobsView.cursors.pop(); tick(); });
$("forget-token").addEventListener("click", ev => { ev.preventDefault(); clearTimeout(timer); askToken(); });
window.addEventListener("hashchange", tick);
tick();
