// botmux operator console: plain JavaScript, no build step, no external asset.
// The token lives in sessionStorage (this tab only) and goes out as a bearer header with
// every JSON call; the event stream (EventSource cannot send headers) uses a short-lived
// ticket minted with that token. Everything shown is set as text (never as HTML).
"use strict";

const TOKEN_KEY = "botmux.token";
const state = {
  token: sessionStorage.getItem(TOKEN_KEY),
  mode: null, // "token" | "loopback" once logged in
  events: null,
  overview: null,
  cursor: null,
  refreshing: false,
};

const $ = (id) => document.getElementById(id);

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else if (name === "class") node.className = value;
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

async function api(path, method = "GET") {
  const headers = { Accept: "application/json" };
  if (state.token) headers.Authorization = "Bearer " + state.token;
  const init = { method, headers, cache: "no-store" };
  if (method === "POST") {
    headers["Content-Type"] = "application/json";
    init.body = "{}";
  }
  const response = await fetch(path, init);
  let body = null;
  try {
    body = await response.json();
  } catch (_) {
    body = null;
  }
  if (!response.ok) {
    const message = body && body.error ? body.error.message : response.statusText;
    throw new ApiError(response.status, `${message || "error"} (HTTP ${response.status})`);
  }
  return body;
}

// -- formatting ------------------------------------------------------------------------------

function ago(epoch) {
  if (epoch === null || epoch === undefined) return "";
  const s = Math.max(0, Date.now() / 1000 - epoch);
  if (s < 60) return `${Math.round(s)} s ago`;
  if (s < 3600) return `${Math.round(s / 60)} min ago`;
  if (s < 86400) return `${Math.round(s / 3600)} h ago`;
  return `${Math.round(s / 86400)} d ago`;
}

function stamp(epoch) {
  return el("span", { title: new Date(epoch * 1000).toLocaleString() }, ago(epoch));
}

function duration(seconds) {
  if (seconds === null) return "until restart";
  if (seconds < 90) return `${Math.round(seconds)} s`;
  return `${Math.round(seconds / 60)} min`;
}

function badge(ok, yes = "ok", no = "down") {
  return el("span", { class: "badge " + (ok ? "ok" : "bad") }, ok ? yes : no);
}

function table(headers, rows, empty) {
  if (!rows.length) return el("p", { class: "muted" }, empty);
  return el(
    "table",
    {},
    el("thead", {}, el("tr", {}, headers.map((h) => el("th", {}, h)))),
    el("tbody", {}, rows),
  );
}

function toast(message, bad = false) {
  const box = $("toast");
  box.textContent = message;
  box.className = bad ? "bad" : "";
  box.hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => (box.hidden = true), 8000);
}

// -- login -----------------------------------------------------------------------------------

async function start() {
  $("login-form").addEventListener("submit", login);
  $("logout").addEventListener("click", logout);
  $("reload").addEventListener("click", reloadConfig);
  $("search").addEventListener("submit", (event) => {
    event.preventDefault();
    state.cursor = null;
    loadConversations(false);
  });
  $("more").addEventListener("click", () => loadConversations(true));
  window.addEventListener("hashchange", route);
  // With tokens set, ask for one first: a call without it would count as a failed login.
  if (document.body.dataset.auth === "token" && !state.token) return showLogin("");
  try {
    state.overview = await api("/api/admin/overview");
    enter(state.token ? "token" : "loopback");
  } catch (error) {
    if (error.status === 401) showLogin(state.token ? "That token is no longer accepted." : "");
    else showLogin(error.message);
  }
}

function showLogin(message) {
  sessionStorage.removeItem(TOKEN_KEY);
  state.token = null;
  $("login").hidden = false;
  $("tabs").hidden = true;
  $("session").hidden = true;
  for (const view of document.querySelectorAll(".view")) view.hidden = true;
  const error = $("login-error");
  error.textContent = message || "";
  error.hidden = !message;
  $("token").focus();
}

async function login(event) {
  event.preventDefault();
  const input = $("token");
  state.token = input.value.trim();
  try {
    state.overview = await api("/api/admin/overview");
  } catch (error) {
    showLogin(error.status === 401 ? "Wrong token: the gateway refused it." : error.message);
    return;
  }
  input.value = "";
  sessionStorage.setItem(TOKEN_KEY, state.token);
  enter("token");
}

function logout() {
  if (state.events) state.events.close();
  state.events = null;
  showLogin("");
}

function enter(mode) {
  state.mode = mode;
  $("login").hidden = true;
  $("tabs").hidden = false;
  $("session").hidden = false;
  $("logout").hidden = mode !== "token";
  $("whoami").textContent = mode === "token" ? "" : "loopback (no tokens)";
  connectEvents();
  route();
}

// -- live updates ------------------------------------------------------------------------------

function setLive(on) {
  const live = $("live");
  live.textContent = on ? "live" : "offline";
  live.className = "badge " + (on ? "ok" : "off");
}

async function connectEvents() {
  if (state.events) state.events.close();
  state.events = null;
  if (!state.mode) return;
  let ticket;
  try {
    ticket = (await api("/api/admin/events/ticket", "POST")).ticket;
  } catch (error) {
    setLive(false);
    if (error.status === 401) return showLogin("That token is no longer accepted.");
    return setTimeout(connectEvents, 5000);
  }
  const source = new EventSource("/api/admin/events?ticket=" + encodeURIComponent(ticket));
  state.events = source;
  source.addEventListener("open", () => setLive(true));
  source.addEventListener("overview", (event) => {
    setLive(true);
    state.overview = JSON.parse(event.data);
    refresh();
  });
  source.addEventListener("error", () => {
    setLive(false);
    // A ticket opens one stream: EventSource's own reconnect (same URL) would be refused, so
    // any break (the gateway restarted, the stream was ended) gets a new ticket, a new stream.
    source.close();
    if (state.events === source) setTimeout(connectEvents, 2000);
  });
}

async function refresh() {
  const [name] = currentRoute();
  if (name === "overview") return renderOverview();
  if (state.refreshing) return;
  state.refreshing = true;
  try {
    if (name === "conversations" && !state.cursor) await loadConversations(false);
    else if (name === "conversation") await loadTranscript(currentRoute()[1]);
    else if (name === "pairing") await loadPairing();
    else if (name === "outbox") await loadOutbox();
    else if (name === "schedules") await loadSchedules();
    else if (name === "tools") await loadTools();
  } finally {
    state.refreshing = false;
  }
}

// -- routing -----------------------------------------------------------------------------------

function currentRoute() {
  const hash = location.hash.replace(/^#/, "") || "overview";
  const slash = hash.indexOf("/");
  if (slash < 0) return [hash, null];
  return [hash.slice(0, slash), decodeURIComponent(hash.slice(slash + 1))];
}

function show(id, tab) {
  for (const view of document.querySelectorAll(".view")) view.hidden = view.id !== id;
  for (const a of document.querySelectorAll("#tabs a")) {
    a.classList.toggle("active", a.dataset.tab === tab);
  }
}

async function route() {
  if (!state.mode) return;
  const [name, arg] = currentRoute();
  try {
    if (name === "conversations") {
      show("view-conversations", "conversations");
      state.cursor = null;
      await loadConversations(false);
    } else if (name === "conversation") {
      show("view-transcript", "conversations");
      await loadTranscript(arg);
    } else if (name === "outbox") {
      show("view-outbox", "outbox");
      await loadOutbox();
    } else if (name === "schedules") {
      show("view-schedules", "schedules");
      await loadSchedules();
    } else if (name === "tools") {
      show("view-tools", "tools");
      await loadTools();
    } else if (name === "pairing") {
      show("view-pairing", "pairing");
      await loadPairing();
    } else {
      show("view-overview", "overview");
      if (!state.overview) state.overview = await api("/api/admin/overview");
      renderOverview();
    }
  } catch (error) {
    if (error.status === 401) showLogin("That token is no longer accepted.");
    else toast(error.message, true);
  }
}

function openConversation(key) {
  location.hash = "#conversation/" + encodeURIComponent(key);
}

// -- overview ----------------------------------------------------------------------------------

function card(label, value, id) {
  return el("div", { class: "card", id }, el("div", { class: "label" }, label),
    el("div", { class: "value" }, value));
}

function sum(values) {
  return Object.values(values || {}).reduce((a, b) => a + b, 0);
}

function chart(series) {
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  const width = 600, height = 140, bottom = 2, n = series.turns.length;
  const top = Math.max(1, ...series.turns);
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.setAttribute("preserveAspectRatio", "none");
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", "turns and failures per minute, last hour");
  const add = (tag, attrs, text) => {
    const node = document.createElementNS(ns, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    svg.append(node);
    return node;
  };
  const slot = width / n, plot = height - bottom - 4;
  series.turns.forEach((turns, i) => {
    const failed = series.failures[i];
    const h = (turns / top) * plot, hf = (failed / top) * plot;
    const x = i * slot + 1;
    if (turns) {
      const bar = add("rect", { class: "turns", x, y: height - bottom - h, width: slot - 2, height: h });
      const t = document.createElementNS(ns, "title");
      t.textContent = `${turns} turns, ${failed} failed`;
      bar.append(t);
    }
    if (failed) add("rect", { class: "failures", x, y: height - bottom - hf, width: slot - 2, height: hf });
  });
  add("line", { class: "axis", x1: 0, x2: width, y1: height - bottom, y2: height - bottom });
  // Labels are HTML: the SVG stretches to the panel's width, text in it would too.
  return el("div", {}, el("div", { class: "scale muted" }, `${top} per minute`), svg,
    el("div", { class: "axis-labels muted" }, el("span", {}, "60 min ago"), el("span", {}, "now")));
}

function conversationRows(list) {
  return list.map((c) =>
    el("tr", { class: "link", "data-key": c.key, onclick: () => openConversation(c.key) },
      el("td", { class: "mono" }, c.key),
      el("td", {}, stamp(c.updated_at)),
      el("td", {}, c.messages),
      el("td", {}, c.pending ? el("span", { class: "badge warn" }, `${c.pending} pending`) : "idle"),
      el("td", {}, c.last_failure
        ? el("span", {}, el("span", { class: "badge bad" }, c.last_failure), " ", stamp(c.last_failure_at))
        : el("span", { class: "muted" }, "none"))));
}

const CONVERSATION_HEADERS = ["Key", "Last activity", "Messages", "State", "Last failure"];

function renderOverview() {
  const o = state.overview;
  const view = $("view-overview");
  if (!o || view.hidden) return;
  const ready = Object.entries(o.ready);
  const series = o.series;
  const hour = (values) => values.reduce((a, b) => a + b, 0);
  view.replaceChildren(
    el("div", { class: "grid" },
      card("Ready", badge(ready.every(([, ok]) => ok), "ready", "not ready"), "card-ready"),
      card("Live turns", o.live_turns, "card-live-turns"),
      card("Queue depth", sum(o.queued), "card-queue"),
      card("Live sessions", o.live_sessions, "card-sessions"),
      card("Outbox pending", sum(o.outbox_pending), "card-outbox"),
      card("Pairing requests", o.pairing_pending, "card-pairing")),
    el("div", { class: "panel" }, el("h2", {}, "Readiness"),
      el("div", { class: "actions" }, ready.map(([part, ok]) =>
        el("span", {}, part, " ", badge(ok))))),
    el("div", { class: "panel chart" },
      el("h2", {}, `Turns, last hour: ${hour(series.turns)} (${hour(series.failures)} failed);`
        + ` model calls ${hour(series.model_calls)} (${hour(series.model_failures)} failed)`),
      chart(series),
      el("div", { class: "legend muted" },
        el("span", {}, el("i", { class: "key-turns" }), "turns"),
        el("span", {}, el("i", { class: "key-failures" }), "failed"))),
    el("div", { class: "panel" }, el("h2", {}, "Benched keys"),
      table(["Model", "Key", "Reason", "Back in"], o.benched.map((b) =>
        el("tr", {}, el("td", {}, b.model), el("td", { class: "mono" }, b.key),
          el("td", {}, b.reason), el("td", {}, duration(b.seconds_left)))), "No key is benched.")),
    el("div", { class: "panel", id: "recent" }, el("h2", {}, "Recent conversations"),
      table(CONVERSATION_HEADERS, conversationRows(o.recent), "No conversation yet.")),
    o.cluster === null
      ? el("div", { class: "panel muted", id: "cluster" }, "One node (no cluster: the store is not shared).")
      : el("div", { class: "panel", id: "cluster" },
      el("h2", {}, `Cluster: this node ${o.cluster.node}, ${o.cluster.leases} leases`),
      table(["Node", "Alive", "Last seen", "Conversations"], o.cluster.nodes.map((n) =>
        el("tr", {}, el("td", { class: "mono" }, n.node), el("td", {}, badge(n.alive, "alive", "dead")),
          el("td", {}, stamp(n.last_seen)), el("td", {}, n.conversations))), "No node.")),
  );
}

// -- conversations -----------------------------------------------------------------------------

async function loadConversations(more) {
  const q = $("q").value;
  let path = "/api/admin/conversations?limit=50&q=" + encodeURIComponent(q);
  if (more && state.cursor) path += "&cursor=" + encodeURIComponent(state.cursor);
  const page = await api(path);
  const box = $("conversation-list");
  if (!more) box.replaceChildren();
  let body = box.querySelector("tbody");
  if (!body) {
    box.replaceChildren(table(CONVERSATION_HEADERS, conversationRows(page.conversations),
      q ? `No conversation key contains “${q}”.` : "No conversation yet."));
  } else {
    body.append(...conversationRows(page.conversations));
  }
  state.cursor = page.next_cursor;
  $("more").hidden = !page.next_cursor;
}

const TRANSCRIPT_PAGE = 100;

const SHOWN_ARGUMENTS = 300; // characters of a call's arguments in the list (all in the API)

function callItem(c) {
  const args = c.arguments.length > SHOWN_ARGUMENTS
    ? c.arguments.slice(0, SHOWN_ARGUMENTS) + ` … (${c.arguments.length} characters)` : c.arguments;
  return el("li", { class: "mono" }, `${c.name}(${args})`);
}

// A tool step (an assistant row with tool_calls) lists its calls; a tool row names its tool.
function messageRow(m) {
  const calls = m.tool_calls || [];
  return el("div", { class: `msg ${m.role}${m.failure ? " failed" : ""}`, "data-id": m.id },
    el("div", { class: "meta" }, `${m.role}${m.tool ? " · " + m.tool : ""} · #${m.id} · ${m.state} · `,
      stamp(m.created_at),
      m.scheduled ? ` · scheduled by ${m.scheduled}` : null,
      m.failure ? el("span", {}, " · ", el("span", { class: "badge bad" }, m.failure)) : null),
    el("div", { class: "content" }, m.content),
    calls.length ? el("ul", { class: "calls" }, calls.map(callItem)) : null,
    m.attachments.length ? el("ul", { class: "attachments" }, m.attachments.map((a) =>
      el("li", {}, `${a.name || "(unnamed)"} · ${a.content_type || "?"} · ${a.size ?? "?"} bytes`,
        a.sha256 ? el("span", { class: "mono muted" }, ` · ${a.sha256.slice(0, 12)}`) : null)))
      : null);
}

// The newest page first; "Older messages" puts the page before it above (the store reads only
// the page: a long conversation costs what is shown).
async function loadTranscript(key) {
  const path = "/api/admin/conversations/" + encodeURIComponent(key) + "/messages?limit=" + TRANSCRIPT_PAGE;
  const data = await api(path);
  const messages = el("div", { class: "messages" }, data.messages.map(messageRow));
  const older = el("button", { id: "older", type: "button" }, "Older messages");
  let next = data.next;
  older.hidden = next === null;
  older.addEventListener("click", async () => {
    older.disabled = true;
    try {
      const page = await api(path + "&before=" + next);
      messages.prepend(...page.messages.map(messageRow));
      next = page.next;
      older.hidden = next === null;
    } finally {
      older.disabled = false;
    }
  });
  $("view-transcript").replaceChildren(
    el("p", {}, el("a", { href: "#conversations" }, "← Conversations")),
    el("h2", { class: "mono" }, data.conversation),
    older,
    messages,
  );
}

// -- outbox ------------------------------------------------------------------------------------

async function loadOutbox() {
  const data = await api("/api/admin/outbox");
  $("view-outbox").replaceChildren(el("div", { class: "panel" },
    el("h2", {}, "Reply chunks not delivered (newest first)"),
    table(["Chunk", "Conversation", "State", "Part", "Queued", "Text"], data.chunks.map((c) =>
      el("tr", {}, el("td", {}, c.id),
        el("td", {}, el("a", { href: "#conversation/" + encodeURIComponent(c.conversation), class: "mono" }, c.conversation)),
        el("td", {}, el("span", { class: "badge " + (c.state === "pending" ? "warn" : "bad") }, c.state)),
        el("td", {}, c.seq), el("td", {}, stamp(c.created_at)),
        el("td", {}, c.text.length > 120 ? c.text.slice(0, 120) + "…" : c.text))),
    "Every reply was delivered.")));
}

// -- schedules ---------------------------------------------------------------------------------

// A due time: UTC to the minute, as /schedules says it (they may be ahead, where "ago" is not).
function utc(epoch) {
  return new Date(epoch * 1000).toISOString().slice(0, 16).replace("T", " ") + " UTC";
}

const DELIVERY = { delivered: "ok", "not delivered": "bad", waiting: "warn", delivering: "warn" };

async function loadSchedules() {
  const data = await api("/api/admin/schedules");
  const summary = data.undelivered
    ? el("p", { class: "error" }, `${data.undelivered} schedule(s) fired and never delivered`)
    : null;
  $("view-schedules").replaceChildren(el("div", { class: "panel" },
    el("h2", {}, "Scheduled messages"), summary,
    table(["Schedule", "Conversation", "When", "Sends", "Next due", "Last firing", "Delivery", "Last failure"],
      data.schedules.map((s) =>
        el("tr", {}, el("td", { class: "mono" }, s.id, s.origin === "config" ? el("span", { class: "muted" }, " (config)") : null,
          s.enabled ? null : el("span", { class: "badge warn" }, " disabled")),
          el("td", {}, el("a", { href: "#conversation/" + encodeURIComponent(s.conversation), class: "mono" }, s.conversation)),
          el("td", { class: "mono" }, s.when),
          el("td", {}, `${s.action}: `, s.body.length > 60 ? s.body.slice(0, 60) + "…" : s.body),
          el("td", {}, s.next_due ? utc(s.next_due) : "-"),
          el("td", {}, s.last_due ? utc(s.last_due) : "never", s.missed ? el("span", { class: "muted" }, ` (missed ${s.missed})`) : null),
          el("td", {}, el("span", { class: "badge " + (DELIVERY[s.delivery] || "") }, s.delivery),
            s.delivered_id ? el("span", { class: "mono muted" }, ` ${s.delivered_id}`) : null),
          el("td", {}, s.last_failure || s.answer_failure || ""))),
    "No schedules: add [[schedules]] to the config, or let conversations make their own ([scheduler] agent_tools).")));
}

// -- tools -------------------------------------------------------------------------------------

const SERVER_STATE = { up: "ok", down: "bad", starting: "warn" };

async function loadTools() {
  const data = await api("/api/admin/tools");
  const down = data.servers.filter((s) => s.state === "down").length;
  const summary = down ? el("p", { class: "error" }, `${down} tool server(s) down: their tools are not offered`) : null;
  $("view-tools").replaceChildren(el("div", { class: "panel" },
    el("h2", {}, "Tool servers"), summary,
    table(["Server", "State", "Tools offered now", "Detail"],
      data.servers.map((s) =>
        el("tr", {}, el("td", { class: "mono" }, s.name),
          el("td", {}, el("span", { class: "badge " + (SERVER_STATE[s.state] || "") }, s.state)),
          el("td", { class: "mono" }, s.tools.length ? s.tools.join(", ") : el("span", { class: "muted" }, "none")),
          el("td", {}, s.detail))),
    "No tool servers: add [[tools.mcp]] to the config (docs/TOOLS.md).")));
}

// -- pairing -----------------------------------------------------------------------------------

async function act(path, done) {
  try {
    await api(path, "POST");
    toast(done);
  } catch (error) {
    toast(error.message, true);
  }
  await loadPairing();
}

async function loadPairing() {
  const data = await api("/api/admin/pairing");
  const enc = encodeURIComponent;
  $("view-pairing").replaceChildren(
    el("div", { class: "panel", id: "pending-codes" }, el("h2", {}, "Waiting for approval"),
      table(["Platform", "Code", "User", "Asked", "Expires", ""], data.pending.map((c) =>
        el("tr", { "data-code": c.code },
          el("td", {}, c.platform), el("td", { class: "mono" }, c.code),
          el("td", {}, c.user_id, c.label ? el("span", { class: "muted" }, " " + c.label) : null),
          el("td", {}, stamp(c.created_at)),
          el("td", {}, duration(Math.max(0, c.expires_at - Date.now() / 1000))),
          el("td", { class: "actions" },
            el("button", { class: "primary", type: "button", onclick: () =>
              act(`/api/admin/pairing/${enc(c.platform)}/${enc(c.code)}/approve`,
                `Approved ${c.platform} user ${c.user_id}.`) }, "Approve"),
            el("button", { class: "danger", type: "button", onclick: () =>
              act(`/api/admin/pairing/${enc(c.platform)}/${enc(c.code)}/reject`,
                `Rejected ${c.platform} user ${c.user_id}.`) }, "Reject")))),
      "No pairing code is waiting.")),
    el("div", { class: "panel", id: "approved-users" }, el("h2", {}, "Approved users"),
      table(["Platform", "User", "Approved", ""], data.approved.map((u) =>
        el("tr", { "data-user": u.user_id },
          el("td", {}, u.platform), el("td", { class: "mono" }, u.user_id),
          el("td", {}, stamp(u.approved_at)),
          el("td", {}, el("button", { class: "danger", type: "button", onclick: () =>
            act(`/api/admin/users/${enc(u.platform)}/${enc(u.user_id)}/revoke`,
              `Revoked ${u.platform} user ${u.user_id}.`) }, "Revoke")))),
      "No user was approved by pairing.")),
  );
}

// -- reload ------------------------------------------------------------------------------------

async function reloadConfig() {
  try {
    const result = await api("/api/admin/reload", "POST");
    const live = result && result.live && result.live.length ? ` (${result.live.join(", ")})` : "";
    toast(`Config reload: ${result ? result.outcome : "done"}${live}.`);
  } catch (error) {
    toast("Reload failed: " + error.message, true);
  }
}

start();
