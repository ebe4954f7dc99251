// The report's tables: sort by a column (click its header), filter by text, show more rows.
// Each table's rows are in a <script type="application/json" id="rows-NAME"> as the renderer
// formatted them ({"columns": [[name, numeric], ...], "rows": [[cell, ..., class], ...]}); the
// first page is also in the HTML, so the page reads without script. Nothing here formats a number.
"use strict";
(function () {
  const PAGE = 500;

  // A cell's sort key: numeric columns by their first number ("8/4/0" by 8, "-" lowest), others as text.
  function key(text, numeric) {
    if (!numeric) return text;
    const found = /[-+]?(?:\d+\.?\d*|\.\d+)(?:e[-+]?\d+)?/i.exec(text);
    return found ? parseFloat(found[0]) : -Infinity;
  }

  function escape(text) {
    return text.replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);
  }

  function setUp(table) {
    const data = JSON.parse(document.getElementById("rows-" + table.dataset.rows).textContent);
    const columns = data.columns;
    const body = table.tBodies[0];
    const tools = table.closest("section").querySelector(".tools");
    const filter = tools.querySelector("input");
    const more = tools.querySelector("button");
    const count = tools.querySelector(".count");
    let rows = data.rows;
    let shown = PAGE;

    function render() {
      const html = [];
      const n = Math.min(shown, rows.length);
      for (let i = 0; i < n; i++) {
        const row = rows[i];
        const cls = row[columns.length];
        html.push("<tr class=\"" + cls + "\">");
        for (let c = 0; c < columns.length; c++) {
          const classes = [columns[c][1] ? "num" : "", columns[c][0] === "ran in" ? "dt" : ""].filter(Boolean).join(" ");
          html.push("<td class=\"" + classes + "\">" + escape(row[c]) + "</td>");
        }
        html.push("</tr>");
      }
      body.innerHTML = html.join("");
      count.textContent = n + " of " + rows.length + " rows" + (rows.length !== data.rows.length ? " (filtered from " + data.rows.length + ")" : "");
      more.hidden = n >= rows.length;
    }

    table.tHead.querySelectorAll("th").forEach((th, c) => {
      th.addEventListener("click", () => {
        const descending = th.getAttribute("aria-sort") !== "descending";
        table.tHead.querySelectorAll("th").forEach((other) => other.removeAttribute("aria-sort"));
        th.setAttribute("aria-sort", descending ? "descending" : "ascending");
        const numeric = columns[c][1];
        const keyed = rows.map((row, i) => [key(row[c], numeric), i, row]);
        keyed.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : a[1] - b[1]) * (descending ? -1 : 1));
        rows = keyed.map((k) => k[2]);
        render();
      });
    });
    filter.addEventListener("input", () => {
      const words = filter.value.toLowerCase().split(/\s+/).filter(Boolean);
      rows = data.rows.filter((row) => {
        const text = row.slice(0, columns.length).join(" ").toLowerCase();
        return words.every((w) => text.includes(w));
      });
      shown = PAGE;
      table.tHead.querySelectorAll("th").forEach((other) => other.removeAttribute("aria-sort"));
      render();
    });
    more.addEventListener("click", () => { shown += PAGE * 4; render(); });
    count.textContent = Math.min(PAGE, rows.length) + " of " + rows.length + " rows";
    more.hidden = rows.length <= PAGE;
  }

  document.querySelectorAll("table.rows[data-rows]").forEach(setUp);
  document.body.dataset.ready = "true";  // for a test in a browser: the script ran to its end
})();
