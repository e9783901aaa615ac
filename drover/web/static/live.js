// Live refresh: re-fetch this very URL (same query string, so the filters and
// the token are kept) every few seconds and swap the #live element's content.
(function () {
  "use strict";
  var live = document.querySelector("[data-live]");
  if (!live || !window.fetch || !window.DOMParser) { return; }
  var every = parseInt(live.getAttribute("data-live"), 10) || 3000;
  var refreshes = 0;
  function state(text) {
    var spans = live.querySelectorAll(".live-state");
    for (var i = 0; i < spans.length; i++) { spans[i].textContent = text; }
  }
  function tick() {
    fetch(window.location.href, { headers: { "Accept": "text/html" }, credentials: "same-origin" })
      .then(function (response) {
        if (!response.ok) { throw new Error("HTTP " + response.status); }
        return response.text();
      })
      .then(function (html) {
        var doc = new DOMParser().parseFromString(html, "text/html");
        var fresh = doc.querySelector("[data-live]");
        if (fresh) {
          live.innerHTML = fresh.innerHTML;
          refreshes += 1;
          document.body.setAttribute("data-refreshes", String(refreshes));
          state(" · live");
        }
      })
      .catch(function (error) { state(" · live refresh paused (" + error.message + ")"); })
      .then(function () { window.setTimeout(tick, every); });
  }
  document.body.setAttribute("data-refreshes", "0");
  state(" · live");
  window.setTimeout(tick, every);
})();
