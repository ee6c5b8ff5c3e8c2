// toolgate console: live updates of the reviews over server-sent events. The page works
// without this script (the forms post and the server redirects back); with it, reviews raised
// or decided anywhere show up without reloading.
(function () {
  "use strict";
  var box = document.getElementById("reviews");
  if (!box || !window.EventSource) { return; }
  var source = new EventSource(box.getAttribute("data-live"));
  source.addEventListener("reviews", function (e) {
    // Keep a comment being typed, and a button being pressed: skip an update while a text
    // area of the box with text in it, or a button of the box, has focus (a button takes the
    // focus when pressed: replaced between press and release, the click would be lost).
    var active = document.activeElement;
    var busy = active && box.contains(active) &&
      ((active.tagName === "TEXTAREA" && active.value) || active.tagName === "BUTTON");
    if (busy) {
      box.setAttribute("data-stale", "1");
      return;
    }
    box.innerHTML = e.data;
    box.removeAttribute("data-stale");
    box.setAttribute("data-updated", String(Date.now()));
  });
  source.addEventListener("error", function () {
    box.setAttribute("data-offline", "1");
  });
  source.addEventListener("open", function () {
    box.removeAttribute("data-offline");
  });
})();
