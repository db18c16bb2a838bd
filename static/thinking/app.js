// Deep Think page behaviour: WebSocket catch-up and connection state, a ticking clock, the
// thought-stream filter, announcements for screen readers, and the start form's presets.
// Loaded after htmx and before its ws extension, which uses htmx.createWebSocket if set.
// Everything here reads text with textContent and writes it with textContent: model text
// never becomes markup on this side either.
(function () {
  "use strict";

  var FINISHED = { completed: 1, failed: 1, cancelled: 1 };

  // Each (re)connect tells the server which revision the page shows and the last row of each
  // list, so the server sends only what the page missed, in parts.
  function lastId(selector, prefix) {
    var last = -1;
    document.querySelectorAll(selector).forEach(function (el) {
      var n = parseInt(el.id.slice(prefix.length), 10);
      if (n > last) last = n;
    });
    return last;
  }

  // The highest id a list's page knew of when rendered or trimmed (data-top): the page
  // shows only some of the sources and sub-questions, the rest one request away.
  function knownTop(id) {
    var el = document.getElementById(id);
    var top = el ? parseInt(el.dataset.top || "0", 10) : 0;
    return isNaN(top) ? 0 : top;
  }

  function pageMarks() {
    var header = document.getElementById("session-header");
    return {
      rev: header ? header.dataset.revision : "",
      t: lastId('#thought-list > li[id^="thought-"], #scratchpad-list > li[id^="thought-"]', "thought-"),
      y: lastId('#synthesis-list > li[id^="synthesis-"]', "synthesis-"),
      s: Math.max(0, knownTop("source-list"), lastId('#source-list > li[id^="source-"]', "source-")),
      q: Math.max(0, knownTop("subq-tree"), lastId('li.subq[id^="subq-"]', "subq-")),
      // The sub-questions it shows: a catch-up redraws those that moved, not every one.
      qs: Array.prototype.map.call(document.querySelectorAll('li.subq[id^="subq-"]'), function (li) {
        return li.id.slice(5);
      }).join(","),
    };
  }

  // A live update may patch or extend a row this page does not show (a follow-up of a
  // sub-question beyond the first ones, an older synthesis checked again): it gets a
  // placeholder in #offpage to land in, so no swap misses its target, and is dropped after.
  function sinkMissingTargets(event) {
    var message = event.detail && event.detail.message;
    var sink = document.getElementById("offpage");
    if (!sink || typeof message !== "string" || message.indexOf("hx-swap-oob") === -1) return;
    var template = document.createElement("template");
    template.innerHTML = message;
    template.content.querySelectorAll("[hx-swap-oob]").forEach(function (el) {
      var how = el.getAttribute("hx-swap-oob");
      var id = how === "true" ? el.id : (/^[a-zA-Z]+:#([\w-]+)$/.exec(how) || [])[1];
      if (!id || document.getElementById(id)) return;
      // Made by this very message (a new sub-question and then its follow-up): not missing.
      if (template.content.querySelector("#" + CSS.escape(id) + ":not([hx-swap-oob])")) return;
      var holder = document.createElement("div");
      holder.id = id;
      sink.appendChild(holder);
    });
  }

  function dropOffpage() {
    var sink = document.getElementById("offpage");
    if (!sink || !sink.firstChild) return;
    var tree = document.getElementById("subq-tree");
    var top = Math.max(knownTop("subq-tree"), lastId('#offpage li.subq[id^="subq-"]', "subq-"));
    if (tree) tree.dataset.top = String(top);
    sink.replaceChildren();
  }

  htmx.createWebSocket = function (url) {
    var marks = pageMarks();
    var query = Object.keys(marks).map(function (key) {
      return key + "=" + encodeURIComponent(marks[key]);
    });
    var sep = url.indexOf("?") === -1 ? "?" : "&";
    return new WebSocket(url + sep + query.join("&"), []);
  };

  // ---- Connection indicator -------------------------------------------------------------

  // Closes in a row without a working connection in between; after MAX_FAILURES the page
  // stops trying and says so, with a reload button.
  var MAX_FAILURES = 6;
  var connection = { everOpen: false, catchingUp: false, timer: 0, failures: 0, gaveUp: false, openedAt: 0 };

  htmx.config.wsReconnectDelay = function (retry) {
    if (connection.gaveUp) return 2147483647; // never: the message asks for a reload
    var n = Math.min(Math.max(retry, connection.failures), 6);
    return 500 * Math.pow(2, n) * (0.5 + Math.random() / 2);
  };

  function setConnection(state, text) {
    var el = document.getElementById("connection");
    if (!el) return;
    var header = document.getElementById("session-header");
    if (header && FINISHED[header.dataset.status]) {
      state = "finished";
      text = "Finished";
    }
    var reload = document.getElementById("reload");
    if (reload) reload.hidden = state !== "closed";
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

  function giveUp(text) {
    connection.gaveUp = true;
    setConnection("closed", text);
  }

  document.addEventListener("htmx:wsConnecting", function () {
    if (!connection.everOpen) setConnection("connecting", "Connecting…");
  });
  document.addEventListener("htmx:wsOpen", function () {
    connection.openedAt = Date.now();
    if (!connection.everOpen) {
      connection.everOpen = true;
      setConnection("live", "Live");
      return;
    }
    // After a reconnect the server first sends what the page missed, if anything; if it
    // missed nothing no message comes, so stop waiting after a moment.
    connection.catchingUp = true;
    setConnection("catching-up", "Catching up…");
    clearTimeout(connection.timer);
    connection.timer = setTimeout(caughtUp, 1500);
  });
  document.addEventListener("htmx:wsClose", function (event) {
    clearTimeout(connection.timer);
    connection.catchingUp = false;
    var code = event.detail && event.detail.event ? event.detail.event.code : 0;
    // A connection that held for a while was working: the count starts over.
    if (connection.openedAt && Date.now() - connection.openedAt > 10000) connection.failures = 0;
    connection.openedAt = 0;
    connection.failures += 1;
    if (code === 4403) {
      giveUp("Signed out, or no longer shared with you: reload to sign in again");
    } else if (code === 4404) {
      giveUp("This session is not available: reload the page");
    } else if (code === 4429) {
      giveUp("Too many live pages open: close some, then reload this one");
    } else if (code === 4500) {
      giveUp("The page could not catch up: reload it");
    } else if (code === 1000 || (code >= 4000 && code < 5000)) {
      giveUp("Not connected: reload the page");
    } else if (connection.failures >= MAX_FAILURES) {
      giveUp("Cannot reach the server (tried " + connection.failures + " times): reload the page");
    } else {
      setConnection("reconnecting", "Reconnecting…");
      checkAccess();
    }
  });

  // A refused handshake looks like a network error to the browser (1006). Asking for the page
  // tells the difference: a login redirect or a 404 means retrying cannot help.
  function checkAccess() {
    if (!window.fetch) return;
    fetch(window.location.pathname, { credentials: "same-origin", redirect: "manual", headers: { "HX-Request": "true" } })
      .then(function (response) {
        if (response.type === "opaqueredirect" || response.status === 401 || response.status === 302) {
          giveUp("Signed out: reload to sign in again");
        } else if (response.status === 404 || response.status === 403) {
          giveUp("You no longer have access to this session: reload the page");
        }
      })
      .catch(function () { /* the server is unreachable: keep retrying */ });
  }
  document.addEventListener("htmx:wsError", function () {
    if (!connection.gaveUp) setConnection("reconnecting", "Connection problem, retrying…");
  });
  document.addEventListener("click", function (event) {
    if (event.target.closest("#reload")) window.location.reload();
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

  // Once the session has ended nothing is being written: a last "Writing…" of the model
  // call in flight, delivered after the end, is put away.
  function endLivePanel() {
    var header = document.getElementById("session-header");
    var panel = document.getElementById("live-reasoning");
    if (!header || !panel || !FINISHED[header.dataset.status] || panel.classList.contains("hidden")) return;
    panel.classList.add("hidden");
    panel.replaceChildren();
    delete panel.dataset.started;
    delete panel.dataset.writing;
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
        // The follow-up card asks for itself again: "Think longer" and "Ask a follow-up"
        // appear (as the viewer may use them), "Notify me in this tab" goes.
        if (FINISHED[status]) htmx.trigger(document.body, "deepthink:ended");
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

  // The page holds only the newest thoughts, so the filter asks the server for the newest
  // page of the thoughts on the sub-question and shows them in their own list, older ones
  // behind its own "Show earlier" row (li.focus-earlier); thoughts that arrive later on the
  // same sub-question are copied into it. Sub-question ids are integers; anything else is
  // ignored. opener: the control that set the filter, where "Show all thoughts" puts focus
  // back; expanded: earlier pages were asked for (live copies then trim nothing).
  var filter = { focus: "", label: "", request: 0, opener: null, expanded: false, refocus: false };

  function focusList() {
    return document.getElementById("focus-list");
  }

  function setFilter(focus, label) {
    filter.focus = /^\d+$/.test(focus || "") ? focus : "";
    filter.label = filter.focus ? label || "" : "";
    filter.expanded = false;
    var list = focusList();
    var stream = document.getElementById("thought-list");
    if (list) list.replaceChildren();
    if (stream) stream.hidden = !!filter.focus;
    if (list) list.hidden = !filter.focus;
    syncFilter();
    loadFilter();
  }

  // The filtered list's "Show earlier" row, if any.
  function focusEarlier(list) {
    return list.querySelector(":scope > li.focus-earlier");
  }

  // The newest page of the chosen sub-question's thoughts, from the server, merged into what
  // the filtered list holds (thoughts copied in live meanwhile, or pages loaded before a
  // catch-up). Of two "Show earlier" rows the one further back stays: it is where the
  // thoughts shown start.
  function loadFilter() {
    var list = focusList();
    if (!filter.focus || !list) return;
    var live = document.getElementById("live");
    var base = live ? live.dataset.thoughtsUrl : "";
    if (!base) return;
    var request = ++filter.request;
    list.setAttribute("aria-busy", "true");
    fetch(base + "?focus=" + filter.focus, { credentials: "same-origin", headers: { "HX-Request": "true" } })
      .then(function (response) {
        if (!response.ok) throw new Error(String(response.status));
        return response.text();
      })
      .then(function (html) {
        if (request !== filter.request) return; // another sub-question was chosen meanwhile
        var parsed = new DOMParser().parseFromString("<ol>" + html + "</ol>", "text/html");
        var items = parsed.querySelectorAll("ol > li[data-seq]");
        var have = {};
        list.querySelectorAll("li[data-seq]").forEach(function (li) { have[li.dataset.seq] = 1; });
        var fragment = document.createDocumentFragment();
        items.forEach(function (li) { if (!have[li.dataset.seq]) fragment.appendChild(li); });
        list.prepend(fragment);
        // Thoughts copied in live while this loaded may be older than some it brought.
        var rows = Array.prototype.slice.call(list.querySelectorAll(":scope > li[data-seq]"));
        var sorted = rows.slice().sort(function (a, b) { return a.dataset.seq - b.dataset.seq; });
        if (sorted.some(function (li, i) { return li !== rows[i]; })) {
          sorted.forEach(function (li) { list.appendChild(li); });
        }
        var had = focusEarlier(list);
        var came = parsed.querySelector("ol > li.focus-earlier");
        if (came && (!had || +came.dataset.before < +had.dataset.before)) {
          if (had) had.remove();
          list.prepend(came);
          htmx.process(came);
        } else if (had) {
          list.prepend(had);
        }
        list.removeAttribute("aria-busy");
        syncFilter();
      })
      .catch(function () {
        if (request !== filter.request) return;
        list.removeAttribute("aria-busy");
        var bar = document.getElementById("stream-filter");
        if (bar) bar.querySelector("[data-role=count]").textContent = "(could not load them: try again)";
      });
  }

  // A thought appended live on the selected sub-question shows in the filtered list too.
  function copyToFocus(node) {
    var list = focusList();
    if (!list || !filter.focus || node.dataset.focus !== filter.focus) return;
    var seq = node.id.replace("thought-", "");
    if (list.querySelector('li[data-seq="' + seq + '"]')) return;
    var copy = node.cloneNode(true);
    copy.removeAttribute("id");
    copy.dataset.seq = seq;
    copy.querySelectorAll("[id]").forEach(function (el) { el.removeAttribute("id"); });
    list.appendChild(copy);
    trimFocus(list);
  }

  // Following the newest on a sub-question, the filtered list keeps its newest KEEP_THOUGHTS
  // copies, the older ones behind its "Show earlier" row, as the stream does.
  function trimFocus(list) {
    var live = document.getElementById("live");
    if (filter.expanded || !live || list.getAttribute("aria-busy") === "true") return;
    var items = list.querySelectorAll(":scope > li[data-seq]");
    var extra = items.length - KEEP_THOUGHTS;
    if (extra <= 0) return;
    for (var i = 0; i < extra; i++) items[i].remove();
    var before = items[extra].dataset.seq;
    var earlier = focusEarlier(list);
    var hidden = extra + (earlier ? parseInt(earlier.dataset.count || "0", 10) : 0);
    if (earlier) earlier.remove();
    var row = loadRow("", "earlier focus-earlier", hidden,
      live.dataset.thoughtsUrl + "?focus=" + filter.focus + "&before=" + before, "closest li",
      "outerHTML", "Show earlier thoughts on this sub-question (" + hidden + " not shown)");
    row.dataset.before = before;
    list.prepend(row);
    htmx.process(row);
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
    var list = focusList();
    var count = list ? list.querySelectorAll("li[data-seq]").length : 0;
    var earlier = list && focusEarlier(list);
    if (earlier) count += parseInt(earlier.dataset.count || "0", 10) || 0; // one request away
    if (list && list.getAttribute("aria-busy") === "true") {
      bar.querySelector("[data-role=focus-text]").textContent = filter.label;
      bar.querySelector("[data-role=count]").textContent = "(loading…)";
      bar.hidden = false;
      if (empty) empty.hidden = true;
      return;
    }
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
        filter.opener = button;
        var stream = document.getElementById("thoughts-title");
        // On a narrow screen the stream is far from the sub-question list: bring it in view.
        if (stream && window.matchMedia("(max-width: 860px)").matches) {
          stream.scrollIntoView({ block: "start" });
        }
      }
      return;
    }
    if (event.target.closest("#stream-filter [data-role=show-all]")) {
      // Back to where the person chose the filter (a thought's "on: …" in the stream, or the
      // sub-question), not always to the sub-question list: on a phone that is far away.
      var previous = filter.focus;
      var opener = filter.opener;
      setFilter("");
      var back = opener && opener.isConnected && opener.getClientRects().length
        ? opener
        : document.querySelector('.subq-text[data-filter-focus="' + previous + '"]');
      if (back) back.focus();
    }
  });

  document.addEventListener("keydown", function (event) {
    if (event.key === "Escape" && filter.focus) setFilter("");
  });

  // The thought list stays bounded however long the page is open. Following the end, it
  // keeps the newest KEEP_THOUGHTS, the older ones behind "Show earlier". Reading earlier
  // thoughts (after "Show earlier"), it keeps at most MAX_THOUGHTS: what lies far below is
  // trimmed, and live thoughts wait behind "Show the newest thoughts", one request away.
  var KEEP_THOUGHTS = 150;
  var MAX_THOUGHTS = 300;

  // Once the person has asked for earlier thoughts they are reading them: a later live
  // update (a citation check, say) must not take them away again.
  document.addEventListener("click", function (event) {
    if (!event.target.closest) return;
    if (event.target.closest("#focus-list li.focus-earlier button")) {
      filter.expanded = true; // reading back: live copies no longer push these out
      filter.refocus = document.activeElement === event.target.closest("button");
    } else if (event.target.closest("#thought-earlier button")) {
      stream.expanded = true;
      // The button is swapped out with the thoughts it loads: keep the focus's place (a
      // click focuses it too in most browsers; a keyboard needs it).
      stream.refocus = document.activeElement === event.target.closest("button");
    } else if (event.target.closest("#thought-later button")) {
      stream.expanded = false; // back at the newest page: following the end again
      stream.atEnd = true;
    }
  });

  function thoughtItems(list) {
    return list.querySelectorAll(":scope > li.thought[id^='thought-']");
  }

  // A row whose button loads a part of the list in its place (or the whole list).
  function loadRow(id, className, hidden, url, target, swap, text) {
    var row = document.createElement("li");
    if (id) row.id = id;
    row.className = className;
    row.dataset.count = String(hidden);
    var button = document.createElement("button");
    button.type = "button";
    button.setAttribute("hx-get", url);
    button.setAttribute("hx-target", target);
    button.setAttribute("hx-swap", swap);
    button.textContent = text;
    row.appendChild(button);
    return row;
  }

  function earlierRow(live, before, hidden) {
    return loadRow("thought-earlier", "earlier", hidden, live.dataset.thoughtsUrl + "?before=" + before,
      "#thought-earlier", "outerHTML", "Show earlier thoughts (" + hidden + " not shown)");
  }

  function laterRow(live, hidden) {
    return loadRow("thought-later", "later", hidden, live.dataset.thoughtsUrl, "#thought-list",
      "innerHTML", "Show the newest thoughts (" + hidden + " below not shown)");
  }

  function trimStream() {
    var list = document.getElementById("thought-list");
    var live = document.getElementById("live");
    if (!list || !live || filter.focus) return;
    var items = thoughtItems(list);
    var later = document.getElementById("thought-later");
    var i, extra;
    if (later || (stream.expanded && items.length > MAX_THOUGHTS)) {
      // Reading far back: drop the newest beyond the bound, and live arrivals after the row.
      var hidden = later ? parseInt(later.dataset.count || "0", 10) : 0;
      var dropped = [];
      if (later) {
        for (var node = later.nextElementSibling; node; node = node.nextElementSibling) {
          if (node.matches("li.thought")) dropped.push(node);
        }
      }
      extra = items.length - dropped.length - MAX_THOUGHTS;
      for (i = items.length - dropped.length - 1; extra > 0; i--, extra--) dropped.push(items[i]);
      if (!dropped.length && later) return;
      dropped.forEach(function (li) { li.remove(); });
      if (later) later.remove();
      list.appendChild(laterRow(live, hidden + dropped.length));
      htmx.process(list.lastElementChild);
      return;
    }
    if (!stream.atEnd || stream.expanded) return;
    extra = items.length - KEEP_THOUGHTS;
    if (extra <= 0) return;
    for (i = 0; i < extra; i++) items[i].remove();
    var before = items[extra].id.slice("thought-".length);
    var earlier = document.getElementById("thought-earlier");
    var count = (earlier ? parseInt(earlier.dataset.count || "0", 10) : 0) + extra;
    if (earlier) earlier.remove();
    list.prepend(earlierRow(live, before, count));
    htmx.process(list.firstElementChild);
  }

  // Sources, sub-questions and syntheses grow live too: each list keeps a bounded number of
  // rows (the rest are under "All sources", "All sub-questions", "Show earlier syntheses").
  var KEEP_SOURCES = 60;
  var KEEP_QUESTIONS = 150;
  var KEEP_SYNTHESES = 20;

  function trimLists() {
    // Sources: the most cited come first and stay; the oldest of those added live go.
    var sources = document.getElementById("source-list");
    if (sources) {
      var rows = sources.querySelectorAll(":scope > li[id^='source-']");
      var cited = parseInt(sources.dataset.cited || "0", 10) || 0;
      var top = Math.max(knownTop("source-list"), lastId("#source-list > li[id^='source-']", "source-"));
      sources.dataset.top = String(top);
      var over = rows.length - KEEP_SOURCES; // cited < KEEP_SOURCES: rows[cited + over - 1] exists
      for (var i = 0; i < over; i++) rows[cited + i].remove();
    }
    // Sub-questions: the tree keeps its first rows (by priority); the last in reading order
    // go (a follow-up comes after the question it follows, so a row goes before its parent).
    var tree = document.getElementById("subq-tree");
    if (tree) {
      tree.dataset.top = String(Math.max(knownTop("subq-tree"), lastId("li.subq[id^='subq-']", "subq-")));
      var questions = tree.querySelectorAll("li.subq");
      for (var q = questions.length - 1; q >= KEEP_QUESTIONS; q--) questions[q].remove();
    }
    // Syntheses: the newest stay; older ones go behind "Show earlier syntheses".
    var syntheses = document.getElementById("synthesis-list");
    var live = document.getElementById("live");
    if (syntheses && live) {
      var shown = syntheses.querySelectorAll(":scope > li.synthesis[id^='synthesis-']");
      var extra = shown.length - KEEP_SYNTHESES;
      if (extra > 0) {
        for (var j = 0; j < extra; j++) shown[j].remove();
        var earlier = syntheses.querySelector(":scope > li.synthesis-earlier");
        var hidden = extra + (earlier ? parseInt(earlier.dataset.count || "0", 10) : 0);
        if (earlier) earlier.remove();
        var before = shown[extra].id.slice("synthesis-".length);
        var row = loadRow("", "earlier synthesis-earlier", hidden, live.dataset.synthesesUrl + "?before=" + before,
          "closest li", "outerHTML", "Show earlier syntheses (" + hidden + " not shown)");
        syntheses.prepend(row);
        htmx.process(row);
      }
    }
  }

  // The scratchpad keeps its newest notes, as a fresh page shows them and its summary says:
  // live notes and a catch-up's (the newest of those missed) are appended after the others.
  // Not while it is open: a note the person is reading does not vanish under them.
  function trimNotes() {
    var box = document.getElementById("scratchpad");
    if (box && box.open) return; // being read: trimmed once closed, at the next update
    var list = document.getElementById("scratchpad-list");
    var keep = list ? parseInt(list.dataset.keep || "", 10) : NaN;
    if (!(keep > 0)) return;
    var items = list.querySelectorAll(":scope > li[id^='thought-']");
    for (var i = 0; i < items.length - keep; i++) items[i].remove();
  }

  function afterUpdate() {
    dropOffpage();
    restoreDetails();
    followReasoning();
    endLivePanel();
    trimStream();
    trimLists();
    trimNotes();
    followStream();
    syncFilter();
    announceChanges();
  }

  document.addEventListener("htmx:wsBeforeMessage", noteStreamPosition);
  document.addEventListener("htmx:wsBeforeMessage", sinkMissingTargets);
  document.addEventListener("htmx:wsAfterMessage", function () {
    afterUpdate();
    caughtUp();
  });
  // Pause / resume / cancel swap the header through a normal htmx request.
  document.addEventListener("htmx:afterSettle", afterUpdate);
  // Earlier thoughts loaded with the button focused: focus goes to the next "Show earlier"
  // (Enter again loads more), or to the stream once it starts at the first thought.
  document.addEventListener("htmx:afterSettle", function (event) {
    var info = event.detail && event.detail.pathInfo;
    if (filter.refocus && info && /[?&]focus=/.test(info.requestPath || "")) {
      filter.refocus = false;
      var list = focusList();
      var row = list && focusEarlier(list);
      var again = (row && row.querySelector("button")) || list;
      if (again) again.focus({ preventScroll: true });
      return;
    }
    if (!stream.refocus || !info || !/[?&]before=/.test(info.requestPath || "")) return;
    stream.refocus = false;
    var next = document.querySelector("#thought-earlier button") || document.getElementById("thought-list");
    if (next) next.focus({ preventScroll: true });
  });

  // ---- The clock ticks between server updates ---------------------------------------------

  function fmt(seconds) {
    var total = Math.max(0, Math.round(seconds));
    var h = Math.floor(total / 3600), m = Math.floor((total % 3600) / 60), s = total % 60;
    if (h) return h + "h " + String(m).padStart(2, "0") + "m";
    return m + ":" + String(s).padStart(2, "0");
  }

  var anchor = { header: null, at: 0 };
  setInterval(function () {
    var header = document.getElementById("session-header");
    if (!header) return;
    // Each rendered header carries the server's elapsed time as of its rendering.
    if (anchor.header !== header) anchor = { header: header, at: Date.now() };
    var live = document.getElementById("live-reasoning");
    if (live && live.dataset.started && live.dataset.writing !== "1") {
      var counter = live.querySelector("[data-role=thinking-seconds]");
      var since = Date.now() / 1000 - parseFloat(live.dataset.started);
      if (counter) counter.textContent = String(Math.max(0, Math.round(since)));
    }
    if (header.dataset.ticking !== "1") return;
    var budget = parseFloat(header.dataset.budget);
    // Honest clock: it runs only as long as the server says something is thinking (the
    // worker's lease is fresh, the provider is not being waited for), then stands still.
    var tickFor = parseFloat(header.dataset.tickFor || "0");
    var since = Math.min((Date.now() - anchor.at) / 1000, isNaN(tickFor) ? 0 : tickFor);
    var elapsed = parseFloat(header.dataset.elapsed) + since;
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
        // A change like typing one: the cost estimate below the form follows it.
        input.dispatchEvent(new Event("change", { bubbles: true }));
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
      record.addedNodes.forEach(function (node) {
        // A catch-up after a long disconnect starts the stream over with its newest page:
        // under a filter the new list stays hidden, and the filtered list is loaded again
        // (the thoughts it missed on the sub-question are not all on that page), merged
        // into what it shows, so a failed load loses nothing.
        if (node.id === "thought-list" && filter.focus) {
          node.hidden = true;
          loadFilter();
        }
      });
      if (record.target.id !== "thought-list") return;
      record.addedNodes.forEach(function (node) {
        if (node.nodeType !== 1 || !node.id) return;
        node.classList.add("arrived");
        copyToFocus(node);
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
