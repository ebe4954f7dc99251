"""The report's page: one self-contained HTML file (styles, script and charts inline, no network at
view time) from the view's data (view.py). Returns text; writes nothing."""

from __future__ import annotations

import html
import itertools
import json
import math
import operator
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from . import view

_ASSETS = Path(__file__).resolve().parent
_FIRST_PAGE = 500   # table rows in the HTML itself; the rest come from the embedded rows (report.js)
CHART_PLACES = 40  # places in the headroom chart; every place's figures are in the tables
_DTYPE_CLASSES = ("float32", "bfloat16", "float16", "float64")


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def dtype_class(dtype: str) -> str:
    if dtype in _DTYPE_CLASSES:
        return f"d-{dtype}"
    return "d-float8" if view.is_fp8(dtype) else "d-other"


def fill(template: str, values: Mapping[str, str], name: str = "report.html") -> str:
    """``template`` with each ``{{key}}`` replaced; a key missing from ``values`` or a value the
    template does not use is an error naming the template and line (style.md, habit 8)."""
    used = set()

    def replace(match: re.Match[str]) -> str:
        key = match.group(1)
        if key not in values:
            line = template.count("\n", 0, match.start()) + 1
            raise KeyError(f"{name}:{line}: the template's variable '{key}' has no value")
        used.add(key)
        return values[key]

    out = re.sub(r"\{\{(\w+)\}\}", replace, template)
    unused = sorted(set(values) - used)
    if unused:
        raise KeyError(f"{name}: values the template does not use: {', '.join(unused)}")
    return out


def _bar(ran_in: Mapping[str, int]) -> str:
    calls = sum(ran_in.values())
    if not calls:
        return '<span class="bar"></span>'
    parts = "".join(f'<i class="{dtype_class(d)}" style="width:{100.0 * n / calls:.2f}%" title="{_e(d)} {n}"></i>'
                    for d, n in sorted(ran_in.items(), key=lambda item: -item[1]))
    return f'<span class="bar">{parts}</span>'


def legend(dtypes: Sequence[str]) -> str:
    return '<p class="legend">' + "".join(
        f'<span><i class="{dtype_class(d)}"></i>{_e(d)}</span>' for d in dtypes) + "</p>"


# --- summary ------------------------------------------------------------------------------------------

def summary(name: str, rows: Sequence[Mapping[str, Any]], places: view.Headroom,
            events: Sequence[view.Event]) -> str:
    t = view.total(rows)
    over = places.over
    moved = places.moved
    cards = [("calls", str(t["calls"]), "", _bar(t["ran_in"]) + " " + _e(view.ran_in_text(t["ran_in"]))),
             ("casts", str(t["casts"]), "", f"{t['cast_bytes']} bytes"),
             ("cast cache hit/miss/evict", view.cache_text(t), "", ""),
             ("ops with non-finite outputs", str(len(events)), "bad" if events else "",
              f"{t.get('nonfinite', 0)} outputs"),
             ("places over float16's range", str(over), "bad" if over else "",
              f"{len(moved)} moved to float32 by the advisor" if moved else "max |out| above 65504")]
    return f'<section id="summary"><h2>Overview: <code>{_e(name)}</code></h2><div class="cards">' + "".join(
        f'<div class="card {cls}"><span>{_e(name)}</span><b>{_e(value)}</b><span>{detail}</span></div>'
        for name, value, cls, detail in cards) + "</div></section>"


# --- the module tree ------------------------------------------------------------------------------------

_TREE_NODES = 2000  # modules drawn; a larger model's tree stops at the depth that keeps under it
_TREE_LEAVES = 400  # up to this many modules, each module's own ops are listed under it


def _node(node: view.Node, depth: int, open_depth: int, max_depth: int, leaves: bool) -> str:
    label = f'<span class="name">{_e(node.name)}</span>'
    if node.kind:
        label += f'<span class="kind">({_e(node.kind)})</span>'
    calls = sum(node.ran_in.values())
    label += " " + _bar(node.ran_in)
    label += (f'<span class="ops">{calls} calls' + (f": {_e(view.ran_in_text(node.ran_in))}" if calls else "")
              + "</span>")
    if node.nonfinite:
        label += f'<span class="badge bad">{node.nonfinite} non-finite</span>'
    if node.worst_headroom is not None and node.worst_headroom < 0:
        label += f'<span class="badge warn">over float16 ({node.worst_headroom:+.1f} bits)</span>'
    own = "".join(f'<li class="leaf">{_bar(r["ran_in"])} <code>{_e(r["op"])}</code> '
                  f'<span class="ops">{_e(r.get("policy", ""))}, {_e(view.ran_in_text(r["ran_in"]))}</span></li>'
                  for r in view.sort_rows(node.rows)) if leaves else ""
    children = "" if depth >= max_depth else "".join(
        _node(child, depth + 1, open_depth, max_depth, leaves) for _, child in sorted(node.children.items()))
    if not own and not children:
        return f'<li class="leaf" data-path="{_e(node.path)}">{label}</li>'
    opened = " open" if depth < open_depth else ""
    return (f'<li data-path="{_e(node.path)}"><details{opened}><summary>{label}</summary>'
            f"<ul>{children}{own}</ul></details></li>")


def tree(root: view.Node | None, outside: Sequence[Mapping[str, Any]]) -> str:
    if root is None:
        return ('<section id="tree"><h2>Modules</h2><p class="note">No module paths in this file: take it with the '
                "model attached (<code>autocastgen.attach(model)</code>) to see where in the model each op ran."
                "</p></section>")
    count = _count(root)
    open_depth = 3 if count <= _TREE_LEAVES else 1
    per_depth: dict[int, int] = {}
    _depths(root, 0, per_depth)
    max_depth, drawn = 0, 0
    while max_depth in per_depth and drawn + per_depth[max_depth] <= _TREE_NODES:
        drawn += per_depth[max_depth]
        max_depth += 1
    note = ""
    if drawn < count:
        note += (f'<p class="note">{drawn} of the {count} modules drawn (down to depth {max_depth - 1}); every '
                 "module's rows are in the per-module table.</p>")
    if root.left_out:
        note += (f'<p class="note">{root.left_out} rows ran in modules nested deeper than {view.TREE_DEPTH} levels or '
                 f"named by more than {view.TREE_PATH} characters: they are in the per-module table, not in the "
                 "tree.</p>")
    if outside:
        calls = sum(r["calls"] for r in outside)
        note += f'<p class="note">{calls} calls ran outside every attached module (not in the tree).</p>'
    return (f'<section id="tree"><h2>Modules</h2><p class="note">{count} modules, coloured by the dtypes their ops '
            f"ran in (the modules inside each included).</p>{note}"
            f'<ul class="tree">{_node(root, 0, open_depth, max_depth - 1, count <= _TREE_LEAVES)}</ul></section>')


def _depths(node: view.Node, depth: int, into: dict[int, int]) -> None:
    into[depth] = into.get(depth, 0) + 1
    for child in node.children.values():
        _depths(child, depth + 1, into)


def _count(node: view.Node) -> int:
    return 1 + sum(_count(child) for child in node.children.values())


# --- tables ---------------------------------------------------------------------------------------------

def table(name: str, title: str, note: str, columns: Sequence[view.Column],
          rows: Sequence[tuple[list[str], str]]) -> tuple[str, str]:
    """A sortable table: ``rows`` as (cells, class). Returns the section (the first page of rows
    in the HTML) and the script element holding every row, compactly (Note [compact rows])."""
    head = "".join(f'<th class="{"num" if c.numeric else ""}" title="{_e(c.title)}">{_e(c.name)}</th>' for c in columns)
    # The same cells as report.js writes (its draw()), so that sorting changes nothing else.
    classes = [" ".join(k for k, on in (("num", c.numeric), ("dt", c.name == "ran in"), ("wide", c.wide)) if on)
               for c in columns]
    body = []
    for cells, cls in rows[:_FIRST_PAGE]:
        tds = "".join(f'<td class="{k}" title="{_e(v)}">{_e(v)}</td>' if c.wide else f'<td class="{k}">{_e(v)}</td>'
                      for c, k, v in zip(columns, classes, cells))
        body.append(f'<tr class="{cls}">{tds}</tr>')
    # "<" only occurs in the JSON's strings: as \u003c no "</script" or "<!--" can end the element early.
    script = json.dumps(compact_rows(columns, rows), separators=(",", ":")).replace("<", "\\u003c")
    first = min(len(rows), _FIRST_PAGE)
    shown = f"{first} of {len(rows)} rows" + (" (the rest with script)" if first < len(rows) else "")
    return (f'<section id="{name}"><h2>{_e(title)}</h2><p class="note">{note}</p>'
            f'<div class="tools"><input type="search" placeholder="filter: words in any column" aria-label="filter">'
            f'<span class="count">{shown}</span></div>'
            f'<div class="scroll"><table class="rows" data-rows="{name}"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table></div></section>',
            f'<script type="application/json" id="rows-{name}">{script}</script>')


# Note [compact rows]: a table's rows are embedded once, by column: each column's distinct cell
# texts ("values", in first-seen order) and, per row, the index of its text ("codes"), or the
# same as runs ("runs": index, length, index, length, ...) where that is shorter, as for a
# column sorted by module; a column of mostly distinct texts (max |out|) is its texts, one per row
# ("texts"). The row classes are one more column after the named ones. A 100k-row table is a few
# MB instead of its cells written out (most columns repeat a few texts); report.js decodes it,
# draws only the rows in view, and sorts and filters by the distinct texts.
def compact_rows(columns: Sequence[view.Column], rows: Sequence[tuple[list[str], str]]) -> dict[str, Any]:
    cells = []
    count = len(rows)
    for texts in ((*zip(*(r[0] for r in rows)), tuple(r[1] for r in rows)) if rows
                  else [() for _ in range(len(columns) + 1)]):
        values = list(dict.fromkeys(texts))  # first-seen order
        if 2 * len(values) > count:
            cells.append({"texts": list(texts)})
            continue
        if len(values) == 1:  # one text in every row
            cells.append({"values": values, "runs": [0, count]})
            continue
        codes = list(map({v: i for i, v in enumerate(values)}.__getitem__, texts))
        starts = [0, *itertools.compress(range(1, count), map(operator.ne, codes, itertools.islice(codes, 1, None)))]
        if 2 * len(starts) < count:
            runs = [x for start, end in zip(starts, [*starts[1:], count]) for x in (codes[start], end - start)]
            cells.append({"values": values, "runs": runs})
        else:
            cells.append({"values": values, "codes": codes})
    return {"columns": [[c.name, c.numeric, c.wide] for c in columns], "count": count, "cells": cells}


def decode_rows(data: Mapping[str, Any]) -> list[list[str]]:
    """The rows of compact_rows()'s table, as (cells..., class) lists: what report.js decodes (tests)."""
    columns = []
    for cell in data["cells"]:
        if "texts" in cell:
            columns.append(cell["texts"])
            continue
        if "codes" in cell:
            codes = cell["codes"]
        else:
            codes = [code for i in range(0, len(cell["runs"]), 2) for code in [cell["runs"][i]] * cell["runs"][i + 1]]
        columns.append([cell["values"][c] for c in codes])
    return [list(row) for row in zip(*columns)] if data["count"] else []


def row_class(row: Mapping[str, Any]) -> str:
    return dtype_class(view.dominant(row["ran_in"])) + (" bad" if row.get("nonfinite", 0) else "")


# --- float16 headroom -----------------------------------------------------------------------------------

def headroom_chart(places: view.Headroom) -> str:
    """Inline SVG: each place's largest |output| against float16's 65504, on a log2 axis (headroom
    in bits: left of the dashed line is over the range). The places least inside come first."""
    shown = places.least[:CHART_PLACES]
    if not shown:
        return ('<section id="headroom"><h2>float16 headroom</h2><p class="note">No output was measured: turn the '
                "range record on (<code>autocastgen.stats(ranges=True)</code>, <code>autocastgen.record()</code>) or "
                "the non-finite watch to see how far each place is from float16's largest value.</p></section>")
    bits = [p.bits for p in shown if math.isfinite(p.bits)]
    low = math.floor(min([-2.0, *bits]))
    high = math.ceil(max([8.0, *bits]))
    label_w, chart_w, row_h, top = 360, 560, 18, 40
    scale = chart_w / (high - low)

    def x(b: float) -> float:
        return label_w + (min(max(b, low), high) - low) * scale

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" role="img" width="{label_w + chart_w + 190}" '
             f'height="{top + row_h * len(shown) + 24}" aria-label="float16 headroom per place">']
    for tick in range(int(low), int(high) + 1, max(1, (high - low) // 10)):
        parts.append(f'<line class="axis" x1="{x(tick):.1f}" y1="{top - 6}" x2="{x(tick):.1f}" y2="{top - 2}"/>'
                     f'<text x="{x(tick):.1f}" y="{top - 10}" text-anchor="middle">{tick:+d}</text>')
    parts.append(f'<text x="{label_w}" y="12">headroom in bits: log2(65504 / max |out|)</text>')
    for i, p in enumerate(shown):
        y = top + i * row_h
        where = f"{p.module or '<root>'} · " if p.module is not None else ""
        label = f"{where}{p.op}"
        colour = "var(--bad)" if p.bits < 0 else "var(--f16)" if p.bits < view.ADVISOR_MARGIN_BITS else "var(--bf16)"
        start, end = sorted((x(0), x(p.bits)))
        tip = (f"{label} ({p.policy}): max |out| {view.magnitude(p.max_abs)}, headroom {p.bits:+.1f} bits, "
               f"{p.over} of elements over 65504" + (f"; advisor: {p.moved}" if p.moved else ""))
        parts.append(f'<g class="place"><title>{_e(tip)}</title>'
                     f'<text x="{label_w - 8}" y="{y + 12}" text-anchor="end">{_e(label[-56:])}</text>'
                     f'<rect x="{start:.1f}" y="{y + 3}" width="{max(end - start, 1):.1f}" height="{row_h - 6}" '
                     f'style="fill:{colour}"/>'
                     f'<text x="{label_w + chart_w + 6}" y="{y + 12}">{_e(view.magnitude(p.max_abs))} '
                     f'({p.bits:+.1f}){" moved" if p.moved else ""}</text></g>')
    parts.append(f'<line class="limit" x1="{x(0):.1f}" y1="{top - 2}" x2="{x(0):.1f}" y2="{top + row_h * len(shown)}"/>'
                 f'<text x="{x(0) + 4:.1f}" y="{top + row_h * len(shown) + 14}">65504</text></svg>')
    rest = places.count - len(shown)
    return ('<section id="headroom"><h2>float16 headroom</h2><p class="note">Each place\'s largest finite |output| '
            "against float16's largest value, 65504: bars left of the dashed line are over it (an op there "
            "overflows in float16), orange ones within 1 bit of it. Hover a bar for the figures."
            + (f" The {rest} places with more headroom are in the tables." if rest > 0 else "")
            + (" The places the advisor moves to float32 are in the table below, with why." if places.moved else "")
            + "</p>" + "".join(parts) + "</section>")


MOVED_COLUMNS = (view.Column("module", False), view.Column("op", False), view.Column("rule", False),
                 view.Column("max |out|", True), view.Column("f16 headroom", True, "log2(65504 / max |out|) in bits"),
                 view.Column("why", False, "the advisor's reason: by ranges (this file's), or the Advice's", True))


def moved_section(moved: Sequence[view.Place]) -> tuple[str, str]:
    """The places the advisor moves to float32, least headroom first, with why: a table like the
    per-op one (a 100k-row record can move thousands)."""
    rows = [([p.module or "<root>", p.op, p.policy or "-", view.magnitude(p.max_abs), f"{p.bits:+.1f}", p.moved],
             "bad" if p.bits < 0 else "") for p in moved]
    return table("moved", "Moved to float32 by the advisor", f"{len(moved)} places: the range proposal of "
                 "<code>autocastgen advise --dtype float16</code> for this record, or the places of the given "
                 "<code>Advice</code>.", MOVED_COLUMNS, rows)


# --- non-finite events ----------------------------------------------------------------------------------

def events_section(events: Sequence[view.Event], watched: bool) -> str:
    if not events:
        text = ("No op returned NaN or Inf." if watched else
                "The outputs were not checked: run with the non-finite watch (<code>AUTOCASTGEN_FINITE=record</code>, "
                "<code>autocastgen.watch()</code>) or the range record to see NaN and Inf with their op, module and "
                "line.")
        return f'<section id="nonfinite"><h2>Non-finite outputs</h2><p class="note">{text}</p></section>'
    rows = "".join(
        f"<tr><td><code>{_e(e.op)}</code></td><td>{_e(e.module if e.module is not None else '-') or '<root>'}</td>"
        f"<td>{_e(e.policy)}</td><td class=\"num\">{e.count}</td><td><code>{_e(e.line or '-')}</code></td>"
        f"<td>{_e(e.message or '(no event kept: the watch was off)')}</td></tr>" for e in events)
    return ('<section id="nonfinite"><h2>Non-finite outputs</h2><p class="note">Ops whose outputs held NaN or Inf, '
            "with the first event's line in your code (the first op listed in time order is usually the one that "
            "went first: compare the lines).</p><div class=\"scroll\"><table class=\"rows\" id=\"events\">"
            "<thead><tr><th>op</th><th>module</th><th>rule</th><th class=\"num\">outputs</th><th>first at</th>"
            "<th>first event</th></tr></thead>"
            f"<tbody>{rows}</tbody></table></div></section>")


# --- two files ------------------------------------------------------------------------------------------

def diff_section(changes: Sequence[tuple[str, str, str, list[str], list[str]]], same: int,
                 names: Sequence[str]) -> tuple[str, str]:
    columns = [view.Column("change", False), view.Column("module", False), view.Column("op", False)]
    for field in view.DIFF_FIELDS:
        columns.append(view.Column(field, field not in view.DIFF_TEXT, f"{names[0]} -> {names[1]}",
                                   field == "fp8 skipped because"))
    rows = []
    for status, module, op, a, b in changes:
        cells = [status, module, op] + [x if x == y else f"{x} -> {y}" for x, y in zip(a, b)]
        rows.append((cells, status))
    note = (f"{_e(names[0])} -> {_e(names[1])}: {len(changes)} places (module, op) changed, {same} unchanged. "
            "A place that ran under another rule in the second file is one changed row.")
    return table("diff", "What changed", note, columns, rows)


def page(title: str, files: Sequence[str], sections: Sequence[str], data: Sequence[str]) -> str:
    template = (_ASSETS / "report.html").read_text(encoding="utf-8")
    return fill(template, {
        "title": _e(title),
        "files": " &rarr; ".join(f"<code>{_e(f)}</code>" for f in files),
        "style": (_ASSETS / "report.css").read_text(encoding="utf-8"),
        "script": (_ASSETS / "report.js").read_text(encoding="utf-8"),
        "body": "\n".join(sections),
        "data": "\n".join(data),
    })
