// Annotation app: small enhancements of the server-rendered forms. Nothing here knows
// anything about the conversation beyond what the page already shows.
(function () {
  "use strict";
  var slider = document.getElementById("slider");
  if (slider) {
    var out = document.getElementById("slider-value");
    var btn = document.getElementById("submit1");
    var hint = document.getElementById("slider-hint");
    slider.addEventListener("input", function () {
      out.textContent = slider.value;
      btn.disabled = false;
      if (hint) hint.textContent = "";
    });
  }
  var step2 = document.getElementById("step2");
  if (step2) {
    var onset = document.getElementById("onset_turn");
    var shown = document.getElementById("onset-shown");
    var turns = document.querySelectorAll(".turn.system.clickable");
    turns.forEach(function (el) {
      el.addEventListener("click", function () {
        turns.forEach(function (o) { o.classList.remove("chosen"); });
        el.classList.add("chosen");
        onset.value = el.getAttribute("data-n");
        shown.textContent = "Chosen: assistant turn " + onset.value + ".";
      });
    });
    step2.addEventListener("submit", function (ev) {
      var ans = step2.querySelector("input[name=answer]:checked");
      if (!ans) { ev.preventDefault(); return; }
      if (ans.value === "no") { onset.value = ""; return; }
      if (!onset.value) {
        ev.preventDefault();
        shown.textContent = "Please click the first assistant turn where it starts.";
      }
    });
  }
  document.body.setAttribute("data-ready", "1");  // the handlers above are attached
})();
