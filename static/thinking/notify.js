// Browser notification when the session on this page ends (#19). Kept apart from app.js:
// it only watches the live header's data-status (swapped in over the WebSocket) and also
// listens for a "deepthink:finished" event, should the page dispatch one.
(function () {
  "use strict";
  var ENDED = { completed: "completed", failed: "failed", cancelled: "was cancelled" };

  function ready(fn) {
    if (document.readyState !== "loading") fn();
    else document.addEventListener("DOMContentLoaded", fn);
  }

  ready(function () {
    var live = document.getElementById("live");
    var header = document.getElementById("session-header");
    if (!live || !header || !("Notification" in window)) return;
    var question = (document.querySelector("h1.question") || {}).textContent || "";
    var last = header.dataset.status;
    var shown = !!ENDED[last]; // finished before the page opened: nothing to announce

    var offer = document.getElementById("notify-offer");
    if (offer && !shown && Notification.permission === "default") {
      offer.hidden = false;
      offer.querySelector("button").addEventListener("click", function () {
        // Browsers only ask after a click; the answer is remembered for the site.
        Notification.requestPermission().then(function () { offer.hidden = true; });
      });
    }

    function notify(status, label) {
      if (shown || !ENDED[status]) return;
      shown = true;
      if (Notification.permission !== "granted") return;
      var note = new Notification("Deep Think " + (label || ENDED[status]).toLowerCase(), {
        body: question.trim().slice(0, 180),
        tag: "deepthink-" + live.dataset.sessionId,
      });
      note.onclick = function () { window.focus(); note.close(); };
    }

    function check() {
      var current = document.getElementById("session-header");
      if (!current) return;
      var status = current.dataset.status;
      if (status !== last) {
        last = status;
        notify(status, current.dataset.statusLabel);
      }
    }

    new MutationObserver(check).observe(live, {
      subtree: true, childList: true, attributes: true, attributeFilter: ["data-status"],
    });
    document.addEventListener("deepthink:finished", function (event) {
      var status = (event.detail && event.detail.status) || "completed";
      notify(status);
    });
  });
})();
