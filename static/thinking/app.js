// Deep Think page behaviour: WebSocket catch-up and connection state, a ticking clock, the
// thought-stream filter, announcements for screen readers, and the start form's presets.
// Loaded after htmx and before its ws extension, which uses htmx.createWebSocket if set.
// Everything here reads text with textContent and writes it with textContent: model text
// never becomes markup on this side either.
(function () {
  "use strict";

  var FINISHED = { completed: 1, failed: 1, cancelled: 1 };

  // Each (re)connect tells the server which revision the page shows, so the server sends a
  // full catch-up only when the page missed something.
  htmx.createWebSocket = function (url) {
    var header = document.getElementById("session-header");
    var rev = header ? header.dataset.revision : "";
    var sep = url.indexOf("?") === -1 ? "?" : "&";
    return new WebSocket(url + sep + "rev=" + encodeURIComponent(rev || ""), []);
  };

  // ---- Connection indicator -------------------------------------------------------------

  var connection = { everOpen: false, catchingUp: false, timer: 0 };

  function setConnection(state, text) {
    var el = document.getElementById("connection");
    if (!el) return;
    var header = document.getElementById("session-header");
    if (header && FINISHED[header.dataset.status]) {
      state = "finished";
      text = "Finished";
    }
    if (el.dataset.state === state && el.textContent === text) return;
    el.dataset.state = state;
    el.textContent = text;
  }

  function caughtUp() {
    clearTimeout(connection.timer);
    if (!connection.catchingUp) return;
    connection.catchingUp = false;
    setConnection("live", "Live");
  }

  document.addEventListener("htmx:wsConnecting", function () {
    if (!connection.everOpen) setConnection("connecting", "Connecting…");
  });
  document.addEventListener("htmx:wsOpen", function () {
    if (!connection.everOpen) {
      connection.everOpen = true;
      setConnection("live", "Live");
      return;
    }
    // After a reconnect the server's first message is the catch-up snapshot, if the page
    // missed anything; if it missed nothing no message comes, so stop waiting after a moment.
    connection.catchingUp = true;
    setConnection("catching-up", "Catching up…");
    clearTimeout(connection.timer);
    connection.timer = setTimeout(caughtUp, 1500);
  });
  document.addEventListener("htmx:wsClose", function (event) {
    clearTimeout(connection.timer);
    connection.catchingUp = false;
    var code = event.detail && event.detail.event ? event.detail.event.code : 0;
    if (code === 4404 || code === 1000) {
      setConnection("closed", "Not connected: reload the page");
    } else {
      setConnection("reconnecting", "Reconnecting…");
    }
  });
  document.addEventListener("htmx:wsError", function () {
    setConnection("reconnecting", "Connection problem, retrying…");
  });

  // ---- After every live update ------------------------------------------------------------

  // <details> the person opened or closed keep that state when the server replaces them.
  var detailsState = {};
  document.addEventListener(
    "toggle",
    function (event) {
      var el = event.target;
      if (el.tagName === "DETAILS" && el.id) detailsState[el.id] = el.open;
    },
    true
  );

  function restoreDetails() {
    Object.keys(detailsState).forEach(function (id) {
      var el = document.getElementById(id);
      if (el && el.open !== detailsState[id]) el.open = detailsState[id];
    });
  }

  // The stream follows new thoughts while the person is at its end, and stays put while they
  // read further up. (On a phone the stream is part of the page and does not scroll itself.)
  var stream = { atEnd: true };

  function streamList() {
    var list = document.getElementById("thought-list");
    return list && list.scrollHeight > list.clientHeight + 1 ? list : null;
  }

  function noteStreamPosition() {
    var list = streamList();
    stream.atEnd = !list || list.scrollHeight - list.scrollTop - list.clientHeight < 48;
  }

  function followStream() {
    var list = streamList();
    if (list && stream.atEnd) list.scrollTop = list.scrollHeight;
  }

  // The live reasoning shows its newest lines.
  function followReasoning() {
    document.querySelectorAll("pre[data-follow]").forEach(function (pre) {
      pre.scrollTop = pre.scrollHeight;
    });
  }

  // ---- Announcements: status changes and the answer, once each ------------------------------

  var announced = { status: null, answer: false };

  function announce(text) {
    var el = document.getElementById("announcer");
    if (!el) return;
    el.textContent = "";
    // A fresh text node after a tick is read even when the same words repeat.
    setTimeout(function () { el.textContent = text; }, 50);
  }

  function announceChanges() {
    var header = document.getElementById("session-header");
    if (header) {
      var status = header.dataset.status;
      if (announced.status !== null && status !== announced.status) {
        announce("Session " + (header.dataset.statusLabel || status).toLowerCase() + ".");
      }
      announced.status = status;
      if (FINISHED[status]) setConnection("finished", "Finished");
    }
    var answer = document.getElementById("answer");
    var hasAnswer = !!answer && !answer.classList.contains("hidden");
    if (hasAnswer && !announced.answer) {
      var confidence = answer.querySelector(".confidence");
      announce("The answer is ready" + (confidence ? ", " + confidence.textContent : "") + ".");
    }
    announced.answer = hasAnswer;
  }

  // ---- The thought-stream filter: one sub-question's thoughts -------------------------------

  // The filter is a generated style rule, so thoughts that arrive later are filtered too
  // without any work per message. Sub-question ids are integers; anything else is ignored.
  var filter = { focus: "", label: "" };

  function filterStyle() {
    var style = document.getElementById("stream-filter-style");
    if (!style) {
      style = document.createElement("style");
      style.id = "stream-filter-style";
      // The Content-Security-Policy admits this one style element by the page's nonce.
      var nonce = document.querySelector('meta[name="csp-nonce"]');
      if (nonce) style.nonce = nonce.getAttribute("content");
      document.head.appendChild(style);
    }
    return style;
  }

  function setFilter(focus, label) {
    filter.focus = /^\d+$/.test(focus || "") ? focus : "";
    filter.label = filter.focus ? label || "" : "";
    filterStyle().textContent = filter.focus
      ? '#thought-list > li:not([data-focus="' + filter.focus + '"]) { display: none; }'
      : "";
    syncFilter();
  }

  function syncFilter() {
    var focus = filter.focus;
    document.querySelectorAll("[data-filter-focus]").forEach(function (button) {
      var on = !!focus && button.getAttribute("data-filter-focus") === focus;
      button.setAttribute("aria-pressed", on ? "true" : "false");
    });
    document.querySelectorAll(".subq.selected").forEach(function (li) {
      li.classList.remove("selected");
    });
    var bar = document.getElementById("stream-filter");
    var empty = document.querySelector(".stream-filter-empty");
    if (!bar) return;
    if (!focus) {
      bar.hidden = true;
      if (empty) empty.hidden = true;
      return;
    }
    var node = document.getElementById("subq-" + focus);
    if (node) {
      node.classList.add("selected");
      var text = node.querySelector(".subq-text");
      if (text) filter.label = text.textContent.trim();
    }
    var count = document.querySelectorAll('#thought-list > li[data-focus="' + focus + '"]').length;
    bar.querySelector("[data-role=focus-text]").textContent = filter.label;
    bar.querySelector("[data-role=count]").textContent =
      "(" + count + " thought" + (count === 1 ? "" : "s") + ")";
    bar.hidden = false;
    if (empty) empty.hidden = count > 0;
  }

  document.addEventListener("click", function (event) {
    var button = event.target.closest("[data-filter-focus]");
    if (button) {
      var focus = button.getAttribute("data-filter-focus");
      if (filter.focus === focus) {
        setFilter("");
      } else {
        setFilter(focus, button.textContent.replace(/^on:\s*/, "").trim());
        var stream = document.getElementById("thoughts-title");
        // On a narrow screen the stream is far from the sub-question list: bring it in view.
        if (stream && window.matchMedia("(max-width: 860px)").matches) {
          stream.scrollIntoView({ block: "start" });
        }
      }
      return;
    }
    if (event.target.closest("#stream-filter [data-role=show-all]")) {
      var previous = filter.focus;
      setFilter("");
      var back = document.querySelector('.subq-text[data-filter-focus="' + previous + '"]');
      if (back) back.focus();
    }
  });

  document.addEventListener("keydown", function (event) {
    if (event.key === "Escape" && filter.focus) setFilter("");
  });

  function afterUpdate() {
    restoreDetails();
    followReasoning();
    followStream();
    syncFilter();
    announceChanges();
  }

  document.addEventListener("htmx:wsBeforeMessage", noteStreamPosition);
  document.addEventListener("htmx:wsAfterMessage", function () {
    afterUpdate();
    caughtUp();
  });
  // Pause / resume / cancel swap the header through a normal htmx request.
  document.addEventListener("htmx:afterSettle", afterUpdate);

  // ---- The clock ticks between server updates ---------------------------------------------

  function fmt(seconds) {
    var total = Math.max(0, Math.round(seconds));
    var h = Math.floor(total / 3600), m = Math.floor((total % 3600) / 60), s = total % 60;
    if (h) return h + "h " + String(m).padStart(2, "0") + "m";
    return m + ":" + String(s).padStart(2, "0");
  }

  var anchor = { rev: null, at: 0 };
  setInterval(function () {
    var header = document.getElementById("session-header");
    if (!header) return;
    if (anchor.rev !== header.dataset.revision + header.dataset.status) {
      anchor = { rev: header.dataset.revision + header.dataset.status, at: Date.now() };
    }
    var live = document.getElementById("live-reasoning");
    if (live && live.dataset.started && live.dataset.writing !== "1") {
      var counter = live.querySelector("[data-role=thinking-seconds]");
      var since = Date.now() / 1000 - parseFloat(live.dataset.started);
      if (counter) counter.textContent = String(Math.max(0, Math.round(since)));
    }
    if (header.dataset.ticking !== "1") return;
    var budget = parseFloat(header.dataset.budget);
    var elapsed = parseFloat(header.dataset.elapsed) + (Date.now() - anchor.at) / 1000;
    elapsed = Math.min(elapsed, budget);
    var remaining = header.querySelector("[data-role=remaining]");
    var bar = header.querySelector("[data-role=bar]");
    if (remaining) remaining.textContent = fmt(budget - elapsed);
    if (bar) bar.style.width = (100 * elapsed / budget).toFixed(1) + "%";
  }, 1000);

  // ---- Start form: budget presets and a question box that grows -------------------------

  function syncPresets(group, input) {
    group.querySelectorAll("button[data-minutes]").forEach(function (button) {
      var on = parseFloat(button.dataset.minutes) === parseFloat(input.value);
      button.setAttribute("aria-pressed", on ? "true" : "false");
    });
  }

  function setUpStartForm() {
    document.querySelectorAll("[data-presets-for]").forEach(function (group) {
      var input = document.getElementById(group.dataset.presetsFor);
      if (!input) return;
      group.hidden = false;
      syncPresets(group, input);
      group.addEventListener("click", function (event) {
        var button = event.target.closest("button[data-minutes]");
        if (!button) return;
        input.value = button.dataset.minutes;
        syncPresets(group, input);
      });
      input.addEventListener("input", function () { syncPresets(group, input); });
    });
    // Browsers without CSS field-sizing: grow the question box with its text.
    if (!(window.CSS && CSS.supports && CSS.supports("field-sizing", "content"))) {
      document.querySelectorAll(".start-form textarea").forEach(function (area) {
        var grow = function () {
          area.style.height = "auto";
          area.style.height = area.scrollHeight + 2 + "px";
        };
        area.addEventListener("input", grow);
        grow();
      });
    }
  }

  // Thoughts appended live fade in; a page load or a catch-up (a whole new list) does not.
  function markArrivals(records) {
    records.forEach(function (record) {
      if (record.target.id !== "thought-list") return;
      record.addedNodes.forEach(function (node) {
        if (node.nodeType === 1) node.classList.add("arrived");
      });
    });
  }

  function ready() {
    var live = document.getElementById("live");
    if (live && window.MutationObserver) {
      new MutationObserver(markArrivals).observe(live, { childList: true, subtree: true });
    }
    setUpStartForm();
    var header = document.getElementById("session-header");
    if (header) announced.status = header.dataset.status;
    var answer = document.getElementById("answer");
    announced.answer = !!answer && !answer.classList.contains("hidden");
    followReasoning();
    // Someone opening a running session came to watch: start at the newest thoughts.
    if (header && !FINISHED[header.dataset.status]) followStream();
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", ready);
  } else {
    ready();
  }
})();
