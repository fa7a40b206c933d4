// Cairn admin site: live updates without reloading.
//
// The server pushes committed task transitions over /ws. Elements that
// carry data-task-id get their state class and text updated at once;
// elements that carry data-refresh="<url>" are re-fetched (debounced, at
// most twice a second each) when an event concerns them: all events, or
// only those of the run in data-refresh-run or the task in
// data-refresh-task. An element with data-refresh-log="<task id>" is
// re-fetched when the server says that task has new live log lines.
// data-refresh elements are also re-fetched every 15 s
// (heartbeats and queue depth change without events) and after a
// reconnect or a "resync" (events were dropped).
(function () {
  "use strict";

  var MIN_INTERVAL = 500; // ms between two fetches of one element
  var DEBOUNCE = 150; // ms to gather a burst of events
  var PERIODIC = 15000;

  var liveEl = document.querySelector("[data-testid=live-status]");
  function setLive(on) {
    if (!liveEl) return;
    liveEl.setAttribute("data-live", on ? "on" : "off");
    liveEl.textContent = on ? "live" : "offline";
  }

  function setState(el, state) {
    var drop = [];
    el.classList.forEach(function (c) { if (c.indexOf("st-") === 0) drop.push(c); });
    drop.forEach(function (c) { el.classList.remove(c); });
    el.classList.add("st-" + state);
    el.setAttribute("data-status", state);
    var text = el.hasAttribute("data-status-text") ? el : el.querySelector("[data-status-text]");
    if (text) text.textContent = state;
    var title = el.querySelector("title");
    if (title) title.textContent = title.textContent.replace(/: [a-z_]+$/, ": " + state);
  }

  function applyEvent(ev) {
    var els = document.querySelectorAll('[data-task-id="' + ev.task_id + '"]');
    for (var i = 0; i < els.length; i++) setState(els[i], ev.to);
  }

  // Once the page is being left (a link, a form such as logout), nothing
  // here may navigate: a reload on a 401 would abort that navigation.
  var leaving = false;
  window.addEventListener("beforeunload", function () { leaving = true; });
  window.addEventListener("pageshow", function () { leaving = false; });

  var widgets = [];
  document.querySelectorAll("[data-refresh]").forEach(function (el) {
    widgets.push({
      el: el,
      url: el.getAttribute("data-refresh"),
      run: el.getAttribute("data-refresh-run"),
      task: el.getAttribute("data-refresh-task"),
      log: el.getAttribute("data-refresh-log"),
      last: 0, timer: null, busy: false, again: false
    });
  });

  // A button pressed but not yet released: replacing it now would eat the
  // click (its mousedown and mouseup would land on different nodes).
  var pressed = null;
  document.addEventListener("pointerdown", function (e) { pressed = e.target; }, true);
  function release() { setTimeout(function () { pressed = null; }, 0); } // after the click event
  document.addEventListener("pointerup", release, true);
  document.addEventListener("pointercancel", release, true);

  // editing reports whether the user is at work inside el (typing in a
  // field, or pressing a button): its content must not be replaced then.
  function editing(el) {
    if (pressed && el.contains(pressed)) return true;
    var a = document.activeElement;
    return a && a !== document.body && el.contains(a) && /^(INPUT|SELECT|TEXTAREA)$/.test(a.tagName);
  }

  function schedule(w) {
    if (w.timer) return;
    var wait = Math.max(DEBOUNCE, w.last + MIN_INTERVAL - Date.now());
    w.timer = setTimeout(function () { w.timer = null; refresh(w); }, wait);
  }

  function refresh(w) {
    if (leaving) return;
    if (w.busy) { w.again = true; return; }
    if (editing(w.el)) { w.last = Date.now(); schedule(w); return; }
    w.busy = true;
    w.last = Date.now();
    fetch(w.url, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (r) {
        if (r.status === 401) {
          if (!leaving) location.reload();
          throw new Error("logged out");
        }
        if (!r.ok) throw new Error("HTTP " + r.status);
        return r.text();
      })
      .then(function (html) {
        if (leaving) return;
        if (editing(w.el)) { w.again = true; return; } // try again later
        w.el.innerHTML = html;
      })
      .catch(function () {})
      .then(function () {
        w.busy = false;
        if (w.again) { w.again = false; schedule(w); }
      });
  }

  function refreshAll() { widgets.forEach(schedule); }

  function onLogs(ids) {
    var tasks = {};
    ids.forEach(function (id) { tasks[id] = true; });
    widgets.forEach(function (w) { if (w.log && tasks[w.log]) schedule(w); });
  }

  function onEvents(events) {
    var runs = {}, tasks = {};
    events.forEach(function (ev) {
      applyEvent(ev);
      runs[ev.run_id] = true;
      tasks[ev.task_id] = true;
    });
    widgets.forEach(function (w) {
      // A run page also follows the child runs it lists (their counts
      // show on the DAG).
      if (w.run && !runs[w.run] && !Object.keys(runs).some(function (id) {
        return w.el.querySelector("[data-child-run=\"" + id + "\"]");
      })) return;
      if (w.task && !tasks[w.task]) return;
      if (w.log) return; // follows its task's log lines only
      schedule(w);
    });
  }

  var backoff = 1000;
  function connect() {
    if (!window.WebSocket) return;
    var proto = location.protocol === "https:" ? "wss:" : "ws:";
    var ws = new WebSocket(proto + "//" + location.host + "/ws");
    ws.onmessage = function (m) {
      var msg;
      try { msg = JSON.parse(m.data); } catch (e) { return; }
      if (msg.t === "hello") {
        setLive(true);
        backoff = 1000;
        // Events committed between the page's render (or the last
        // connection) and this hello were not sent to us: re-fetch.
        refreshAll();
      } else if (msg.t === "events" && msg.events) {
        onEvents(msg.events);
        if (msg.logs) onLogs(msg.logs);
      } else if (msg.t === "logs" && msg.logs) {
        onLogs(msg.logs);
      } else if (msg.t === "resync") {
        refreshAll();
      }
    };
    ws.onclose = function () {
      setLive(false);
      setTimeout(connect, backoff);
      backoff = Math.min(backoff * 2, 30000);
    };
  }

  // Forms with data-preview="<url>" show what their data-preview-field
  // inputs would do: after a pause in typing, the url is fetched with
  // those fields as query parameters and its answer (also a 400, which
  // says what is wrong) replaces data-preview-target. An older answer
  // never replaces a newer one.
  document.querySelectorAll("form[data-preview]").forEach(function (form) {
    var target = form.querySelector("[data-preview-target]");
    var fields = form.querySelectorAll("[data-preview-field]");
    if (!target || !fields.length) return;
    var timer = null, seq = 0;
    function update() {
      var q = [];
      fields.forEach(function (f) { q.push(encodeURIComponent(f.name) + "=" + encodeURIComponent(f.value)); });
      var mine = ++seq;
      fetch(form.getAttribute("data-preview") + "?" + q.join("&"), { credentials: "same-origin", headers: { "Accept": "text/html" } })
        .then(function (r) {
          if (!r.ok && r.status !== 400) throw new Error("HTTP " + r.status);
          return r.text();
        })
        .then(function (html) { if (mine === seq) target.innerHTML = html; })
        .catch(function () {});
    }
    fields.forEach(function (f) {
      f.addEventListener("input", function () {
        clearTimeout(timer);
        timer = setTimeout(update, 250);
      });
    });
  });

  // Forms with data-confirm="<question>" are sent only once confirmed.
  document.addEventListener("submit", function (e) {
    var q = e.target.getAttribute && e.target.getAttribute("data-confirm");
    if (q && !window.confirm(q)) e.preventDefault();
  }, true);

  connect();
  if (widgets.length) setInterval(refreshAll, PERIODIC);
})();
