// Siesta UI. Reads and acts only through the control API, with the caller's API key.
// Pages are rendered as HTML strings in one assignment each: a run with a thousand
// timeline events still renders in a single layout pass.
'use strict';

const main = document.getElementById('main');
const dialog = document.getElementById('dialog');
const FINISHED = ['completed', 'failed', 'cancelled'];
const FIRST_ROWS = 40; // event rows in the first paint of a run page
const MORE_ROWS = 500; // event rows added per task after it
const STATUSES = ['queued', 'pending', 'running', 'waiting', 'paused', 'parked', 'completed', 'failed', 'cancelled'];
// A run the Restart… button is offered for: a queued one has not begun, and a running
// one is left to Cancel (the API would cancel it at its next boundary first).
const RESTARTABLE = ['failed', 'cancelled', 'completed', 'parked', 'paused', 'waiting', 'pending'];
const REPEAT_WARNING = 'Tool calls after the point are made again rather than answered from their recorded outcome (same idempotency keys): a provider that ignores keys does them twice.';
const KEY_STORE = 'siesta.apiKey';
let timers = [];
let generation = 0; // bumped on every navigation: late answers of a left page are dropped

// ---------- text ----------
const ESC = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };
const esc = (s) => String(s ?? '').replace(/[&<>"']/g, (c) => ESC[c]);
const pad = (n, w = 2) => String(n).padStart(w, '0');

function offset(d) {
  const m = -d.getTimezoneOffset();
  const a = Math.abs(m);
  return (m >= 0 ? '+' : '-') + pad(Math.floor(a / 60)) + ':' + pad(a % 60);
}
/** Local time with its UTC offset: 2026-11-24 02:41:14 +01:00. */
function localTime(ms) {
  const d = new Date(ms);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
    `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())} ${offset(d)}`;
}
/** RFC 3339 in local time, milliseconds kept: 2026-11-24T02:41:14.441+01:00. */
function rfc3339(ms) {
  const d = new Date(ms);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T` +
    `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}${offset(d)}`;
}
function timeHtml(ms) {
  if (ms == null) return '<span class="muted">—</span>';
  return `<time datetime="${rfc3339(ms)}" title="${rfc3339(ms)}">${localTime(ms)}</time>`;
}
/** An API time (RFC 3339) in ms since the epoch, which the page computes with; null when absent. */
const instant = (t) => (t == null ? null : Date.parse(t));
function duration(ms) {
  if (ms == null || isNaN(ms)) return '—';
  ms = Math.max(0, Math.round(ms));
  if (ms < 1000) return ms + ' ms';
  const s = ms / 1000;
  if (s < 60) return s.toFixed(s < 10 ? 2 : 1) + ' s';
  const m = Math.floor(s / 60), h = Math.floor(m / 60), d = Math.floor(h / 24);
  if (m < 60) return `${m} min ${Math.floor(s % 60)} s`;
  if (h < 24) return `${h} h ${m % 60} min`;
  return `${d} d ${h % 24} h`;
}
function relative(ms) {
  const d = ms - Date.now();
  return d >= 0 ? 'in ' + duration(d) : duration(-d) + ' ago';
}
const json = (v) => JSON.stringify(v, null, 2);
const badge = (status) => `<span class="badge" data-status="${esc(status)}">${esc(status)}</span>`;
const runLink = (id, text) => `<a href="/ui/runs/${encodeURIComponent(id)}" data-nav>${esc(text ?? id)}</a>`;
const finishedAt = (run) => (FINISHED.includes(run.status) ? instant(run.updated_at) : null);
// The code version the run started on, under either name the run view may give it.
const codeVersion = (run) => run.code_version ?? run.build_id ?? null;
function errorText(e) {
  if (!e) return '';
  let s = `${e.kind}: ${e.message}`;
  for (let c = e.cause; c; c = c.cause) s += `\n  caused by ${c.kind}: ${c.message}`;
  return s;
}

// ---------- API ----------
class ApiError extends Error {
  /** `error` is the API's whole error object (e.g. with a restart's `divergence`). */
  constructor(status, code, message, error = {}) {
    super(message);
    this.status = status;
    this.code = code;
    this.error = error;
  }
  toString() { return `${this.status} ${this.code}: ${this.message}`; }
}

/** One call of the control API; the body is a JSON string. Errors carry the API's code. */
async function api(method, path, body, headers = {}) {
  const h = { Accept: 'application/json', ...headers };
  const key = localStorage.getItem(KEY_STORE);
  if (key) h.Authorization = 'Bearer ' + key;
  if (body !== undefined) h['Content-Type'] = 'application/json';
  let res;
  try {
    res = await fetch(path, { method, headers: h, body, cache: 'no-store' });
  } catch (e) {
    throw new ApiError(0, 'unreachable', 'the server did not answer: ' + e.message);
  }
  const text = await res.text();
  let data = null;
  if (text) { try { data = JSON.parse(text); } catch { data = text; } }
  if (!res.ok) {
    const err = (data && data.error) || {};
    throw new ApiError(res.status, err.code || 'http_' + res.status, err.message || res.statusText, err);
  }
  return { data, etag: res.headers.get('ETag'), status: res.status };
}

/** Runs `load`; on 401 asks for an API key once, then runs it again. */
async function authed(load) {
  try {
    return await load();
  } catch (e) {
    if (e instanceof ApiError && e.status === 401) { askForKey(e.message); return null; }
    throw e;
  }
}

function renderAuth() {
  const el = document.getElementById('auth');
  el.innerHTML = localStorage.getItem(KEY_STORE)
    ? 'API key set<button type="button" id="forget-key">Forget</button>' : '';
  const b = document.getElementById('forget-key');
  if (b) b.onclick = () => { localStorage.removeItem(KEY_STORE); renderAuth(); route(); };
}

function askForKey(message) {
  stopTimers();
  const had = !!localStorage.getItem(KEY_STORE);
  main.innerHTML = `<section class="card login"><h2>This server needs an API key</h2>
    <p class="muted">It is sent as <code>Authorization: Bearer …</code> with every request and kept in
    this browser until you choose Forget. You see only your tenant's runs.</p>
    ${had ? `<p class="error-box">${esc(message)}</p>` : ''}
    <form id="key-form"><input type="password" name="key" autocomplete="off" placeholder="API key" required>
    <button class="primary">Use this key</button></form></section>`;
  document.getElementById('key-form').onsubmit = (ev) => {
    ev.preventDefault();
    localStorage.setItem(KEY_STORE, ev.target.key.value.trim());
    renderAuth();
    route();
  };
  main.querySelector('input').focus();
}

// ---------- navigation ----------
function stopTimers() { timers.forEach(clearTimeout); timers = []; }
function later(ms, f) { const t = setTimeout(f, ms); timers.push(t); return t; }
/** Runs `f` in a task after the next frame is painted (unless the page is left first). */
function afterPaint(f) { const gen = generation; requestAnimationFrame(() => later(0, () => { if (gen === generation) f(); })); }

function route() {
  stopTimers();
  generation++;
  window.siestaRunRendered = null;
  delete document.body.dataset.painted;
  const m = location.pathname.match(/^\/ui\/runs\/([^/]+)$/);
  if (m) return showRun(decodeURIComponent(m[1]));
  if (location.pathname === '/ui/builds') return showBuilds();
  if (location.pathname === '/ui/flow') return showFlow();
  return showList(new URLSearchParams(location.search));
}
function navigate(url) { history.pushState(null, '', url); route(); }

document.addEventListener('click', (ev) => {
  const a = ev.target.closest('a[data-nav]');
  if (!a || ev.button !== 0 || ev.metaKey || ev.ctrlKey || ev.shiftKey) return;
  ev.preventDefault();
  navigate(a.getAttribute('href'));
});
window.addEventListener('popstate', route);
// An open menu closes when something else is clicked.
document.addEventListener('click', (ev) => {
  for (const m of document.querySelectorAll('details.menu[open]')) if (!m.contains(ev.target)) m.open = false;
});

function failPage(e) {
  main.innerHTML = `<p class="error-box">${esc(String(e))}</p><p><a href="/" data-nav>All runs</a></p>`;
}

// ---------- runs list ----------
async function showList(params) {
  const gen = generation;
  document.getElementById('crumbs').innerHTML = 'Runs';
  document.title = 'Runs · Siesta';
  const status = params.get('status') || '', workflow = params.get('workflow') || '';
  const cursor = params.get('cursor') || '';
  main.innerHTML = `<h1>Runs</h1>
    <form class="toolbar" id="filters">
      <label>Status <select name="status"><option value="">any</option>
        ${STATUSES.map((s) => `<option ${s === status ? 'selected' : ''}>${s}</option>`).join('')}</select></label>
      <label>Workflow <input type="text" name="workflow" value="${esc(workflow)}" placeholder="any" size="14"></label>
      <button>Filter</button>
      <details class="menu" id="actions-menu"><summary>Actions</summary><div class="menu-body">
        ${BULK_ACTIONS.map((a) => `<button type="button" data-bulk="${a}"${a === 'cancel' ? ' class="danger"' : ''}>${esc(BULK[a].label)}…</button>`).join('')}
      </div></details>
      <span class="muted" id="picked"></span>
      <span class="spacer"></span>
      <a href="/ui/builds" data-nav title="Each build, its unfinished runs by status">Builds</a>
      <a href="/ui/flow" data-nav title="Concurrency limits with their holders and waiters; schedules">Flow control</a>
      <label title="Refresh every 2 s"><input type="checkbox" id="live" checked> Live</label>
      <span class="muted" id="refreshed"></span>
    </form>
    <div id="bulk-progress"></div>
    <section class="card"><div id="runs"><p class="muted">Loading…</p></div></section>`;
  document.getElementById('filters').onsubmit = (ev) => {
    ev.preventDefault();
    const q = new URLSearchParams();
    const f = ev.target;
    if (f.status.value) q.set('status', f.status.value);
    if (f.workflow.value.trim()) q.set('workflow', f.workflow.value.trim());
    navigate('/' + (q.toString() ? '?' + q : ''));
  };
  const query = new URLSearchParams({ limit: '50' });
  if (status) query.set('status', status);
  if (workflow) query.set('workflow', workflow);
  if (cursor) query.set('cursor', cursor);
  // The runs ticked, kept across live refreshes while they stay on the page.
  const list = { gen, selected: new Set(), filter: {}, reload: null };
  if (workflow) list.filter.workflow = workflow;
  if (status) list.filter.status = status;
  const picked = () => {
    const n = list.selected.size;
    document.getElementById('picked').textContent = n ? `${n} selected` : '';
    const all = document.getElementById('pick-all');
    if (all) {
      const boxes = main.querySelectorAll('#runs input.pick');
      all.checked = boxes.length > 0 && n === boxes.length;
      all.indeterminate = n > 0 && n < boxes.length;
    }
  };
  document.getElementById('runs').onchange = (ev) => {
    const box = ev.target;
    if (box.id === 'pick-all') {
      main.querySelectorAll('#runs input.pick').forEach((b) => {
        b.checked = box.checked;
        if (box.checked) list.selected.add(b.dataset.runId); else list.selected.delete(b.dataset.runId);
      });
    } else if (box.classList.contains('pick')) {
      if (box.checked) list.selected.add(box.dataset.runId); else list.selected.delete(box.dataset.runId);
    }
    picked();
  };
  document.getElementById('actions-menu').onclick = (ev) => {
    const b = ev.target.closest('button[data-bulk]');
    if (!b) return;
    document.getElementById('actions-menu').open = false;
    openBulk(list, b.dataset.bulk);
  };
  let last = '';
  let timer = null;
  let reads = 0; // only the latest read draws and schedules the next: a reload overtakes one in flight
  const load = async () => {
    const read = ++reads;
    let page;
    try {
      page = await authed(() => api('GET', '/runs?' + query));
    } catch (e) {
      if (gen === generation && read === reads) document.getElementById('runs').innerHTML = `<p class="error-box">${esc(String(e))}</p>`;
      return;
    }
    if (!page || gen !== generation || read !== reads) return;
    const text = JSON.stringify(page.data);
    if (text !== last) {
      last = text;
      // A ticked run that left the page is no longer selected: what is acted on is what is shown.
      const shown = new Set((page.data.runs || []).map((r) => r.id));
      for (const id of list.selected) if (!shown.has(id)) list.selected.delete(id);
      document.getElementById('runs').innerHTML = runsTable(page.data, params, list.selected);
      picked();
    }
    document.getElementById('refreshed').textContent = 'updated ' + localTime(Date.now()).slice(11, 19);
    if (document.getElementById('live').checked) timer = later(2000, load);
  };
  // After an action: read again now, and draw even if nothing changed (the ticks are cleared).
  list.reload = () => { clearTimeout(timer); last = ''; return load(); };
  document.getElementById('live').onchange = (ev) => { clearTimeout(timer); if (ev.target.checked) load(); };
  followJob(list);
  await load();
}

function runsTable(page, params, selected = new Set()) {
  const runs = page.runs || [];
  if (!runs.length) return '<p class="muted">No runs match. Start one with <code>POST /runs</code>.</p>';
  const showTenant = runs.some((r) => r.tenant != null);
  const showCode = runs.some((r) => codeVersion(r) != null);
  const rows = runs.map((r) => {
    const end = finishedAt(r);
    const took = (end ?? Date.now()) - instant(r.created_at);
    return `<tr data-run-id="${esc(r.id)}">
      <td class="pick"><input type="checkbox" class="pick" data-run-id="${esc(r.id)}" data-status="${esc(r.status)}" title="Select this run"${selected.has(r.id) ? ' checked' : ''}></td>
      <td>${badge(r.status)}${r.cancel_requested ? ' <span class="muted">cancelling</span>' : ''}${r.awaiting_build ? ` <span class="muted" title="started on build ${esc(r.awaiting_build)}; this server runs only its own build">awaiting its build</span>` : ''}${r.queued ? ` <span class="muted" title="${esc(queuedTitle(r.queued))}">${esc(queuedText(r.queued))}</span>` : ''}</td>
      <td>${esc(r.workflow)}</td>
      <td class="id">${runLink(r.id)}</td>
      ${showTenant ? `<td>${esc(r.tenant)}</td>` : ''}
      <td>${timeHtml(instant(r.created_at))}</td>
      <td>${timeHtml(end)}</td>
      <td class="num" title="${end ? 'from start to finish' : 'so far'}">${duration(took)}${end ? '' : '…'}</td>
      ${showCode ? `<td class="mono">${esc(codeVersion(r) ?? '—')}</td>` : ''}
      <td class="num" title="the run's version (its ETag)">${r.version}</td></tr>`;
  }).join('');
  const next = page.next_cursor;
  const q = (c) => { const p = new URLSearchParams(params); if (c) p.set('cursor', c); else p.delete('cursor'); return '/?' + p; };
  return `<table class="runs"><thead><tr><th class="pick"><input type="checkbox" id="pick-all" title="Select every run on this page"></th><th>Status</th><th>Workflow</th><th>Run</th>
    ${showTenant ? '<th>Tenant</th>' : ''}<th>Started</th><th>Finished</th><th>Duration</th>
    ${showCode ? '<th>Code version</th>' : ''}<th>Version</th></tr></thead><tbody>${rows}</tbody></table>
    <div class="pager">${params.get('cursor') ? `<a href="${esc(q(null))}" data-nav>← Newest</a>` : ''}
    ${next ? `<a href="${esc(q(next))}" data-nav id="older">Older →</a>` : '<span class="muted">End of list</span>'}</div>`;
}

// ---------- runs list: actions on a selection or a filter ----------
// On a selection: one call per run through the single-run routes, from this page. On
// every run the list's filter matches: a durable job on the server (POST /runs/actions),
// followed with GET /runs/actions/{id}; it goes on if the page is left.
const BULK_ACTIONS = ['cancel', 'pause', 'resume', 'restart', 'upgrade', 'redrive'];
const BULK = {
  cancel: { label: 'Cancel', path: (id) => `/runs/${id}/cancel`,
    what: 'A waiting run is cancelled at once, a running one at its next step boundary. This cannot be undone; a finished run is skipped.' },
  pause: { label: 'Pause', path: (id) => `/runs/${id}/pause`,
    what: 'A waiting run is paused at once, a running one at its next step boundary. It takes no turn until resumed; deliveries are still recorded.' },
  resume: { label: 'Resume', path: (id) => `/runs/${id}/resume`,
    what: 'A paused or parked run is woken and replays from its journal; any other is skipped.' },
  restart: { label: 'Restart', path: (id) => `/runs/${id}/restart`,
    what: 'Each run goes on from the first operation that failed (else where it stopped), once the journal before it replays on this build; one that does not is left as it is and counted as failed.' },
  upgrade: { label: 'Upgrade', path: (id) => `/runs/${id}/upgrade`,
    what: 'Each run is moved to the build serving this page, only if its journal replays cleanly on it; otherwise it is left as it is.' },
  redrive: { label: 'Redrive', path: (id) => `/dead-letters/${id}/redrive`,
    what: 'Each run a dead letter parked is resumed; any other is skipped.' },
};
const JOB_STORE = 'siesta.bulkJob';
let following = 0; // bumped by each panel drawn into #bulk-progress: an older one stops drawing

/** The filter in words: `workflow = order, status = failed`. */
const filterText = (f) => Object.entries(f).map(([k, v]) => `${k} = ${v}`).join(', ');

/** The confirmation of `action`: on the selected runs or on every run the filter matches. */
function openBulk(list, action) {
  const spec = BULK[action];
  const ids = [...list.selected];
  const hasFilter = Object.keys(list.filter).length > 0;
  const scope0 = ids.length ? 'selection' : 'filter';
  const shownIds = ids.slice(0, 8).map((id) => `<code>${esc(id)}</code>`).join(', ') + (ids.length > 8 ? ` and ${ids.length - 8} more` : '');
  const restartFields = action === 'restart' ? [
    { name: 'from', label: 'From (a position such as notify_team#0; empty: each run\'s first operation that failed)', value: '', optional: true },
    { name: 'as_new', label: 'As new runs (a fork of each; the runs stay as they are)', checkbox: true },
    { name: 'repeat_tool_calls', label: 'Repeat tool calls', checkbox: true, warning: REPEAT_WARNING },
  ] : [];
  dialog.innerHTML = `<form method="dialog" data-bulk="${esc(action)}"><h2>${esc(spec.label)} runs</h2><p>${esc(spec.what)}</p>
    <label class="check"><input type="radio" name="scope" value="selection"${ids.length ? '' : ' disabled'}${scope0 === 'selection' ? ' checked' : ''}>
      <span>${ids.length ? `the <b id="bulk-count">${ids.length}</b> selected run${ids.length === 1 ? '' : 's'}: ${shownIds}` : 'the selected runs: none is selected (tick them in the list)'}</span></label>
    <label class="check"><input type="radio" name="scope" value="filter"${hasFilter ? '' : ' disabled'}${scope0 === 'filter' && hasFilter ? ' checked' : ''}>
      <span>${hasFilter ? `every run matching the filter <b id="bulk-filter">${esc(filterText(list.filter))}</b> — on every page, not just this one: a job on the server, paced, that goes on if you leave this page`
        : 'every run matching the filter: set a status or workflow filter first (a job over all runs is not offered)'}</span></label>
    ${restartFields.map(fieldHtml).join('')}
    <div class="what" id="what"></div><p class="error-box" id="action-error"></p>
    <menu><button type="button" value="cancel" id="dialog-cancel">Back</button>
    <button type="submit" value="confirm" class="${action === 'cancel' ? 'danger' : 'primary'}" id="dialog-confirm">Confirm</button></menu></form>`;
  const form = dialog.querySelector('form');
  const scope = () => (form.querySelector('input[name="scope"]:checked') || {}).value;
  const options = () => fieldValues(form, restartFields);
  const jobBody = () => JSON.stringify(Object.assign({ action, filter: list.filter }, restartBody(options())));
  const describe = () => {
    const confirmButton = document.getElementById('dialog-confirm');
    confirmButton.disabled = !scope();
    const body = action === 'restart' ? JSON.stringify(restartBody(options())) : '';
    document.getElementById('what').textContent = scope() === 'selection'
      ? ids.slice(0, 3).map((id) => `POST ${spec.path(encodeURIComponent(id))}${body ? ' ' + body : ''}`).join('\n') + (ids.length > 3 ? `\n… one call per run, ${ids.length} in all` : '')
      : scope() === 'filter' ? `POST /runs/actions\n\n${jobBody()}` : 'Nothing to act on.';
  };
  describe();
  form.oninput = describe;
  document.getElementById('dialog-cancel').onclick = () => dialog.close();
  form.onsubmit = async (ev) => {
    ev.preventDefault();
    const confirmButton = document.getElementById('dialog-confirm');
    confirmButton.disabled = true;
    if (scope() === 'selection') {
      dialog.close();
      actOnSelection(list, action, ids, options());
      return;
    }
    try {
      const got = await authed(() => api('POST', '/runs/actions', jobBody()));
      if (!got) { dialog.close(); return; }
      dialog.close();
      const job = { id: got.data.id, title: `${spec.label} · every run matching ${filterText(list.filter)}` };
      sessionStorage.setItem(JOB_STORE, JSON.stringify(job));
      followJob(list, got.data);
    } catch (e) {
      const box = document.getElementById('action-error');
      box.textContent = String(e);
      box.classList.add('shown');
      confirmButton.disabled = false;
    }
  };
  dialog.showModal();
}

/** Whether a run's answer means the action does not apply to it (skipped), not that it failed. */
function skippedBy(action, e) {
  if (!(e instanceof ApiError)) return false;
  if (e.code === 'diverged') return false;
  return e.status === 409 || e.status === 410 || (action === 'redrive' && e.status === 404);
}

/** Does `action` to each of `ids` through its single-run route, two at a time, shown in the progress panel. */
async function actOnSelection(list, action, ids, options) {
  const spec = BULK[action];
  const progress = { kind: 'selection', title: `${spec.label} · ${ids.length} selected run${ids.length === 1 ? '' : 's'}`, status: 'running',
    total: ids.length, matched: ids.length, done: 0, skipped: 0, failed: 0, skipped_reasons: [], failures: [] };
  const key = 'ui-' + (crypto.randomUUID ? crypto.randomUUID() : String(Math.random()).slice(2));
  const body = action === 'restart' ? JSON.stringify(restartBody(options)) : undefined;
  let stop = false;
  const mine = ++following;
  const draw = () => { if (list.gen === generation && mine === following) drawProgress(progress, { onCancel: progress.status === 'running' ? () => { stop = true; } : null, onDismiss: dismiss }); };
  const dismiss = () => { if (mine === following) document.getElementById('bulk-progress').innerHTML = ''; };
  draw();
  const queue = ids.slice();
  const worker = async () => {
    while (queue.length && !stop) {
      const id = queue.shift();
      try {
        await api('POST', spec.path(encodeURIComponent(id)), body, { 'Idempotency-Key': `${key}-${id}` });
        progress.done++;
      } catch (e) {
        const note = { run_id: id, why: String(e) };
        if (skippedBy(action, e)) { progress.skipped++; progress.skipped_reasons.push(note); } else { progress.failed++; progress.failures.push(note); }
      }
      draw();
    }
  };
  await Promise.all([worker(), worker()]);
  progress.status = stop ? 'cancelled' : 'done';
  list.selected.clear();
  draw();
  if (list.gen === generation) list.reload();
}

/** Follows the server's job (the one just started, or the one this tab started last) until it ends. */
function followJob(list, first) {
  let job;
  try { job = JSON.parse(sessionStorage.getItem(JOB_STORE) || 'null'); } catch { job = null; }
  if (!job) return;
  const mine = ++following;
  const current = () => list.gen === generation && mine === following;
  const dismiss = () => { sessionStorage.removeItem(JOB_STORE); document.getElementById('bulk-progress').innerHTML = ''; };
  let timer = null;
  const show = (view) => {
    if (!current()) return;
    drawProgress(Object.assign({ kind: 'job', title: job.title }, view), {
      onCancel: view.status === 'running' ? cancel : null,
      onDismiss: () => { clearTimeout(timer); dismiss(); },
    });
  };
  const poll = async () => {
    let got;
    try {
      got = await authed(() => api('GET', `/runs/actions/${encodeURIComponent(job.id)}`));
    } catch (e) {
      if (!current()) return;
      if (e.status === 404) { dismiss(); return; }
      document.getElementById('bulk-progress').innerHTML = `<p class="error-box">The bulk action ${esc(job.id)}: ${esc(String(e))}</p>`;
      timer = later(2000, poll);
      return;
    }
    if (!got || !current()) return;
    show(got.data);
    if (got.data.status === 'running') timer = later(1000, poll);
    else list.reload();
  };
  const cancel = async () => {
    clearTimeout(timer);
    try {
      const got = await api('POST', `/runs/actions/${encodeURIComponent(job.id)}/cancel`);
      show(got.data);
    } catch (e) {
      if (current()) document.getElementById('bulk-progress').insertAdjacentHTML('beforeend', `<p class="error-box">${esc(String(e))}</p>`);
    }
    poll();
  };
  if (first) show(first);
  if (first && first.status !== 'running') return;
  timer = later(first ? 1000 : 0, poll);
}

/** The progress panel: matched, done, skipped, failed, a bar, why runs were skipped or failed, Cancel. */
function drawProgress(p, { onCancel, onDismiss }) {
  const el = document.getElementById('bulk-progress');
  if (!el) return;
  const seen = p.done + p.skipped + p.failed;
  // A selection's size is known; a job's is not until it ends (its matched grows as it goes).
  const whole = Math.max(p.total ?? (p.status === 'running' ? 0 : p.matched), seen, 1);
  const pct = (n) => ((n / whole) * 100).toFixed(2);
  const notes = (label, list) => (list && list.length ? `<details><summary>${esc(label)} (${list.length}${list.length >= 20 ? ' shown' : ''})</summary><ul>${
    list.map((n) => `<li>${runLink(n.run_id)}: ${esc(n.why)}</li>`).join('')}</ul></details>` : '');
  el.innerHTML = `<section class="card progress" id="job" data-kind="${esc(p.kind)}" data-status="${esc(p.status)}"${p.id ? ` data-job="${esc(p.id)}"` : ''}>
    <h2>${esc(p.title)} ${badge(p.status)}</h2>
    <div class="progress-bar${p.status === 'running' ? ' running' : ''}" title="${p.total != null ? `${seen} of ${p.total}` : `${seen} looked at so far`}">
      <span class="seg done" style="width:${pct(p.done)}%"></span><span class="seg skipped" style="width:${pct(p.skipped)}%"></span><span class="seg failed" style="width:${pct(p.failed)}%"></span></div>
    <p class="counts"><span>matched <b data-count="matched">${esc(p.matched)}</b></span>
      <span class="c-done">done <b data-count="done">${esc(p.done)}</b></span>
      <span class="c-skipped">skipped <b data-count="skipped">${esc(p.skipped)}</b></span>
      <span class="c-failed">failed <b data-count="failed">${esc(p.failed)}</b></span>
      ${p.by ? `<span class="muted">by ${esc(p.by)}</span>` : ''}${p.id ? ` <span class="muted mono">${esc(p.id)}</span>` : ''}</p>
    ${p.error ? `<p class="error-box">${esc(p.error)}</p>` : ''}
    ${p.cancelled_by ? `<p class="muted">Cancelled by ${esc(p.cancelled_by)}; the runs acted on stay acted on.</p>` : ''}
    ${notes('Skipped, and why', p.skipped_reasons)}${notes('Failed, and why', p.failures)}
    <div class="buttons">${onCancel ? '<button type="button" class="danger" id="job-cancel">Cancel</button>' : '<button type="button" id="job-dismiss">Dismiss</button>'}</div></section>`;
  const c = document.getElementById('job-cancel');
  if (c) c.onclick = () => { c.disabled = true; onCancel(); };
  const d = document.getElementById('job-dismiss');
  if (d) d.onclick = onDismiss;
}

// ---------- builds ----------
/** GET /builds: each build, the serving one first, with its unfinished runs by status. */
async function showBuilds() {
  const gen = generation;
  document.getElementById('crumbs').innerHTML = '<a href="/" data-nav>Runs</a> › Builds';
  document.title = 'Builds · Siesta';
  main.innerHTML = '<h1>Builds</h1><section class="card"><div id="builds"><p class="muted">Loading…</p></div></section>';
  let page;
  try {
    page = await authed(() => api('GET', '/builds'));
  } catch (e) {
    if (gen === generation) document.getElementById('builds').innerHTML = `<p class="error-box">${esc(String(e))}</p>`;
    return;
  }
  if (!page || gen !== generation) return;
  const rows = (page.data.builds || []).map((b) => {
    const counts = Object.entries(b.unfinished || {});
    const unfinished = counts.length
      ? counts.map(([status, n]) => `${n} ${badge(status)}`).join(' ')
      : '<span class="muted">none</span>';
    return `<tr data-build="${esc(b.build_id)}">
      <td class="mono">${esc(b.build_id)}</td>
      <td>${b.serving ? '<b>serving</b>' : (counts.length ? '<span class="muted">its runs wait for it</span>' : '')}</td>
      <td>${deployedHtml(b, counts.length > 0)}</td>
      <td>${unfinished}</td>
      <td>${timeHtml(instant(b.first_seen))}</td>
      <td>${timeHtml(instant(b.last_seen))}</td></tr>`;
  }).join('');
  document.getElementById('builds').innerHTML = `<p class="muted">A run is replayed only on the build it started on: the runs of a build that is not serving wait for it (or for an upgrade that moves them, when their journal replays here).</p>
    <table class="runs"><thead><tr><th>Build</th><th></th><th>Deployed</th><th>Unfinished runs</th><th>First seen</th><th>Last seen</th></tr></thead><tbody>${rows}</tbody></table>`;
}

/** Whether a build is still deployed (`null`: unknown); flagged when runs wait for a build that is not. */
function deployedHtml(b, hasRuns) {
  if (b.deployed === true) return 'yes';
  if (b.deployed === false) {
    return hasRuns
      ? '<span class="undeployed" title="Its unfinished runs wait until it is deployed again or they are upgraded">no</span>'
      : '<span class="muted">no</span>';
  }
  return '<span class="muted" title="Could not be told">unknown</span>';
}

// ---------- flow control ----------
const DASH = '<span class="muted">—</span>';

/** GET /limits and GET /schedules: each limit with its keys' holders and waiters; each schedule with its next tick and actions. */
async function showFlow() {
  const gen = generation;
  document.getElementById('crumbs').innerHTML = '<a href="/" data-nav>Runs</a> › Flow control';
  document.title = 'Flow control · Siesta';
  main.innerHTML = `<h1>Flow control</h1>
    <section class="card"><h2>Concurrency limits</h2><div id="limits"><p class="muted">Loading…</p></div></section>
    <section class="card"><h2>Schedules</h2><div id="schedule-answer"></div><div id="schedules"><p class="muted">Loading…</p></div></section>`;
  document.getElementById('schedules').onclick = (ev) => {
    const b = ev.target.closest('button[data-schedule-action]');
    if (b) scheduleAction(gen, b);
  };
  if (await fill(gen, 'limits', '/limits', limitsTable)) await fill(gen, 'schedules', '/schedules', schedulesTable);
}

/** GET `path` drawn by `draw` into element `id` (or its error); false when the page was left or a key is asked for. */
async function fill(gen, id, path, draw) {
  let got;
  try {
    got = await authed(() => api('GET', path));
  } catch (e) {
    if (gen !== generation) return false;
    document.getElementById(id).innerHTML = `<p class="error-box">${esc(String(e))}</p>`;
    return true;
  }
  if (!got || gen !== generation) return false;
  document.getElementById(id).innerHTML = draw(got.data);
  return true;
}

/** Where a limit's key comes from: `input:/customer`, `given`, `none`. */
function keySource(k) {
  if (k == null) return DASH;
  if (k === 'given') return 'given at start';
  if (k === 'none') return 'none <span class="muted">(one count for all)</span>';
  if (k.startsWith('input:')) return `input <code>${esc(k.slice('input:'.length))}</code>`;
  return esc(k);
}

/** The runs list filtered to a workflow's queued runs (it filters by workflow, not by key). */
const queuedLink = (wf) => `<a href="${esc('/?' + new URLSearchParams({ status: 'queued', workflow: wf }))}" data-nav
  title="Every queued run of ${esc(wf)} (the list does not filter by key)">${esc(wf)}</a>`;

function limitsTable(data) {
  const limits = data.limits || [];
  if (!limits.length) return '<p class="muted">No concurrency limit is declared.</p>';
  const rows = limits.map((l) => {
    const keys = l.keys.length ? l.keys : [null];
    const span = `rowspan="${keys.length}"`;
    const head = `<td ${span}><b>${esc(l.name)}</b></td>
      <td ${span} class="num">${l.max != null ? esc(l.max) : `<span class="muted" title="no longer declared">—</span>`}</td>
      <td ${span}>${keySource(l.key)}</td>
      <td ${span}>${l.workflows.map(esc).join(', ')}</td>`;
    return keys.map((k, i) => `<tr data-limit="${esc(l.name)}"${k ? ` data-key="${esc(k.key)}"` : ''}>${i === 0 ? head : ''}
      <td class="mono">${!k ? DASH : k.key === '' ? '<span class="muted">(all runs)</span>' : esc(k.key)}</td>
      <td class="num holders">${k ? esc(k.holders) : DASH}</td>
      <td class="num waiters">${k ? esc(k.waiters) : DASH}</td>
      <td class="queued">${k ? l.workflows.map(queuedLink).join(' ') : DASH}</td></tr>`).join('');
  }).join('');
  return `<p class="muted">Per key, how many of your runs hold a slot and how many are queued for one; a key no run holds or waits for is not listed.</p>
    <table class="runs"><thead><tr><th>Limit</th><th>Max</th><th>Key from</th><th>Workflows</th><th>Key</th>
    <th>Holders</th><th>Waiters</th><th>Queued runs</th></tr></thead><tbody>${rows}</tbody></table>`;
}

function schedulesTable(data) {
  const list = data.schedules || [];
  if (!list.length) return '<p class="muted">No schedule is declared for this tenant.</p>';
  const rows = list.map((s) => {
    const next = instant(s.next);
    const state = s.disabled ? '<span class="undeployed" title="Disabled on this deployment (--schedules-disabled); resuming does not enable it">disabled</span>'
      : s.paused ? '<b>paused</b>' : 'active';
    const button = (action, label) => `<button type="button" data-schedule-action="${action}" data-name="${esc(s.name)}">${label}</button>`;
    return `<tr data-schedule="${esc(s.name)}" data-paused="${esc(s.paused)}">
      <td><b>${esc(s.name)}</b></td>
      <td>${esc(s.workflow)}</td>
      <td class="mono">${esc(s.cron)}</td>
      <td>${esc(s.timezone)}</td>
      <td class="next">${timeHtml(next)}${next == null ? '' : ` <span class="muted">${esc(relative(next))}</span>`}</td>
      <td class="state">${state}</td>
      <td>${s.last_run_id ? `${timeHtml(instant(s.last_fired))} ${runLink(s.last_run_id, 'its run')}` : DASH}</td>
      <td><div class="buttons">${s.paused ? button('resume', 'Resume') : button('pause', 'Pause')}${button('trigger', 'Trigger now')}</div></td></tr>`;
  }).join('');
  return `<table class="runs"><thead><tr><th>Schedule</th><th>Workflow</th><th>Cron</th><th>Time zone</th><th>Next tick</th>
    <th>State</th><th>Last tick</th><th></th></tr></thead><tbody>${rows}</tbody></table>`;
}

/** POST /schedules/{name}/pause, /resume or /trigger; says what the API answered, then reads the table again. */
async function scheduleAction(gen, button) {
  const name = button.dataset.name, action = button.dataset.scheduleAction;
  main.querySelectorAll('button[data-schedule-action]').forEach((b) => { b.disabled = true; });
  let answer;
  try {
    const got = await authed(() => api('POST', `/schedules/${encodeURIComponent(name)}/${action}`));
    if (!got) return;
    const d = got.data;
    answer = action === 'trigger'
      ? `<p class="note">Triggered ${esc(name)}: ${runLink(d.id)} ${badge(d.status)}</p>`
      : `<p class="note">${action === 'pause' ? 'Paused' : 'Resumed'} ${esc(name)}: ${d.disabled ? 'disabled on this deployment, it fires nothing'
        : d.paused ? 'it fires nothing until resumed' : `next tick ${timeHtml(instant(d.next))}`}</p>`;
  } catch (e) {
    answer = `<p class="error-box">${esc(String(e))}</p>`;
  }
  if (gen !== generation) return;
  document.getElementById('schedule-answer').innerHTML = answer;
  await fill(gen, 'schedules', '/schedules', schedulesTable);
}

// ---------- a run: the model behind the waterfall ----------
const WAITING = new Set(['Wait', 'Callback', 'WaitForEvent', 'ChainedInvoke']);
const GROUP = new Set(['RunInChildContext', 'Parallel', 'ParallelBranch', 'Map', 'MapIteration', 'WaitForCallback']);

/** Operations from the timeline: start and end, attempts, state, nesting by ParentId. */
function buildModel(events) {
  const ops = new Map();
  const order = [];
  const run = { start: null, end: null, invocations: [], restarts: [], nextWakeAt: null, heartbeats: new Map() };
  for (const e of events) {
    const t = e.EventType, d = e.Details || {}, at = instant(e.EventTimestamp);
    if (run.start == null) run.start = at;
    if (t === 'ExecutionStarted' && d.ParentRunId) run.parent = d.ParentRunId;
    if (t === 'ExecutionSucceeded' || t === 'ExecutionFailed' || t === 'ExecutionCancelled') run.end = at;
    if (t === 'InvocationCompleted') { run.invocations.push(at); run.nextWakeAt = instant(d.NextWakeAt); }
    if (t === 'CallbackDelivered' && d.Outcome === 'heartbeat') run.heartbeats.set(d.CallbackId, at);
    // Who cancelled or paused it (goal 4 of issue 47: every action names its caller).
    if ((t === 'ExecutionCancelled' || t === 'CancelRequested') && d.CancelledBy) run.cancelledBy = d.CancelledBy;
    if (t === 'RunPaused') { run.pausedBy = d.PausedBy || null; run.pausedAt = at; }
    // Restarted in place, a finished run goes on: its end is the next one's.
    if (t === 'RunRestarted') { run.restarts.push({ at, details: d }); if (!d.Fork) run.end = null; }
    if (!e.Id) continue;
    let op = ops.get(e.Id);
    if (!op) {
      op = { id: e.Id, name: e.Name || e.Id, sub: e.SubType, parent: e.ParentId, start: at, end: null,
        state: 'open', attempts: [], children: [], events: [], child: null, details: {} };
      ops.set(e.Id, op);
      order.push(op);
    }
    op.events.push(e);
    op.sub = op.sub || e.SubType;
    op.parent = op.parent || e.ParentId;
    Object.assign(op.details, d);
    const last = op.attempts[op.attempts.length - 1];
    const close = (state) => {
      if (last && last.end == null) { last.end = at; last.state = state; } else op.attempts.push({ n: d.Attempt || op.attempts.length + 1, r: run.restarts.length, start: at, end: at, state });
    };
    if (t === 'StepStarted') {
      // `r`: how many restarts came before it; attempts of different restarts are not retries of each other.
      op.attempts.push({ n: d.Attempt || op.attempts.length + 1, r: run.restarts.length, start: at, end: null, state: 'open' });
    } else if (t === 'StepSucceeded') {
      close('ok');
      // A wait_for_condition check that found "not yet" succeeded and is retried.
      if (d.Retrying) op.retryAt = instant(d.NextAttemptAt); else { op.end = at; op.state = 'ok'; }
    } else if (t === 'StepFailed') {
      // Timelines of earlier releases recorded a "not yet" as a retrying StepFailed
      // without an error: a finished check, not a failure.
      close(op.sub === 'WaitForCondition' && d.Retrying && !d.Error ? 'ok' : 'failed');
      if (d.Retrying) op.retryAt = instant(d.NextAttemptAt); else { op.end = at; op.state = 'failed'; }
    } else if (t === 'ToolCallRecorded') {
      if (d.Status === 'unknown') op.state = 'unknown';
    } else if (t === 'ChainedInvokeStarted') {
      if (d.ChildRunId) op.child = d.ChildRunId;
    } else if (/Succeeded$/.test(t)) {
      op.end = at; op.state = 'ok';
    } else if (/(Failed|TimedOut)$/.test(t)) {
      op.end = at; op.state = 'failed';
    }
  }
  const roots = [];
  for (const op of order) {
    const parent = op.parent && ops.get(op.parent);
    if (parent && parent !== op) parent.children.push(op); else roots.push(op);
  }
  // An operation spans its children: a map or context whose own start event is missing
  // still begins where its first child does.
  const span = (op) => {
    for (const c of op.children) {
      span(c);
      op.start = Math.min(op.start, c.start);
    }
  };
  roots.forEach(span);
  return { ops, roots, run };
}

function barKind(op) {
  if (GROUP.has(op.sub)) return 'group';
  if (WAITING.has(op.sub)) return 'waiting';
  return 'work';
}

/** The waterfall: one row per operation, one more per attempt when it took several. */
function waterfall(model, view) {
  const { roots, run } = model;
  if (run.start == null) return { rows: ['<p class="muted">No events yet.</p>'], legend: '' };
  const live = !FINISHED.includes(view.status);
  const t0 = run.start;
  const t1 = Math.max(run.end ?? 0, live ? Date.now() : 0, ...model.run.invocations, t0 + 1);
  const span = t1 - t0;
  const pct = (t) => ((Math.min(Math.max(t, t0), t1) - t0) / span) * 100;
  const bar = (start, end, cls, title) => {
    const open = end == null;
    const e = open ? t1 : end;
    // A bar at the very end is moved left by its minimum width so it stays in view.
    return `<span class="bar ${cls}${open ? ' open' : ''}" style="left:min(${pct(start).toFixed(3)}%, calc(100% - 3px));width:${(pct(e) - pct(start)).toFixed(3)}%" title="${esc(title)}"></span>`;
  };
  const out = [];
  const ticks = [0, 0.25, 0.5, 0.75, 1].map((f) => `<span class="tick" style="left:${f * 100}%">${f ? '+' + duration(span * f) : localTime(t0).slice(11, 19)}</span>`).join('');
  out.push(`<div class="wf-axis"><span>Operation</span><span class="track">${ticks}</span></div>`);
  const runTitle = `${view.workflow}: ${duration((run.end ?? t1) - t0)}${run.end ? '' : ' so far'}`;
  const marks = run.invocations.map((t) => `<span class="tickmark" style="left:${pct(t).toFixed(3)}%" title="invocation ended ${esc(rfc3339(t))}"></span>`).join('') +
    run.restarts.map((r) => `<span class="tickmark restart" style="left:${pct(r.at).toFixed(3)}%" title="${esc(restartedText(r.details) + ' · ' + rfc3339(r.at))}"></span>`).join('');
  out.push(`<div class="wf-row" data-op=""><span class="label"><b>${esc(view.workflow)}</b><span class="sub">run</span></span>
    <span class="track">${bar(t0, run.end, 'run', runTitle)}${marks}</span></div>`);
  const visit = (op, depth) => {
    const kind = barKind(op);
    const end = op.end ?? (live ? null : (run.end ?? t1));
    const took = (op.end ?? (live ? Date.now() : t1)) - op.start;
    const state = op.state === 'open' ? (live ? 'in progress' : 'unfinished') : op.state === 'ok' ? 'succeeded' : op.state;
    const title = `${op.name} (${op.sub || 'operation'}${modelCallLabel(op)}) · ${state} · ${duration(took)}` +
      (op.attempts.length > 1 ? ` · ${op.attempts.length} attempts` : '');
    let bars;
    if (kind === 'work' && op.attempts.length) {
      bars = op.attempts.map((a, i) => {
        const next = op.attempts[i + 1];
        const gap = a.end != null && (next ? next.r === a.r : op.state === 'open' && op.retryAt) && (a.state === 'failed' || op.sub === 'WaitForCondition')
          ? bar(a.end, next ? next.start : null, 'waiting', `retry wait after attempt ${a.n}`) : '';
        return gap + bar(a.start, a.end ?? (live ? null : end), a.state === 'open' ? '' : a.state, `attempt ${a.n}: ${a.state === 'ok' ? 'succeeded' : a.state}`);
      }).join('');
    } else {
      const cls = kind === 'work' ? (op.state === 'open' ? '' : op.state) : `${kind} ${op.state === 'open' ? '' : op.state}`;
      bars = bar(op.start, end, cls, title);
    }
    const child = op.child ? ` · ${runLink(op.child, 'child run')}` : '';
    out.push(`<div class="wf-row" data-op="${esc(op.id)}" data-state="${esc(op.state)}" data-depth="${depth}" title="${esc(title)}">
      <span class="label" style="padding-left:${depth * 16}px">${esc(op.name)}<span class="sub">${esc(op.sub || '')}${modelCallLabel(op)} · ${duration(took)}</span>${child}</span>
      <span class="track">${bars}</span></div>`);
    if (op.attempts.length > 1) {
      for (const a of op.attempts) {
        const r = `attempt ${a.n}${a.r ? ` after restart ${a.r}` : ''}: ${a.state === 'ok' ? 'succeeded' : a.state}`;
        out.push(`<div class="wf-row attempt" data-op="${esc(op.id)}" data-attempt="${a.n}">
          <span class="label" style="padding-left:${depth * 16 + 16}px">attempt ${a.n}${a.r ? ` · after restart ${a.r}` : ''}<span class="sub">${esc(a.state)} · ${duration((a.end ?? Date.now()) - a.start)}</span></span>
          <span class="track">${bar(a.start, a.end ?? (live ? null : end), a.state === 'open' ? '' : a.state, r)}</span></div>`);
      }
    }
    for (const c of op.children) visit(c, depth + 1);
  };
  for (const op of roots) visit(op, 0);
  const legend = `<div class="wf-legend"><span><span class="bar ok"></span>step attempt</span>
    <span><span class="bar failed"></span>failed attempt</span><span><span class="bar waiting"></span>waiting (timer, callback, event, retry)</span>
    <span><span class="bar group"></span>child context / branch</span><span><span class="tickmark" style="position:static;display:inline-block;vertical-align:middle"></span> invocation ended</span>${run.restarts.length ? '<span><span class="tickmark restart" style="position:static;display:inline-block;vertical-align:middle"></span> restarted</span>' : ''}</div>`;
  return { rows: out, legend };
}

// ---------- a run: the page ----------
function summary(d) {
  if (!d) return '';
  const s = JSON.stringify(d);
  return s.length > 140 ? s.slice(0, 137) + '…' : s;
}

function eventRows(events) {
  return events.map((e) => {
    const cls = /Succeeded$/.test(e.EventType) ? 'ev-Succeeded' : /(Failed|TimedOut)$/.test(e.EventType) ? 'ev-Failed' : '';
    return `<tr class="ev" data-seq="${e.Seq}" data-type="${esc(e.EventType)}"><td class="num">${e.Seq}</td><td class="t">${timeHtml(instant(e.EventTimestamp))}</td>
      <td class="${cls}">${esc(e.EventType)}</td><td>${esc(e.SubType || '')}</td><td class="mono">${esc(e.Id || '')}</td>
      <td class="mono">${esc(e.ParentId || '')}</td><td class="summary">${e.EventType === 'RunRestarted' ? restartedHtml(e.Details) : esc(summary(e.Details))}</td></tr>`;
  }).join('');
}

/** A `RunRestarted` event's details in words: who, from where, what it superseded. */
function restartedText(d) {
  d = d || {};
  const parts = [`restarted by ${d.RestartedBy || '?'}`, d.From ? `from ${d.From}` : 'from where it stopped', `restart ${d.Restart ?? '?'}`];
  if (d.Fork) parts.push(`as the new run ${d.Fork}`);
  if (d.ForkedFrom) parts.push(`forked from ${d.ForkedFrom}`);
  if (d.Superseded) parts.push(`${d.Superseded} journal entr${d.Superseded === 1 ? 'y' : 'ies'} superseded`);
  if (d.Replayed != null) parts.push(`${d.Replayed} replayed to check it`);
  if (d.RepeatToolCalls) parts.push('tool calls made again');
  return parts.join(' · ');
}
/** The same, with the runs it names linked. */
function restartedHtml(d) {
  d = d || {};
  let html = esc(restartedText(Object.assign({}, d, { Fork: null, ForkedFrom: null })));
  if (d.Fork) html += ` · fork: ${runLink(d.Fork)}`;
  if (d.ForkedFrom) html += ` · forked from ${runLink(d.ForkedFrom)}`;
  return `<span class="restarted">${html}</span>`;
}

/** The run's latest restart (its view's `restart`): by whom, when, from where; the fork or its origin linked. */
function restartHtml(view) {
  const r = view.restart;
  if (!r) return '';
  const who = `by <b>${esc(r.by)}</b> at ${timeHtml(instant(r.at))}`;
  const from = r.from ? `from <code>${esc(r.from)}</code>` : 'from where it stopped';
  const tools = r.repeat_tool_calls ? '; tool calls after the point were made again' : '';
  let line;
  if (r.forked_from) line = `Forked from ${runLink(r.forked_from)} ${who}: it goes on ${from}${tools}.`;
  else if (r.fork) line = `Fork: ${runLink(r.fork)} — a new run made of this one ${who}, going on ${from}${tools}. This run stays as it was.`;
  else line = `Restarted ${who} ${from} (restart ${esc(r.number)})${tools}. What its journal held from there on is superseded, kept in the timeline.`;
  return `<p class="note restart-info" id="restart-info">${line}</p>`;
}

/** The first operation the timeline shows failing, which a restart goes on from by default. */
function firstFailed(model) {
  for (const op of model.ops.values()) if (op.state === 'failed') return op;
  return null;
}
function opDepth(model, op) {
  let n = 0;
  for (let p = op.parent && model.ops.get(op.parent); p && n < 32; p = p.parent && model.ops.get(p.parent)) n++;
  return n;
}
const opState = (op) => (op.state === 'open' ? 'unfinished' : op.state === 'ok' ? 'succeeded' : op.state);

/** A queued run's line in words: "per-customer acme · next in line". */
function queuedText(q) {
  const key = q.key ? ` ${q.key}` : '';
  if (q.debounce) return `${q.debounce}${key} · ${q.starts || 1} start${q.starts === 1 ? '' : 's'} · begins ${q.next_at ? relative(instant(q.next_at)) : 'soon'}`;
  if (q.next_at) return `${q.limit}${key} · turn ${relative(instant(q.next_at))}`;
  const place = q.position ? (q.position === 1 ? 'next in line' : `${q.position} in line`) : 'in line';
  return `${q.limit}${key} · ${place}`;
}

function queuedTitle(q) {
  if (q.debounce) return `the debounce ${q.debounce} gathers the starts of its key into this run`;
  if (q.next_at) return `waits for its turn under the start rate ${q.limit}`;
  return `waits for a slot of the concurrency limit ${q.limit}`;
}

function explain(view, model) {
  const { run } = model;
  const took = (finishedAt(view) ?? Date.now()) - instant(view.created_at);
  const lines = [];
  switch (view.status) {
    case 'queued': {
      const q = view.queued || {};
      if (q.debounce) {
        lines.push(`<p><b>Queued</b>: the debounce <code>${esc(q.debounce)}</code> gathers the starts${q.key ? ` of the key <code>${esc(q.key)}</code>` : ''} into this run — ${q.starts || 1} so far. It begins ${q.next_at ? `${timeHtml(instant(q.next_at))} (${relative(instant(q.next_at))})` : 'soon'}, unless another start joins it first: each moves it a period on, up to the debounce's maximum delay. It costs nothing while it waits.</p>`);
        break;
      }
      if (q.next_at) {
        lines.push(`<p><b>Queued</b>: the start rate <code>${esc(q.limit || '?')}</code>${q.key ? ` for the key <code>${esc(q.key)}</code>` : ''} lets it begin at its turn, ${timeHtml(instant(q.next_at))} (${relative(instant(q.next_at))}). It costs nothing while it waits and takes deliveries meanwhile.</p>`);
        break;
      }
      lines.push(`<p><b>Queued</b>: started, but the concurrency limit <code>${esc(q.limit || '?')}</code> is full${q.key ? ` for the key <code>${esc(q.key)}</code>` : ''}: as many runs as it allows hold it. It costs nothing while it waits, takes deliveries meanwhile, and begins the moment a run holding the key finishes${q.position ? ` — it is <b>${q.position === 1 ? 'next' : `number ${q.position}`}</b> in line` : ''}. <code>GET /limits</code> (or <code>siesta runs limits</code>) shows who holds each key.</p>`);
      break;
    }
    case 'pending': lines.push('<p><b>Pending</b>: started and queued; a worker picks it up at its next wake-up.</p>'); break;
    case 'paused': lines.push(`<p><b>Paused</b> by ${run.pausedBy ? `<b>${esc(run.pausedBy)}</b>` : 'an operator'}${run.pausedAt != null ? ` at ${timeHtml(run.pausedAt)}` : ''}: it takes no turn until resumed. Events and webhooks sent to it are recorded; timers that fall due meanwhile fire when it is resumed (<b>Resume…</b> below, or <code>siesta runs resume</code>).</p>`); break;
    case 'running': lines.push('<p><b>Running</b>: a worker holds its lease and is executing the workflow from its journal.</p>'); break;
    case 'waiting': {
      lines.push('<p><b>Waiting</b>: suspended — no worker holds it and nothing runs until one of these happens:</p><ul>');
      for (const w of view.waits || []) lines.push(`<li>${waitSentence(w, model)}</li>`);
      if (!(view.waits || []).length) lines.push('<li>a delivery or its next wake-up</li>');
      lines.push('</ul>');
      if (run.nextWakeAt) lines.push(`<p>Next wake-up: ${timeHtml(run.nextWakeAt)} (${relative(run.nextWakeAt)}), when the engine checks its deadlines even if nothing arrives.</p>`);
      break;
    }
    case 'parked': {
      const unknown = unknownToolCalls(model);
      lines.push(`<p><b>Parked</b>: it needs an operator; nothing runs until someone acts.</p><p class="error-box">${esc(errorText(view.error))}</p>`);
      lines.push(unknown.length
        ? '<p>A side-effecting tool call was found running after a crash and nothing could tell whether it happened. Resolve it (below), or cancel the run.</p>'
        : view.error && view.error.kind === 'NonDeterminism'
          ? '<p>Its journal no longer matches the code. Once a build whose code replays it serves this page, <b>Upgrade to this build</b> checks that and resumes it in one step (refused, naming where it diverges, otherwise); cancel ends it.</p>'
          : '<p>Resume wakes it to replay from its journal — fix the cause first (e.g. deploy code that matches its journal), or it parks or fails again; cancel ends it.</p>');
      break;
    }
    case 'completed': lines.push(`<p><b>Completed</b> at ${timeHtml(instant(view.updated_at))} after ${duration(took)}.</p>`); break;
    case 'failed': lines.push(`<p><b>Failed</b> at ${timeHtml(instant(view.updated_at))} after ${duration(took)}:</p><p class="error-box">${esc(errorText(view.error))}</p>`); break;
    case 'cancelled': lines.push(`<p><b>Cancelled</b>${run.cancelledBy ? ` by <b>${esc(run.cancelledBy)}</b>` : ''} at ${timeHtml(instant(view.updated_at))} after ${duration(took)}.</p>`); break;
    default: lines.push(`<p>${esc(view.status)}</p>`);
  }
  lines.push(restartHtml(view));
  if (view.cancel_requested) lines.push('<p class="note">Cancellation was requested: it is honoured at the next step boundary.</p>');
  if (view.awaiting_build) {
    lines.push(`<p class="note">Waiting for its build <code>${esc(view.awaiting_build)}</code>: it started on that build, and this server runs only its own, so nothing here replays it on code it did not start on. It stays as it is — deliveries to it are recorded — until <code>${esc(view.awaiting_build)}</code> serves it again, or an upgrade moves it to this build (only if its journal replays here).</p>`);
  }
  return lines.join('');
}

function opName(model, position) {
  const op = model.ops.get(position);
  return op ? op.name : position;
}

function waitSentence(w, model) {
  const deadline = instant(w.deadline);
  const until = deadline != null ? ` — or gives up at ${timeHtml(deadline)} (${relative(deadline)})` : '';
  switch (w.kind) {
    case 'callback': return `callback <b>${esc(opName(model, w.operation))}</b> is completed through its webhook URL or the API${until}`;
    case 'event': return `event <b>${esc(w.event)}</b> is delivered${until}`;
    case 'timer': return `the timer <b>${esc(opName(model, w.operation))}</b> fires at ${timeHtml(deadline)} (${relative(deadline)})`;
    case 'retry': return `operation <b>${esc(opName(model, w.operation))}</b> is tried again at ${timeHtml(deadline)} (${relative(deadline)})`;
    case 'child': {
      const op = model.ops.get(w.operation);
      return `the ${op && op.child ? runLink(op.child, 'child run') : 'child run'} of <b>${esc(opName(model, w.operation))}</b> finishes`;
    }
    default: return `${esc(w.kind)} ${esc(w.operation)}${until}`;
  }
}

function heartbeatDeadline(w, model) {
  const op = model.ops.get(w.operation);
  const ms = op && op.details.HeartbeatTimeoutMs;
  if (!ms) return null;
  const last = model.run.heartbeats.get(w.callback_id);
  return Math.max(op.start, last ?? 0) + ms;
}

// A model call (siesta-ai) is a step whose result records the model, its token usage,
// finish reason and latency, and the messages it was asked beyond the earlier calls'.
function modelCall(op) {
  const r = op.sub === 'ModelCall' && op.details && op.details.Result;
  return r && typeof r === 'object' && r.usage ? r : null;
}

function modelCallLabel(op) {
  const r = modelCall(op);
  if (!r) return '';
  return ` · ${r.model} · ${r.usage.input_tokens}→${r.usage.output_tokens} tokens · ${r.finish_reason || '—'} · ${duration(r.latency_ms)}`;
}

// An agent run read as a conversation: each model call's newly asked messages, then
// its reply (text and tool calls); a tool's result arrives as the next call's asked
// message. A wait for an approval event shows Approve and Refuse beside the tool call
// it holds back.
// The live text of the model call in progress, read from the run's stream `tokens` by
// long-poll pages (an EventSource cannot send the API key). One reader per run page;
// it survives the page's re-renders and stops when the page is left or the stream ends.
// At a `discard` chunk a step's earlier text is dropped (a failed attempt's words).
const tokens = { run: null, gen: -1, from: 0, text: new Map(), last: null, closed: false };

function followTokens(runId) {
  if (tokens.run === runId && tokens.gen === generation) return;
  Object.assign(tokens, { run: runId, gen: generation, from: 0, text: new Map(), last: null, closed: false });
  const gen = generation;
  const poll = async () => {
    while (gen === generation && !tokens.closed) {
      let page;
      try {
        page = (await api('GET', `/runs/${encodeURIComponent(runId)}/streams/tokens?from=${tokens.from}&wait=10`)).data;
      } catch {
        await new Promise((r) => setTimeout(r, 2000));
        continue;
      }
      if (gen !== generation) return;
      for (const c of page.chunks || []) {
        const step = c.step || '';
        if (c.kind === 'discard') tokens.text.set(step, '');
        else if (c.kind === 'data' && typeof c.data === 'string') {
          tokens.text.set(step, (tokens.text.get(step) || '') + c.data);
          tokens.last = step;
        }
      }
      tokens.from = page.next;
      tokens.closed = !!page.closed;
      showTokens();
    }
  };
  poll();
}

// Shows the streamed text of the newest call whose reply is not in the conversation yet.
function showTokens() {
  const el = document.getElementById('live-tokens');
  if (!el) return;
  const shown = new Set([...document.querySelectorAll('[data-model-call]')].map((t) => t.dataset.modelCall));
  const text = tokens.last && !shown.has(tokens.last) ? tokens.text.get(tokens.last) : '';
  el.hidden = !text;
  el.innerHTML = text ? `<b>assistant</b> ${esc(text)}` : '';
}

function conversationHtml(view, model) {
  const calls = [];
  for (const op of model.ops.values()) { const r = modelCall(op); if (r) calls.push([op, r]); }
  if (!calls.length) return '';
  const toolNames = new Map();
  const said = (m) => {
    if (m.role === 'tool') {
      const name = toolNames.get(m.tool_call_id) || 'tool';
      return `<div class="msg msg-tool"><b>${esc(name)} →</b> <span class="mono">${esc(m.content || '')}</span></div>`;
    }
    const calls = (m.tool_calls || []).map((c) => {
      toolNames.set(c.id, c.name);
      return `<div class="tool-call" data-tool-call="${esc(c.id)}"><b>calls ${esc(c.name)}</b> <span class="mono">${esc(json(c.arguments))}</span></div>`;
    }).join('');
    return `<div class="msg msg-${esc(m.role)}"><b>${esc(m.role)}</b> ${esc(m.content || '')}${calls}</div>`;
  };
  const rows = calls.map(([op, r]) => `<div class="turn" data-model-call="${esc(op.id)}">
    ${((r.asked && r.asked.messages) || []).map(said).join('')}${said(r.reply)}
    <div class="muted call-meta">${esc(op.id)} · ${esc(r.model)} · ${r.usage.input_tokens}→${r.usage.output_tokens} tokens · ${esc(r.finish_reason || '—')} · ${duration(r.latency_ms)}</div></div>`).join('');
  const approval = (view.waits || []).find((w) => w.kind === 'event' && /approv/i.test(w.event || ''));
  const pending = approval ? `<div class="pending-approval" id="pending-approval"><b>Waiting for a person</b> to approve the tool call above (event <code>${esc(approval.event)}</code>).
    <div class="buttons"><button type="button" class="primary" data-action="approve" data-event="${esc(approval.event)}">Approve…</button>
    <button type="button" class="danger" data-action="refuse" data-event="${esc(approval.event)}">Refuse…</button></div></div>` : '';
  const live = FINISHED.includes(view.status) ? '' : '<div class="msg msg-assistant live" id="live-tokens" hidden></div>';
  return `<section class="card conversation" id="conversation"><h2>Conversation <span class="muted">(${calls.length} model calls)</span></h2>${rows}${live}${pending}</section>`;
}

function unknownToolCalls(model) {
  return [...model.ops.values()].filter((op) => op.state === 'unknown');
}

function waitsHtml(view, model) {
  const waits = view.waits || [];
  if (!waits.length) return '';
  const cards = waits.map((w, i) => {
    const rows = [`<dt>Operation</dt><dd class="mono">${esc(w.operation)}</dd>`];
    if (w.url) rows.push(`<dt>Webhook URL</dt><dd><span class="url"><code class="callback-url">${esc(w.url)}</code>
      <button type="button" data-copy="${esc(w.url)}" title="Copy the URL">Copy</button></span></dd>`);
    if (w.callback_id) rows.push(`<dt>Callback id</dt><dd class="mono">${esc(w.callback_id)}</dd>`);
    if (w.event) rows.push(`<dt>Awaited event</dt><dd class="mono">${esc(w.event)}</dd>`);
    const deadline = instant(w.deadline);
    if (deadline != null) rows.push(`<dt>${w.kind === 'timer' || w.kind === 'retry' ? 'Fires' : 'Deadline'}</dt><dd>${timeHtml(deadline)} <span class="muted">(${relative(deadline)})</span></dd>`);
    const hb = w.kind === 'callback' ? heartbeatDeadline(w, model) : null;
    if (hb != null) rows.push(`<dt>Heartbeat by</dt><dd>${timeHtml(hb)} <span class="muted">(${relative(hb)})</span></dd>`);
    let buttons = '';
    if (w.kind === 'callback') {
      buttons = `<div class="buttons"><button type="button" data-action="callback-succeed" data-wait="${i}">Succeed…</button>
        <button type="button" data-action="callback-fail" data-wait="${i}">Fail…</button>
        <button type="button" data-action="callback-heartbeat" data-wait="${i}">Heartbeat…</button></div>`;
    } else if (w.kind === 'event') {
      buttons = `<div class="buttons"><button type="button" data-action="event" data-event="${esc(w.event)}">Send event…</button></div>`;
    }
    return `<div class="wait" data-kind="${esc(w.kind)}"><span class="kind">${esc(w.kind)}</span><dl>${rows.join('')}</dl>${buttons}</div>`;
  }).join('');
  return `<section class="card"><h2>Pending waits</h2><div class="waits">${cards}</div></section>`;
}

function actionsHtml(view, model) {
  const done = FINISHED.includes(view.status);
  const b = [];
  if (!done) {
    b.push('<button type="button" data-action="event">Send event…</button>');
    b.push('<button type="button" data-action="message">Inject message…</button>');
  }
  if (view.status === 'paused') b.push('<button type="button" data-action="resume">Resume…</button>');
  if (['pending', 'waiting', 'running'].includes(view.status) && !view.pause_requested) {
    b.push('<button type="button" data-action="pause">Pause…</button>');
  }
  if (view.status === 'parked') {
    b.push('<button type="button" data-action="resume">Resume…</button>');
    for (const op of unknownToolCalls(model)) {
      b.push(`<button type="button" data-action="resolve" data-op="${esc(op.id)}">Resolve ${esc(op.name)}…</button>`);
    }
  }
  if (RESTARTABLE.includes(view.status)) b.push('<button type="button" data-action="restart">Restart…</button>');
  if (!done) b.push('<button type="button" data-action="upgrade">Upgrade to this build…</button>');
  if (!done) b.push(`<button type="button" class="danger" data-action="cancel" data-version="${view.version}">Cancel run…</button>`);
  if (!b.length) return '';
  return `<section class="card"><h2>Actions</h2><div class="buttons">${b.join('')}</div>
    <p class="muted">Each action asks first and is sent with <code>If-Match: "${view.version}"</code> (the version shown here); an error from the API is shown as it is.</p></section>`;
}

// ---------- large values ----------
// A value over the inline limit is kept in the artifact store; the API shows
// {"value_ref": {sha256, size, media_type, href}} in its place, and the page fetches the
// value from href only when the person opens it.
const isValueRef = (v) => !!(v && typeof v === 'object' && !Array.isArray(v) && v.value_ref &&
  typeof v.value_ref.href === 'string' && Object.keys(v).length === 1);
function bytes(n) {
  if (n < 1024) return n + ' B';
  if (n < 1024 * 1024) return (n / 1024).toFixed(1) + ' KB';
  return (n / 1024 / 1024).toFixed(1) + ' MB';
}
/** Every value reference inside `v`, with the path of keys that leads to it. */
function valueRefs(v, path = [], out = []) {
  if (isValueRef(v)) out.push({ path: path.join('.'), ref: v.value_ref });
  else if (v && typeof v === 'object') for (const [k, x] of Object.entries(v)) valueRefs(x, path.concat(k), out);
  return out;
}
/** A button that fetches a large value and shows it pretty-printed below itself. */
function valueRefHtml(ref, label) {
  return `<div class="value-ref"><button type="button" data-value-href="${esc(ref.href)}" data-sha="${esc(ref.sha256)}">` +
    `Open ${esc(label || 'value')} (${bytes(ref.size)})</button> <span class="muted">kept in the artifact store: ` +
    `<span class="mono">${esc(ref.media_type)}</span>, sha256 <span class="mono">${esc(ref.sha256.slice(0, 12))}…</span></span>` +
    '<pre class="json large-value" hidden></pre></div>';
}
function valueRefsHtml(v) {
  return valueRefs(v).map((r) => valueRefHtml(r.ref, r.path || 'value')).join('');
}
async function openValue(button) {
  const box = button.parentElement.querySelector('pre.large-value');
  if (!box.hidden && box.dataset.loaded) { box.hidden = true; return; }
  button.disabled = true;
  box.hidden = false;
  box.classList.remove('error-box');
  box.textContent = 'Loading…';
  try {
    const got = await authed(() => api('GET', button.dataset.valueHref));
    if (!got) return;
    box.textContent = typeof got.data === 'string' ? got.data : json(got.data);
    box.dataset.loaded = '';
  } catch (e) {
    box.textContent = String(e);
    box.classList.add('error-box');
  } finally {
    button.disabled = false;
  }
}
document.addEventListener('click', (ev) => {
  const b = ev.target.closest('button[data-value-href]');
  if (b) { ev.stopPropagation(); openValue(b); }
}, true);

function valueHtml(label, v) {
  if (v === undefined) return '';
  if (isValueRef(v)) return `<div><h2>${label}</h2>${valueRefHtml(v.value_ref, label.toLowerCase())}</div>`;
  return `<div><h2>${label}</h2><pre class="json">${esc(json(v))}</pre>${valueRefsHtml(v)}</div>`;
}

async function showRun(id) {
  const gen = generation;
  document.getElementById('crumbs').innerHTML = `<a href="/" data-nav>Runs</a> / <span class="mono">${esc(id)}</span>`;
  document.title = `${id} · Siesta`;
  const state = { id, view: null, etag: null, events: [], lastSeq: 0, model: null, open: new Set(), html: '', renderedEvents: 0 };
  const run = encodeURIComponent(id);
  // Read by the browser test and `siesta bench --ui` (ms since navigation start): when
  // the run (view, lifecycle, waits, input and output) and then its timeline were
  // fetched, rendered and painted. A task queued from the next frame runs after it.
  const figures = { startedMs: performance.now() };
  const painted = (key, f) => requestAnimationFrame(() => setTimeout(() => {
    figures[key] = performance.now();
    if (f) f();
  }));
  const setView = (got) => {
    state.view = got.data;
    state.etag = got.etag || `"${got.data.version}"`;
  };
  /** Timeline pages after the last event already read. `Seq` is gapless from 1, so on
   * the first read the second page is asked for beside the first: a run of up to 2 000
   * events costs one round trip, not two. */
  const timeline = async () => {
    const page = (after) => api('GET', `/runs/${run}/timeline?after=${after}&limit=1000`).then((t) => t.data.events || []);
    const pages = state.lastSeq === 0 ? [page(0), page(1000)] : [page(state.lastSeq)];
    let full = true;
    for (const p of pages) {
      const evs = await p;
      if (!full) continue;
      const fresh = evs.filter((e) => e.Seq > state.lastSeq);
      state.events.push(...fresh);
      if (fresh.length) state.lastSeq = fresh[fresh.length - 1].Seq;
      full = evs.length === 1000;
    }
    while (full) {
      const evs = await page(state.lastSeq);
      state.events.push(...evs);
      if (evs.length) state.lastSeq = evs[evs.length - 1].Seq;
      full = evs.length === 1000;
    }
  };
  const load = async () => {
    const first = !state.view;
    let got;
    try {
      got = await authed(async () => {
        const viewRead = api('GET', `/runs/${run}`);
        const timelineRead = timeline();
        timelineRead.catch(() => {}); // seen through Promise.all below
        if (first) {
          // The first screen needs only the run view: it is painted while the timeline
          // (the larger read) is still on its way.
          const v = await viewRead;
          if (gen !== generation) return null;
          figures.viewFetchedMs = performance.now();
          setView(v);
          state.model = buildModel([]);
          renderRun(state, true);
          figures.viewRenderedMs = performance.now();
          void main.offsetHeight; // style and layout, which the paint needs anyway, timed here
          figures.viewLaidOutMs = performance.now();
          painted('paintedMs');
        }
        const [v] = await Promise.all([viewRead, timelineRead]);
        return v;
      });
    } catch (e) {
      if (gen === generation) failPage(e);
      return;
    }
    if (!got || gen !== generation) return;
    const fetched = performance.now();
    const changed = first || got.data.version !== state.view.version || state.events.length !== state.renderedEvents;
    setView(got);
    if (changed) {
      state.model = buildModel(state.events);
      renderRun(state);
      state.renderedEvents = state.events.length;
      if (first) {
        const rendered = performance.now();
        void main.offsetHeight;
        Object.assign(figures, { events: state.events.length, timelineFetchedMs: fetched,
          fetchMs: fetched - figures.startedMs, renderMs: rendered - fetched, layoutMs: performance.now() - rendered });
        window.siestaRunRendered = figures;
        painted('timelinePaintedMs', () => { document.body.dataset.painted = ''; });
      }
    }
    if (!FINISHED.includes(state.view.status)) later(1000, load);
  };
  main.innerHTML = '<p class="muted">Loading…</p>';
  await load();
}

/** The run's page; with `timelinePending`, before its timeline arrived (placeholders). */
function renderRun(state, timelinePending = false) {
  const { view, model, events } = state;
  const end = finishedAt(view);
  const wf = timelinePending ? { rows: ['<p class="muted" id="timeline-loading">Loading the timeline…</p>'], legend: '' } : waterfall(model, view);
  const cv = codeVersion(view);
  main.innerHTML = `<h1>${esc(view.workflow)} ${badge(view.status)}</h1>
    <div class="meta"><span>run <b class="mono">${esc(view.id)}</b></span>
      ${view.tenant != null ? `<span>tenant <b>${esc(view.tenant)}</b></span>` : ''}
      ${model.run.parent ? `<span>started by ${runLink(model.run.parent, 'its parent run')}</span>` : ''}
      ${view.restart && view.restart.forked_from ? `<span>forked from ${runLink(view.restart.forked_from)}</span>` : ''}
      ${view.restart && view.restart.fork ? `<span>fork ${runLink(view.restart.fork)}</span>` : ''}
      <span>started <b>${timeHtml(instant(view.created_at))}</b></span>
      <span>finished <b>${timeHtml(end)}</b></span>
      <span>duration <b>${duration((end ?? Date.now()) - instant(view.created_at))}${end ? '' : ' so far'}</b></span>
      <span title="its ETag">version <b>${view.version}</b></span>
      ${cv != null ? `<span>code version <b class="mono">${esc(cv)}</b></span>` : ''}</div>
    <section class="card lifecycle" id="lifecycle">${explain(view, model)}</section>
    ${waitsHtml(view, model)}
    ${actionsHtml(view, model)}
    <section class="card"><h2>Timeline</h2><div class="wf" id="waterfall">${wf.rows.slice(0, FIRST_ROWS).join('')}<div id="wf-more"></div>${wf.legend}</div></section>
    ${timelinePending ? '' : conversationHtml(view, model)}
    <section class="card io">${valueHtml('Input', view.input)}${valueHtml('Output', view.output)}${view.error ? valueHtml('Error', view.error) : ''}</section>
    <section class="card"><h2>Events <span class="muted">(${timelinePending ? '…' : events.length})</span></h2>
      <div class="table-wrap"><table class="events"><thead><tr><th>Seq</th><th>Time</th><th>Event</th><th>Sub-type</th><th>Operation</th><th>Parent</th><th>Details</th></tr></thead>
      <tbody id="events">${eventRows(events.slice(0, FIRST_ROWS))}</tbody></table></div></section>`;
  // The rows below the fold are added after the first paint, a slice per task.
  const tbody = document.getElementById('events');
  const more = (from) => {
    if (from >= events.length || tbody !== document.getElementById('events')) return;
    tbody.insertAdjacentHTML('beforeend', eventRows(events.slice(from, from + MORE_ROWS)));
    for (const seq of state.open) if (seq > from && seq <= from + MORE_ROWS) toggleEvent(state, seq);
    later(0, () => more(from + MORE_ROWS));
  };
  afterPaint(() => {
    more(FIRST_ROWS);
    const rest = document.getElementById('wf-more');
    if (rest && wf.rows.length > FIRST_ROWS) rest.insertAdjacentHTML('beforeend', wf.rows.slice(FIRST_ROWS).join(''));
  });
  for (const seq of state.open) toggleEvent(state, seq);
  main.querySelectorAll('[data-copy]').forEach((b) => { b.onclick = () => copy(b); });
  main.querySelectorAll('[data-action]').forEach((b) => { b.onclick = () => openAction(state, b); });
  if (document.getElementById('conversation') && !FINISHED.includes(view.status)) { followTokens(view.id); showTokens(); }
  document.getElementById('events').onclick = (ev) => {
    const tr = ev.target.closest('tr.ev');
    if (!tr) return;
    const seq = Number(tr.dataset.seq);
    if (state.open.has(seq)) state.open.delete(seq); else state.open.add(seq);
    toggleEvent(state, seq);
  };
  document.getElementById('waterfall').onclick = (ev) => {
    const row = ev.target.closest('.wf-row');
    if (!row || ev.target.closest('a')) return;
    const op = row.dataset.op;
    const next = row.nextElementSibling;
    if (next && next.classList.contains('wf-detail')) { next.remove(); return; }
    const evs = state.events.filter((e) => (op ? e.Id === op : !e.Id));
    row.insertAdjacentHTML('afterend', `<div class="wf-detail"><pre class="json">${esc(json(evs))}</pre>${evs.map((e) => valueRefsHtml(e.Details)).join('')}</div>`);
  };
}

/** Shows or hides an event's details; the details row is built only when asked for. */
function toggleEvent(state, seq) {
  const tr = document.querySelector(`#events tr.ev[data-seq="${seq}"]`);
  if (!tr) return;
  const next = tr.nextElementSibling;
  if (next && next.classList.contains('detail')) { next.remove(); return; }
  const e = state.events.find((x) => x.Seq === seq);
  tr.insertAdjacentHTML('afterend', `<tr class="detail"><td colspan="7"><pre class="json">${esc(json(e))}</pre>${valueRefsHtml(e.Details)}</td></tr>`);
}

async function copy(button) {
  const text = button.dataset.copy;
  try {
    await navigator.clipboard.writeText(text);
  } catch {
    const t = document.createElement('textarea');
    t.value = text;
    document.body.appendChild(t);
    t.select();
    document.execCommand('copy');
    t.remove();
  }
  button.textContent = 'Copied';
  setTimeout(() => { button.textContent = 'Copy'; }, 1500);
}

// ---------- actions ----------
/** What each action sends; `fields` become inputs whose values build the request. */
function actionSpec(state, button) {
  const { view } = state;
  const run = encodeURIComponent(view.id);
  const wait = button.dataset.wait != null ? view.waits[Number(button.dataset.wait)] : null;
  const cb = wait && encodeURIComponent(wait.callback_id);
  switch (button.dataset.action) {
    case 'callback-succeed': return {
      title: `Complete callback “${opName(state.model, wait.operation)}” successfully`,
      what: 'The run receives this value where it awaits the callback, and wakes up.',
      fields: [{ name: 'body', label: 'Value (JSON)', json: true, value: '{\n  "status": "COMPLETED",\n  "transaction_id": "tx-1"\n}' }],
      request: (f) => ({ method: 'POST', path: `/callbacks/${cb}/succeed`, body: f.body }),
    };
    case 'callback-fail': return {
      title: `Fail callback “${opName(state.model, wait.operation)}”`,
      what: 'The run receives this error where it awaits the callback.',
      fields: [{ name: 'body', label: 'Error (JSON)', json: true, value: '{\n  "error": {"code": "Rejected", "message": "not approved"}\n}' }],
      request: (f) => ({ method: 'POST', path: `/callbacks/${cb}/fail`, body: f.body }),
    };
    case 'callback-heartbeat': return {
      title: `Heartbeat callback “${opName(state.model, wait.operation)}”`,
      what: 'Keeps the callback open: its heartbeat deadline starts again from now.',
      fields: [],
      request: () => ({ method: 'POST', path: `/callbacks/${cb}/heartbeat` }),
    };
    case 'event': return {
      title: 'Send an event',
      what: 'Delivers a named event; a run not yet waiting for it keeps it for its next wait on that name.',
      fields: [{ name: 'name', label: 'Event name', value: button.dataset.event || '' },
        { name: 'body', label: 'Payload (JSON)', json: true, value: '{}' }],
      request: (f) => ({ method: 'POST', path: `/runs/${run}/events/${encodeURIComponent(f.name)}`, body: f.body }),
    };
    case 'approve': case 'refuse': {
      const approved = button.dataset.action === 'approve';
      const event = button.dataset.event || 'approval';
      return {
        title: approved ? 'Approve the tool call' : 'Refuse the tool call',
        what: approved ? 'The tool call the agent waits on runs, once.'
          : 'The tool call is not made; the model is told who refused it and why.',
        fields: [{ name: 'by', label: 'Your name', value: 'operator' },
          { name: 'comment', label: 'Comment (optional)', value: '', optional: true }],
        request: (f) => ({ method: 'POST', path: `/runs/${run}/events/${encodeURIComponent(event)}`,
          body: JSON.stringify(Object.assign({ approved, by: f.by }, f.comment ? { comment: f.comment } : {})) }),
      };
    }
    case 'message': return {
      title: 'Inject a message',
      what: 'The run drains it at its next step boundary.',
      fields: [{ name: 'body', label: 'Message (JSON)', json: true, value: '{}' }],
      request: (f) => ({ method: 'POST', path: `/runs/${run}/messages`, body: f.body }),
    };
    case 'pause': return {
      title: 'Pause this run',
      what: 'A waiting run is paused at once; a running one at its next step boundary, once its attempt in flight is checkpointed. It takes no turn until resumed; events and webhooks are still recorded, and timers that fall due meanwhile fire on resume.',
      fields: [],
      request: () => ({ method: 'POST', path: `/runs/${run}/pause` }),
    };
    case 'cancel': return {
      title: 'Cancel this run',
      what: 'A waiting run is cancelled at once; a running one at its next step boundary. This cannot be undone.',
      fields: [],
      danger: true,
      request: () => ({ method: 'POST', path: `/runs/${run}/cancel` }),
    };
    case 'upgrade': return {
      title: 'Upgrade this run to this build',
      what: `Moves the run${codeVersion(view) ? ` from build ${codeVersion(view)}` : ''} to the build serving this page, only if its journal replays cleanly on this build's code now (nothing runs for the check). Otherwise nothing changes and the error names the position and both operation kinds where it diverges. A run parked for NonDeterminism is resumed by it once this build replays it.`,
      fields: [],
      request: () => ({ method: 'POST', path: `/runs/${run}/upgrade` }),
      // The same check the upgrade makes, shown before the person confirms.
      preview: async () => {
        const { data } = await api('GET', `/runs/${run}/replay-check`);
        if (data.result === 'clean') return `Replay check on build ${data.build_id}: clean (${data.replayed} journal entries replayed) — the upgrade will move it.`;
        const d = data.divergence || {};
        return `Replay check on build ${data.build_id}: diverges at ${d.position} (journal ${d.journal_kind || 'nothing'} vs code ${d.code_kind || 'nothing'}) — the upgrade will be refused.\n${d.message || ''}`;
      },
    };
    case 'resume': return {
      title: view.status === 'paused' ? 'Resume this paused run' : 'Resume this parked run',
      what: view.status === 'paused'
        ? 'Wakes it: it replays from its journal and takes what arrived while it was paused; a timer that fell due meanwhile fires now.'
        : 'Wakes it: it replays from its journal; if the cause is still there it parks again.',
      fields: [],
      request: () => ({ method: 'POST', path: `/runs/${run}/resume` }),
    };
    case 'restart': {
      const failed = firstFailed(state.model);
      const points = [...state.model.ops.values()].map((op) => ({
        value: op.id,
        label: `${'\u00a0\u00a0'.repeat(opDepth(state.model, op))}${op.name} (${op.sub || 'operation'}) · ${opState(op)} — ${op.id}`,
      }));
      return {
        title: 'Restart this run from a step',
        what: 'First the journal before the point is replayed on the build serving this page: if it does not replay, nothing changes and the error says where. In place, the run keeps its id and goes on from the point; its journal from there on is superseded, kept in the timeline. As a new run, a fork linked both ways goes on from the point and this run stays as it is. A tool call after the point whose outcome was recorded keeps it, unless you repeat tool calls.',
        fields: [
          { name: 'from', label: 'From', options: [{ value: '', label: failed
            ? `the first operation that failed (default): ${failed.name} — ${failed.id}`
            : 'the first operation that failed (default; none did: where the run stopped)' }, ...points] },
          { name: 'as_new', label: 'As a new run (a fork; this run stays as it is)', checkbox: true },
          { name: 'repeat_tool_calls', label: 'Repeat tool calls', checkbox: true, warning: REPEAT_WARNING },
        ],
        request: (f) => ({ method: 'POST', path: `/runs/${run}/restart`, body: JSON.stringify(restartBody(f)) }),
        // 200: the run, restarted in place; 201: the fork, whose page is shown.
        done: (got) => {
          if (got.status === 201 && got.data && got.data.id) navigate(`/ui/runs/${encodeURIComponent(got.data.id)}`);
          else route();
        },
        failure: (e) => (e.code === 'diverged' ? divergenceText(e) : null),
      };
    }
    case 'resolve': {
      const op = button.dataset.op;
      return {
        title: `Resolve the tool call “${opName(state.model, op)}”`,
        what: 'Say what happened to the call: succeeded (with its result), failed (with an error), or retry (make the call again — you take the risk of doing it twice). A failure is a message or {"code", "message"}.',
        fields: [{ name: 'outcome', label: 'Outcome', options: ['succeeded', 'failed', 'retry'] },
          { name: 'value', label: 'Result or error (JSON; ignored for retry)', json: true, value: '{}' }],
        danger: true,
        request: (f) => {
          const body = { outcome: f.outcome };
          if (f.outcome === 'succeeded') body.value = JSON.parse(f.value);
          if (f.outcome === 'failed') body.error = JSON.parse(f.value);
          return { method: 'POST', path: `/runs/${run}/operations/${encodeURIComponent(op)}/resolve`, body: JSON.stringify(body) };
        },
      };
    }
    default: return null;
  }
}

/** A dialog's input for field `f`: a select (of strings or {value, label}), a checkbox
 * (with an optional warning line), a JSON textarea or a text input. */
function fieldHtml(f) {
  if (f.checkbox) {
    return `<label class="check"><input type="checkbox" name="${esc(f.name)}"${f.checked ? ' checked' : ''}><span>${esc(f.label)}</span></label>` +
      (f.warning ? `<p class="warn">${esc(f.warning)}</p>` : '');
  }
  const input = f.options
    ? `<select name="${esc(f.name)}">${f.options.map((o) => (typeof o === 'string'
      ? `<option>${esc(o)}</option>` : `<option value="${esc(o.value)}">${esc(o.label)}</option>`)).join('')}</select>`
    : f.json ? `<textarea name="${esc(f.name)}" spellcheck="false">${esc(f.value)}</textarea>`
      : `<input type="text" name="${esc(f.name)}" value="${esc(f.value)}"${f.optional ? '' : ' required'}>`;
  return `<label>${esc(f.label)}</label>${input}`;
}

/** The values of a dialog's fields: a checkbox's is a boolean, the others' their text. */
function fieldValues(form, fields) {
  return Object.fromEntries(fields.map((f) => [f.name, f.checkbox ? form.elements[f.name].checked : form.elements[f.name].value]));
}

/** The body of a restart: only what differs from the defaults. */
function restartBody(f) {
  const body = {};
  const from = (f.from || '').trim();
  if (from) body.from = from;
  if (f.as_new) body.as_new = true;
  if (f.repeat_tool_calls) body.repeat_tool_calls = true;
  return body;
}

/** A 409 `diverged` in words: where the journal and the code part ways, and that nothing changed. */
function divergenceText(e) {
  const d = (e.error && e.error.divergence) || {};
  return `${e.status} ${e.code}: nothing changed — the journal before the point does not replay on the build serving this page.\n` +
    `Where: ${d.position ?? '?'}\nThe journal holds: ${d.journal_kind || 'nothing'}\nThe code now runs: ${d.code_kind || 'nothing'}\n` +
    (d.message || e.message);
}

function openAction(state, button) {
  const spec = actionSpec(state, button);
  if (!spec) return;
  const etag = state.etag;
  const key = 'ui-' + (crypto.randomUUID ? crypto.randomUUID() : String(Math.random()).slice(2));
  const fields = spec.fields.map(fieldHtml).join('');
  dialog.innerHTML = `<form method="dialog" data-action="${esc(button.dataset.action)}"><h2>${esc(spec.title)}</h2><p>${esc(spec.what)}</p>
    ${spec.preview ? '<p class="note" id="preview">Checking…</p>' : ''}<div class="what" id="what"></div>${fields}<p class="error-box" id="action-error"></p>
    <menu><button type="button" value="cancel" id="dialog-cancel">Back</button>
    <button type="submit" value="confirm" class="${spec.danger ? 'danger' : 'primary'}" id="dialog-confirm">Confirm</button></menu></form>`;
  const form = dialog.querySelector('form');
  const values = () => fieldValues(form, spec.fields);
  const describe = () => {
    let line;
    try {
      const r = spec.request(values());
      line = `${r.method} ${r.path}\nIf-Match: ${etag}\nIdempotency-Key: ${key}` + (r.body ? `\n\n${r.body}` : '');
    } catch { line = '(the JSON above is not valid yet)'; }
    document.getElementById('what').textContent = line;
  };
  describe();
  form.oninput = describe;
  document.getElementById('dialog-cancel').onclick = () => dialog.close();
  form.onsubmit = async (ev) => {
    ev.preventDefault();
    const errorBox = document.getElementById('action-error');
    const showError = (msg) => { errorBox.textContent = msg; errorBox.classList.add('shown'); };
    const v = values();
    for (const f of spec.fields) {
      if (!f.json || (f.name === 'value' && v.outcome === 'retry')) continue;
      try { JSON.parse(v[f.name]); } catch (e) { return showError(`${f.label} is not valid JSON: ${e.message}`); }
    }
    const confirmButton = document.getElementById('dialog-confirm');
    confirmButton.disabled = true;
    try {
      const r = spec.request(v);
      const got = await api(r.method, r.path, r.body, { 'If-Match': etag, 'Idempotency-Key': key });
      dialog.close();
      if (spec.done) spec.done(got); else route();
    } catch (e) {
      let msg = (spec.failure && spec.failure(e)) || String(e);
      if (e.status === 412) msg += '\nThe run changed since this page showed it; look again and retry.';
      showError(msg);
      confirmButton.disabled = false;
    }
  };
  dialog.showModal();
  const preview = form.querySelector('#preview');
  if (spec.preview && preview) {
    // Written into this dialog's own element: a dialog closed or replaced meanwhile
    // is left alone.
    spec.preview()
      .then((text) => { preview.textContent = text; })
      .catch((e) => { preview.textContent = 'Replay check failed: ' + e; });
  }
}

renderAuth();
route();
