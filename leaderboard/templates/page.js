(function () {
  "use strict";

  function cellValue(row, idx) {
    var cell = row.cells[idx];
    if (!cell) { return null; }
    var v = cell.getAttribute("data-value");
    if (v === null || v === "") { return null; }
    return v;
  }

  function compare(a, b, numeric, dir) {
    // missing values always sort last, whatever the direction
    if (a === null && b === null) { return 0; }
    if (a === null) { return 1; }
    if (b === null) { return -1; }
    var r;
    if (numeric) { r = parseFloat(a) - parseFloat(b); } else { r = a.localeCompare(b); }
    return dir === "ascending" ? r : -r;
  }

  function dataRows(tbody) {
    return Array.prototype.filter.call(tbody.rows, function (r) { return !r.classList.contains("group"); });
  }

  // each tbody (results, paper references) is sorted on its own: references are never ranked
  function sortTable(table, th, dir) {
    var headRow = th.parentNode;
    var idx = Array.prototype.indexOf.call(headRow.cells, th);
    var numeric = th.getAttribute("data-type") === "num";
    Array.prototype.forEach.call(table.tBodies, function (tbody) {
      var rows = dataRows(tbody);
      rows.forEach(function (r, i) { r.setAttribute("data-order", String(i)); });
      rows.sort(function (a, b) {
        var c = compare(cellValue(a, idx), cellValue(b, idx), numeric, dir);
        return c !== 0 ? c : parseInt(a.getAttribute("data-order"), 10) - parseInt(b.getAttribute("data-order"), 10);
      });
      rows.forEach(function (r) { tbody.appendChild(r); });
    });
    Array.prototype.forEach.call(headRow.cells, function (h) { h.removeAttribute("aria-sort"); });
    th.setAttribute("aria-sort", dir);
  }

  function applyFilters(table) {
    var section = table.closest("section");
    var sel = section.querySelector("select.regime-filter");
    var search = section.querySelector("input.search");
    var toggle = table.querySelector("button.toggle-reference");
    var regime = sel ? sel.value : "all";
    var words = search ? search.value.toLowerCase().split(/\s+/).filter(Boolean) : [];
    var showRef = toggle ? toggle.getAttribute("aria-expanded") === "true" : true;
    Array.prototype.forEach.call(table.tBodies, function (tbody) {
      dataRows(tbody).forEach(function (r) {
        var isRef = r.classList.contains("reference");
        var rr = r.getAttribute("data-regime") || "";
        var text = r.getAttribute("data-search") || "";
        var ok = regime === "all" || rr === regime || rr === "baseline";
        if (ok && words.length) { ok = words.every(function (w) { return text.indexOf(w) >= 0; }); }
        if (isRef && !showRef) { ok = false; }
        r.hidden = !ok;
      });
    });
  }

  function initTabs() {
    var tabs = Array.prototype.slice.call(document.querySelectorAll("nav.tabs a.tab"));
    if (!tabs.length) { return; }
    function show(id) {
      tabs.forEach(function (t) {
        var on = t.getAttribute("aria-controls") === id;
        t.setAttribute("aria-selected", on ? "true" : "false");
        var panel = document.getElementById(t.getAttribute("aria-controls"));
        if (panel) { panel.hidden = !on; }
      });
    }
    tabs.forEach(function (t) {
      t.addEventListener("click", function (e) { e.preventDefault(); show(t.getAttribute("aria-controls")); });
    });
    var first = location.hash === "#about" ? "about" : tabs[0].getAttribute("aria-controls");
    show(first);
  }

  function init() {
    initTabs();
    Array.prototype.forEach.call(document.querySelectorAll("table.lb"), function (table) {
      var heads = table.tHead.rows[table.tHead.rows.length - 1].cells;
      Array.prototype.forEach.call(heads, function (th) {
        if (!th.hasAttribute("data-type")) { return; }
        th.setAttribute("tabindex", "0");
        var go = function () {
          var cur = th.getAttribute("aria-sort");
          var first = th.getAttribute("data-first") || "descending";
          var dir = cur ? (cur === "descending" ? "ascending" : "descending") : first;
          sortTable(table, th, dir);
        };
        th.addEventListener("click", go);
        th.addEventListener("keydown", function (e) { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); go(); } });
      });
      var section = table.closest("section");
      var sel = section.querySelector("select.regime-filter");
      if (sel) { sel.addEventListener("change", function () { applyFilters(table); }); }
      var search = section.querySelector("input.search");
      if (search) { search.addEventListener("input", function () { applyFilters(table); }); }
      var toggle = table.querySelector("button.toggle-reference");
      if (toggle) {
        toggle.addEventListener("click", function () {
          toggle.setAttribute("aria-expanded", toggle.getAttribute("aria-expanded") === "true" ? "false" : "true");
          applyFilters(table);
        });
      }
      applyFilters(table);
    });
    document.documentElement.setAttribute("data-ready", "1");
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", init);
  } else {
    init();
  }
}());
