// kipcheck certification report: filter the per-requirement table (optional; the page
// reads the same without JavaScript).
(function () {
  var table = document.getElementById("reqs");
  if (!table) return;
  var rows = Array.prototype.slice.call(table.querySelectorAll("tbody tr"));
  var mode = "all";
  var text = "";
  function apply() {
    rows.forEach(function (tr) {
      var st = tr.getAttribute("data-status") || "";
      var ok = mode === "all" ||
        (mode === "failing" && st.indexOf("fail") >= 0) ||
        (mode === "not-passing" && st.split(" ").some(function (s) { return s && s !== "pass"; }));
      if (ok && text) ok = tr.textContent.toLowerCase().indexOf(text) >= 0;
      tr.style.display = ok ? "" : "none";
    });
  }
  document.querySelectorAll(".toolbar button[data-mode]").forEach(function (b) {
    b.addEventListener("click", function () {
      mode = b.getAttribute("data-mode");
      document.querySelectorAll(".toolbar button[data-mode]").forEach(function (o) {
        o.classList.toggle("on", o === b);
      });
      apply();
    });
  });
  var input = document.getElementById("req-filter");
  if (input) input.addEventListener("input", function () { text = input.value.toLowerCase(); apply(); });
})();
