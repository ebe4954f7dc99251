// The report's tables: sort by a column (click its header), filter by text, scroll through every row.
// Each table's rows are in a <script type="application/json" id="rows-NAME">, by column: each
// column's distinct cell texts and, per row, which one it holds, or its texts one per row
// (Note [compact rows] in html.py).
// The first rows are also in the HTML, so the page reads without script. Only the rows in view
// are drawn (a table of 100k rows stays light); sorting and filtering work on the distinct texts.
// Nothing here formats a number: every text is the renderer's.
"use strict";
(function () {
  const OVERSCAN = 40;  // rows drawn above and below those in view

  // A cell's sort key: numeric columns by their first number ("8/4/0" by 8, "-" lowest), others as text.
  function key(text, numeric) {
    if (!numeric) return text;
    const found = /[-+]?(?:\d+\.?\d*|\.\d+)(?:e[-+]?\d+)?/i.exec(text);
    return found ? parseFloat(found[0]) : -Infinity;
  }

  function escape(text) {
    return text.replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);
  }

  // A column's code per row, from "codes", from "runs" (code, length, code, length, ...), or,
  // for "texts", the row's own.
  function decode(cell, count) {
    const codes = new Int32Array(count);
    if (cell.texts) {
      for (let i = 0; i < count; i++) codes[i] = i;
    } else if (cell.codes) {
      codes.set(cell.codes);
    } else {
      for (let i = 0, at = 0; i < cell.runs.length; i += 2) {
        codes.fill(cell.runs[i], at, at + cell.runs[i + 1]);
        at += cell.runs[i + 1];
      }
    }
    return codes;
  }

  function setUp(table) {
    const data = JSON.parse(document.getElementById("rows-" + table.dataset.rows).textContent);
    const columns = data.columns;
    const width = columns.length;  // data.cells[width] is the rows' class
    const total = data.count;
    const values = data.cells.map((cell) => cell.values || cell.texts);
    const codes = data.cells.map((cell) => decode(cell, total));
    const scroller = table.closest(".scroll");
    const body = table.tBodies[0];
    const tools = table.closest("section").querySelector(".tools");
    const filter = tools.querySelector("input");
    const count = tools.querySelector(".count");
    // As html.py writes the first rows: classes num, dt (the "ran in" column), wide (with the text as tooltip).
    const tdClass = columns.map((c) => [c[1] ? "num" : "", c[0] === "ran in" ? "dt" : "", c[2] ? "wide" : ""]
      .filter(Boolean).join(" "));
    const escaped = values.map(() => null);  // per column, its texts as HTML (made when first drawn)
    const ranks = [];   // per column, each distinct text's place in sort order (made on the first sort)
    const lowered = []; // per column, its texts in lower case (made on the first filter)
    let order = Int32Array.from({ length: total }, (_, i) => i);  // the rows shown, in their order
    let rowHeight = body.rows.length ? body.rows[0].getBoundingClientRect().height : 0;
    let drawn = "";
    let pending = false;

    function html(c) {
      if (!escaped[c]) escaped[c] = values[c].map(escape);
      return escaped[c];
    }

    function pad(height) {
      return "<tr class=\"pad\"><td colspan=\"" + width + "\" style=\"height:" + height + "px\"></td></tr>";
    }

    // The rows in the scroller's view and OVERSCAN on each side; the rest as two padding rows.
    function draw(force) {
      pending = false;
      const height = rowHeight || 24;
      const head = table.tHead.getBoundingClientRect().height;
      const view = scroller.clientHeight || 640;
      const first = Math.max(0, Math.floor((scroller.scrollTop - head) / height) - OVERSCAN);
      const last = Math.min(order.length, Math.ceil((scroller.scrollTop + view) / height) + OVERSCAN);
      const range = first + ":" + last;
      if (!force && range === drawn) return;
      drawn = range;
      const out = [];
      if (first > 0) out.push(pad(first * height));
      const classes = values[width];
      const classCodes = codes[width];
      const texts = columns.map((_, c) => html(c));
      for (let i = first; i < last; i++) {
        const row = order[i];
        out.push("<tr class=\"" + classes[classCodes[row]] + "\">");
        for (let c = 0; c < width; c++) {
          const text = texts[c][codes[c][row]];
          out.push("<td class=\"" + tdClass[c] + (columns[c][2] ? "\" title=\"" + text : "") + "\">" + text + "</td>");
        }
        out.push("</tr>");
      }
      if (last < order.length) out.push(pad((order.length - last) * height));
      body.innerHTML = out.join("");
      if (!rowHeight && last > first) {  // measured once, from a drawn row
        rowHeight = body.rows[first > 0 ? 1 : 0].getBoundingClientRect().height;
        if (rowHeight) draw(true);
      }
    }

    function shownCount() {
      count.textContent = order.length + " rows" + (order.length !== total ? " (filtered from " + total + ")" : "");
    }

    function rank(c) {
      if (!ranks[c]) {
        const keys = values[c].map((text) => key(text, columns[c][1]));
        const sorted = keys.map((_, i) => i).sort((a, b) => (keys[a] < keys[b] ? -1 : keys[a] > keys[b] ? 1 : 0));
        const into = new Float64Array(keys.length);
        for (let i = 1; i < sorted.length; i++)
          into[sorted[i]] = into[sorted[i - 1]] + (keys[sorted[i]] === keys[sorted[i - 1]] ? 0 : 1);
        ranks[c] = into;
      }
      return ranks[c];
    }

    table.tHead.querySelectorAll("th").forEach((th, c) => {
      th.addEventListener("click", () => {
        const descending = th.getAttribute("aria-sort") !== "descending";
        table.tHead.querySelectorAll("th").forEach((other) => other.removeAttribute("aria-sort"));
        th.setAttribute("aria-sort", descending ? "descending" : "ascending");
        // Stable on the order shown (reversed with it when descending): key = rank * n + position.
        const n = order.length;
        const rk = rank(c);
        const column = codes[c];
        const keyed = new Float64Array(n);
        for (let i = 0; i < n; i++) keyed[i] = rk[column[order[i]]] * n + i;
        keyed.sort();
        if (descending) keyed.reverse();
        const next = new Int32Array(n);
        for (let i = 0; i < n; i++) next[i] = order[keyed[i] % n];
        order = next;
        draw(true);
      });
    });

    filter.addEventListener("input", () => {
      const words = filter.value.toLowerCase().split(/\s+/).filter(Boolean);
      // A row holds a word when one of its texts does: each word is looked for once per distinct text.
      const found = words.map((word) => values.slice(0, width).map((texts, c) => {
        if (!lowered[c]) lowered[c] = texts.map((text) => text.toLowerCase());
        return Uint8Array.from(lowered[c], (text) => (text.includes(word) ? 1 : 0));
      }));
      const kept = [];
      for (let row = 0; row < total; row++) {
        if (found.every((byColumn) => byColumn.some((hit, c) => hit[codes[c][row]] === 1))) kept.push(row);
      }
      order = Int32Array.from(kept);
      table.tHead.querySelectorAll("th").forEach((other) => other.removeAttribute("aria-sort"));
      scroller.scrollTop = 0;
      shownCount();
      draw(true);
    });

    scroller.addEventListener("scroll", () => {
      if (!pending) {
        pending = true;
        requestAnimationFrame(() => draw(false));
      }
    });
    shownCount();
    draw(true);
  }

  document.querySelectorAll("table.rows[data-rows]").forEach(setUp);
  document.body.dataset.ready = "true";  // for a test in a browser: the script ran to its end
})();
