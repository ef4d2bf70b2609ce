// The review app's little script: everything works without it (the pages are complete HTML,
// the forms submit); with it, forms submit as their controls change, large outputs load where
// they are, and a session being written refreshes as its events arrive.
(function () {
  "use strict";
  // Filters and time travel submit as they change.
  document.querySelectorAll("form[data-autosubmit]").forEach(function (form) {
    form.querySelectorAll("input[type=checkbox], select").forEach(function (c) {
      c.addEventListener("change", function () { form.submit(); });
    });
    var range = form.querySelector("input[type=range]");
    var shown = form.querySelector("output");
    if (range && shown) {
      range.addEventListener("input", function () { shown.value = range.value; });
      range.addEventListener("change", function () { form.submit(); });
    }
  });
  // A large output loads into the page, from the server's blob store.
  document.addEventListener("click", function (ev) {
    var link = ev.target.closest && ev.target.closest("a[data-blob]");
    if (!link) { return; }
    ev.preventDefault();
    var pre = document.createElement("pre");
    pre.textContent = "loading…";
    link.replaceWith(pre);
    fetch(link.href, { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
      .then(function (t) { pre.textContent = t; })
      .catch(function (e) { pre.textContent = "could not load the output (" + e + ")"; });
  });
  // Live: refresh the session's fragment when its events arrive.
  var live = document.querySelector("[data-live-session]");
  if (!live || !window.EventSource) { return; }
  var session = live.getAttribute("data-live-session");
  var status = document.getElementById("live-status");
  var pending = null;
  var retries = 0;
  function refresh() {
    pending = null;
    fetch(window.location.href, { credentials: "same-origin" })
      .then(function (r) { return r.text(); })
      .then(function (html) {
        var doc = new DOMParser().parseFromString(html, "text/html");
        var fresh = doc.getElementById("live");
        var here = document.getElementById("live");
        if (!fresh || !here) { return; }
        var open = {};
        here.querySelectorAll("details[open][id]").forEach(function (d) { open[d.id] = true; });
        here.replaceWith(fresh);
        fresh.querySelectorAll("details[id]").forEach(function (d) { if (open[d.id]) { d.open = true; } });
        // The read models may still be catching up: ask again until the badge says fresh.
        var badge = fresh.querySelector("[data-freshness]");
        if (badge && badge.getAttribute("data-freshness") !== "fresh" && retries < 20) {
          retries += 1;
          schedule(250);
        } else {
          retries = 0;
        }
      });
  }
  function schedule(ms) { if (!pending) { pending = setTimeout(refresh, ms); } }
  var source = new EventSource("/v1/events/stream?session=" + encodeURIComponent(session));
  source.onopen = function () { if (status) { status.className = "live on"; status.textContent = "live"; } };
  source.onerror = function () { if (status) { status.className = "live"; status.textContent = "reconnecting"; } };
  source.onmessage = function () { schedule(100); };
})();
