// kanalyze audit report: sortable tables (html.py inlines this file; no other script runs).
// A click on a column's button sorts the table's rows by that column, a second click
// reverses them.  A cell's data-sort, when it has one, is its key, else its text;
// columns marked data-type="number" compare as numbers (an empty key sorts first).
"use strict";
(function () {
  function key(cell, numeric) {
    var text = cell.hasAttribute("data-sort") ? cell.getAttribute("data-sort") : cell.textContent.trim();
    if (!numeric) {
      return text;
    }
    var value = parseFloat(text);
    return isNaN(value) ? -Infinity : value;
  }

  function compare(a, b) {
    return a < b ? -1 : a > b ? 1 : 0;
  }

  function sortBy(table, header, column) {
    var ascending = header.getAttribute("aria-sort") !== "ascending";
    var numeric = header.getAttribute("data-type") === "number";
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (cell) {
      cell.removeAttribute("aria-sort");
    });
    header.setAttribute("aria-sort", ascending ? "ascending" : "descending");
    var body = table.tBodies[0];
    var keyed = Array.prototype.map.call(body.rows, function (row) {
      return [key(row.cells[column], numeric), row];
    });
    keyed.sort(function (a, b) {      // stable: equal keys keep their order
      var order = compare(a[0], b[0]);
      return ascending ? order : -order;
    });
    var moved = document.createDocumentFragment();
    keyed.forEach(function (pair) {
      moved.appendChild(pair[1]);
    });
    body.appendChild(moved);
  }

  document.querySelectorAll("table.sortable").forEach(function (table) {
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (header, column) {
      var button = header.querySelector("button");
      if (button) {
        button.addEventListener("click", function () {
          sortBy(table, header, column);
        });
      }
    });
  });
})();
