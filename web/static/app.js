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


  // Selection (the runs list): row checkboxes (name=id) belong to a
  // form[data-selection] through their form attribute. The selection is
  // kept while the live list is re-rendered; the header box
  // [data-select-page] ticks every row of its table; [data-selected-count]
  // says how many are ticked.
  var selForm = document.querySelector("form[data-selection]");
  if (selForm) {
    var picked = {};
    // Not selForm.id: the form's controls named "id" shadow it.
    var boxSel = 'input[type=checkbox][name=id][form="' + selForm.getAttribute("id") + '"]';
    var rowBoxes = function () {
      return document.querySelectorAll(boxSel);
    };
    var allBox = selForm.querySelector("[data-select-all]");
    var countEl = selForm.querySelector("[data-selected-count]");
    var sync = function () {
      var n = 0, boxes = rowBoxes();
      boxes.forEach(function (b) { b.checked = !!picked[b.value]; if (b.checked) n++; });
      document.querySelectorAll("[data-select-page]").forEach(function (h) {
        h.checked = boxes.length > 0 && n === boxes.length;
      });
      if (countEl) countEl.textContent = allBox && allBox.checked ? "all matching selected" : n + " selected";
    };
    rowBoxes().forEach(function (b) { if (b.checked) picked[b.value] = true; });
    document.addEventListener("change", function (e) {
      var t = e.target;
      if (t.matches(boxSel)) {
        if (t.checked) picked[t.value] = true; else delete picked[t.value];
      } else if (t.matches("[data-select-page]")) {
        var table = t.closest("table");
        table.querySelectorAll('input[type=checkbox][name=id]').forEach(function (b) {
          if (t.checked) picked[b.value] = true; else delete picked[b.value];
        });
      } else if (t !== allBox) {
        return;
      }
      sync();
    });
    widgets.forEach(function (w) {
      new MutationObserver(sync).observe(w.el, { childList: true });
    });
    sync();
  }

  // Buttons with data-confirm="<question>" send their form only once
  // confirmed.
  document.addEventListener("submit", function (e) {
    var q = e.submitter && e.submitter.getAttribute("data-confirm");
    if (q && !window.confirm(q)) e.preventDefault();
  }, true);

  // Keyboard: "/" focuses the search box ([data-search]); j and k move a
  // highlight through the rows of the page's lists (table.grid rows with a
  // link), Enter opens the highlighted row's first link. Keys typed into
  // a field are left alone.
  var navKey = null; // href of the highlighted row's link
  function navRows() {
    var out = [];
    document.querySelectorAll("table.grid tbody tr").forEach(function (tr) {
      if (tr.querySelector("a[href]")) out.push(tr);
    });
    return out;
  }
  function rowKey(tr) { return tr.querySelector("a[href]").getAttribute("href"); }
  function highlight() {
    var found = null;
    navRows().forEach(function (tr) {
      var on = navKey !== null && rowKey(tr) === navKey && !found;
      tr.classList.toggle("kb-row", on);
      if (on) { found = tr; tr.setAttribute("aria-current", "true"); } else tr.removeAttribute("aria-current");
    });
    return found;
  }
  function typing(el) {
    if (!el || el === document.body) return false;
    if (el.isContentEditable || /^(TEXTAREA|SELECT)$/.test(el.tagName)) return true;
    return el.tagName === "INPUT" && !/^(checkbox|radio|button|submit|reset)$/i.test(el.type);
  }
  document.addEventListener("keydown", function (e) {
    if (e.defaultPrevented || e.ctrlKey || e.metaKey || e.altKey || typing(e.target)) return;
    if (e.key === "/") {
      var search = document.querySelector("[data-search]");
      if (search) { e.preventDefault(); search.focus(); search.select(); }
      return;
    }
    if (e.key === "j" || e.key === "k") {
      var rows = navRows();
      if (!rows.length) return;
      var i = -1;
      rows.forEach(function (tr, n) { if (navKey !== null && rowKey(tr) === navKey && i < 0) i = n; });
      i = i < 0 ? 0 : Math.max(0, Math.min(rows.length - 1, i + (e.key === "j" ? 1 : -1)));
      navKey = rowKey(rows[i]);
      var tr = highlight();
      if (tr) tr.scrollIntoView({ block: "nearest" });
      e.preventDefault();
      return;
    }
    if (e.key === "Enter" && navKey !== null && !e.target.closest("a, button, input, select, textarea, summary")) {
      var cur = highlight();
      if (cur) { e.preventDefault(); location.href = cur.querySelector("a[href]").href; }
    }
  });
  widgets.forEach(function (w) {
    new MutationObserver(function () { if (navKey !== null) highlight(); }).observe(w.el, { childList: true });
  });

  connect();
  if (widgets.length) setInterval(refreshAll, PERIODIC);
})();

// Times. A <time datetime data-rel> says how long ago (or in how long),
// with the absolute time in its title; a <time datetime data-abs> says
// the absolute time (data-abs="ms": to the millisecond), with the
// relative one in its title. Absolute times are in the browser's time
// zone, or in UTC once the header's toggle says so (remembered per
// browser). The server renders them in UTC; they are rewritten at load,
// in whatever a live refresh swaps in, and every 30 s.
(function () {
  "use strict";

  var KEY = "cairn.utc";
  var utc = false;
  try { utc = localStorage.getItem(KEY) === "1"; } catch (e) {}
  var zone = "local time";
  try { zone = Intl.DateTimeFormat().resolvedOptions().timeZone || zone; } catch (e) {}

  function pad(n, w) { n = String(n); while (n.length < w) n = "0" + n; return n; }

  function absolute(d, ms) {
    var f = utc
      ? [d.getUTCFullYear(), d.getUTCMonth() + 1, d.getUTCDate(), d.getUTCHours(), d.getUTCMinutes(), d.getUTCSeconds(), d.getUTCMilliseconds()]
      : [d.getFullYear(), d.getMonth() + 1, d.getDate(), d.getHours(), d.getMinutes(), d.getSeconds(), d.getMilliseconds()];
    var s = f[0] + "-" + pad(f[1], 2) + "-" + pad(f[2], 2) + " " + pad(f[3], 2) + ":" + pad(f[4], 2) + ":" + pad(f[5], 2);
    return ms ? s + "." + pad(f[6], 3) : s;
  }

  function zoneName() { return utc ? "UTC" : zone; }

  function relative(d) {
    var s = Math.round((Date.now() - d.getTime()) / 1000);
    if (s < 0 && s > -5) s = 0; // clocks a little apart
    var future = s < 0, t;
    if (future) s = -s;
    if (s < 60) t = s + " s";
    else if (s < 3600) t = Math.floor(s / 60) + " min";
    else if (s < 48 * 3600) t = Math.floor(s / 3600) + " h";
    else t = Math.floor(s / 86400) + " d";
    return future ? "in " + t : t + " ago";
  }

  function set(el, text, title) {
    if (el.textContent !== text) el.textContent = text;
    if (el.getAttribute("title") !== title) el.setAttribute("title", title);
  }

  function rewriteOne(el) {
    var d = new Date(el.getAttribute("datetime"));
    if (isNaN(d.getTime())) return;
    if (el.hasAttribute("data-rel")) {
      set(el, relative(d), absolute(d, false) + " " + zoneName());
    } else if (el.hasAttribute("data-abs")) {
      set(el, absolute(d, el.getAttribute("data-abs") === "ms"), relative(d) + " · " + zoneName());
    }
  }

  function rewrite(root) {
    if (root.matches && root.matches("time[datetime]")) rewriteOne(root);
    if (root.querySelectorAll) root.querySelectorAll("time[datetime]").forEach(rewriteOne);
  }

  var toggle = document.querySelector("[data-testid=utc-toggle]");
  function showToggle() {
    toggle.textContent = utc ? "UTC" : "local time";
    toggle.setAttribute("aria-pressed", utc ? "true" : "false");
    toggle.title = utc ? "Times in UTC: show them in " + zone : "Times in " + zone + ": show them in UTC";
  }
  if (toggle) {
    toggle.hidden = false;
    showToggle();
    toggle.addEventListener("click", function () {
      utc = !utc;
      try { localStorage.setItem(KEY, utc ? "1" : "0"); } catch (e) {}
      showToggle();
      rewrite(document);
    });
  }

  rewrite(document);
  // Live refreshes swap fragments in: rewrite what they bring.
  new MutationObserver(function (records) {
    records.forEach(function (r) {
      r.addedNodes.forEach(function (n) { if (n.nodeType === 1) rewrite(n); });
    });
  }).observe(document.body, { childList: true, subtree: true });
  setInterval(function () { rewrite(document); }, 30000);
})();

// Phone width. Below 760 px, app.css shows each row of a table.grid as a
// card of its cells, each cell labelled with its column's heading: the
// heading is copied into the cell's data-label here, at load and for
// what a live refresh swaps in.
(function () {
  "use strict";

  function label(table) {
    var heads = table.querySelectorAll("thead th");
    if (!heads.length) return;
    var names = [];
    heads.forEach(function (th) {
      var text = th.textContent.replace(/\s+/g, " ").trim();
      for (var i = 0; i < (th.colSpan || 1); i++) names.push(text);
    });
    table.querySelectorAll("tbody tr").forEach(function (tr) {
      var col = 0;
      for (var i = 0; i < tr.children.length; i++) {
        var td = tr.children[i];
        var name = td.colSpan > 1 ? "" : names[col] || ""; // a row-wide note has no label
        if (td.getAttribute("data-label") !== name) td.setAttribute("data-label", name);
        col += td.colSpan || 1;
      }
    });
  }

  function labelAll(root) {
    if (root.matches && root.matches("table.grid")) label(root);
    else if (root.closest && root.closest("table.grid")) label(root.closest("table.grid"));
    if (root.querySelectorAll) root.querySelectorAll("table.grid").forEach(label);
  }

  labelAll(document);
  new MutationObserver(function (records) {
    records.forEach(function (r) {
      r.addedNodes.forEach(function (n) { if (n.nodeType === 1) labelAll(n); });
    });
  }).observe(document.body, { childList: true, subtree: true });
})();
