// Deep Think page behaviour: WebSocket catch-up, connection state, a ticking clock.
// Loaded after htmx and before its ws extension, which uses htmx.createWebSocket if set.
(function () {
  "use strict";

  // Each (re)connect tells the server which revision the page shows, so the server sends a
  // full catch-up only when the page missed something.
  htmx.createWebSocket = function (url) {
    var header = document.getElementById("session-header");
    var rev = header ? header.dataset.revision : "";
    var sep = url.indexOf("?") === -1 ? "?" : "&";
    return new WebSocket(url + sep + "rev=" + encodeURIComponent(rev || ""), []);
  };

  function setConnection(state, text) {
    var el = document.getElementById("connection");
    if (!el) return;
    el.dataset.state = state;
    el.textContent = text;
  }

  document.addEventListener("htmx:wsConnecting", function () {
    setConnection("connecting", "Connecting…");
  });
  document.addEventListener("htmx:wsOpen", function () {
    setConnection("live", "Live");
  });
  document.addEventListener("htmx:wsClose", function (event) {
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

  function fmt(seconds) {
    var total = Math.max(0, Math.round(seconds));
    var h = Math.floor(total / 3600), m = Math.floor((total % 3600) / 60), s = total % 60;
    if (h) return h + "h " + String(m).padStart(2, "0") + "m";
    return m + ":" + String(s).padStart(2, "0");
  }

  // Between server updates the clock ticks locally from the last known elapsed time.
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
})();
