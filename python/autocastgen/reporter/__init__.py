"""The precision report: one self-contained HTML page from one statistics file, or what changed
between two (docs/report.md). ``autocastgen.report(...)`` here, ``autocastgen report`` on the
command line (codegen/cli/verb_report.cpp runs ``python -m autocastgen.reporter``, this package).

    with autocastgen.attach(model), autocastgen.stats("run.json", ranges=True):
        train_step()
    autocastgen.report("run.json", output="run.html")

Note [nothing half-written]: every file is read and checked, and the whole page is built in
memory, before anything is written; the page is then written whole or not at all (Note [atomic
writes] in autocastgen/_core/atomic.py). A bad input, a full disk or a read-only folder leaves no page
and an older page as it was.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .._core.atomic import write_file
from .._core.terminal import shown
from . import html, view
from .reading import _MAX_SHOWN, ReadError, _Checker, read_stats

__all__ = ["ReportError", "render", "report"]


class ReportError(ValueError):
    """A report that cannot be made: ``str()`` holds the located diagnostics (``file:line:col:
    error: ...``) and ``count`` how many errors there were."""

    def __init__(self, text: str, count: int) -> None:
        super().__init__(text)
        self.count = count


def _load(source: Any, index: int) -> tuple[str, dict[str, Any]]:
    if hasattr(source, "table") and isinstance(source.table, Mapping):  # a stats() / record() result
        source = source.table
    if isinstance(source, Mapping):
        checker = _Checker(None)
        checker.run(source)
        if checker.found:
            errors = [d for d in checker.found if d.severity == "error"]
            text = "".join(f"autocastgen: error: table {index + 1}: {shown(d.message)}\n" for d in errors[:_MAX_SHOWN])
            if len(errors) > _MAX_SHOWN:
                text += f"autocastgen: ... and {len(errors) - _MAX_SHOWN} more errors in table {index + 1}\n"
            raise ReportError(text, len(errors))
        return f"table {index + 1}", dict(source)
    try:
        return os.fspath(source), read_stats(source)
    except ReadError as error:
        raise ReportError(str(error), error.count) from None


def render(sources: Sequence[Any], *, advice: Any = None, model: Any = None, title: str | None = None) -> str:
    """The report's HTML for one source (a statistics file's path, a table, or a ``stats()``
    result) or two (what changed from the first to the second; the rest shows the second).
    ``advice``: an :class:`autocastgen.Advice` whose moved places the headroom chart marks.
    ``model``: the ``nn.Module`` the file was taken from (attached): the tree then shows every
    module with its class. Raises :class:`ReportError` for an unreadable source."""
    if not 1 <= len(sources) <= 2:
        raise ReportError(f"autocastgen: error: a report reads one or two statistics files, got {len(sources)}\n", 1)
    collecting = gc.isenabled()
    gc.disable()  # Note [no collection while rendering]
    try:
        loaded, errors, count = [], [], 0
        for index, source in enumerate(sources):  # every file checked before stopping
            try:
                loaded.append(_load(source, index))
            except ReportError as error:
                errors.append(str(error))
                count += error.count
        if errors:
            raise ReportError("".join(errors), count)
        return _render(loaded, advice, model, title)
    finally:
        if collecting:
            gc.enable()


# Note [no collection while rendering]: a large file's JSON is millions of objects, and the
# cyclic collector walks them all each time the reading or the page's many small objects (cells,
# texts) cross its thresholds: a quarter of a 100k-row report's time. Nothing made here is a
# cycle that needs it, so the collector is off while the files are read and the page is made, and
# back as it was after.
def _render(loaded: Sequence[tuple[str, dict[str, Any]]], advice: Any, model: Any, title: str | None) -> str:
    names = [name for name, _ in loaded]
    rows = loaded[-1][1]["ops"]
    places = view.places(rows, advice, keep=html.CHART_PLACES)
    events = view.events(rows)
    watched = any(r.get("outputs_checked", 0) for r in rows)
    sections, data = [], []
    if len(loaded) == 2:
        changes, same = view.diff(loaded[0][1]["ops"], rows)
        section, script = html.diff_section(changes, same, names)
        sections.append(section)
        data.append(script)
    dtypes = sorted({d for r in rows for d in r["ran_in"]}, key=lambda d: (html.dtype_class(d), d))
    op_totals = view.per_op(rows)
    sections.append(html.summary(Path(names[-1]).name, op_totals, places, events) + html.legend(dtypes))
    sections.append(html.tree(view.module_tree(rows, model), [r for r in rows if "module" not in r]))
    sections.append(html.headroom_chart(places))
    if places.moved:
        section, script = html.moved_section(places.moved)
        sections.append(section)
        data.append(script)
    sections.append(html.events_section(events, watched))
    op_columns = [view.Column("op", False), view.Column("rule", False), *view.ROW_COLUMNS]
    op_rows = [([r["op"], r.get("policy", "-") or "-", *view.row_cells(r)], html.row_class(r)) for r in op_totals]
    section, script = html.table("ops", "Per op", "One row per (op, rule), its modules summed, as <code>autocastgen "
                                 "stats</code> prints it. Click a header to sort.", op_columns, op_rows)
    sections.append(section)
    data.append(script)
    if any("module" in r for r in rows):
        module_columns = [view.Column("module", False), *op_columns]
        module_rows = [([view.module_text(r), r["op"], r.get("policy", "-") or "-", *view.row_cells(r)],
                        html.row_class(r))
                       for r in view.by_module(rows)]
        section, script = html.table("modules", "Per module", "One row per (module, op, rule), as <code>autocastgen "
                                     "stats --by module</code> prints it.", module_columns, module_rows)
        sections.append(section)
        data.append(script)
    heading = title or ("autocastgen report: " + " -> ".join(Path(n).name for n in names))
    return html.page(heading, names, sections, data)


def report(*sources: Any, output: str | os.PathLike[str] = "report.html", advice: Any = None, model: Any = None,
           title: str | None = None) -> Path:
    """Writes the report of one statistics source, or of what changed between two, to ``output``
    (one self-contained HTML file) and returns its path. Sources: paths of files the runtime
    wrote (``AUTOCASTGEN_STATS``, ``stats(path)``, ``record(path)``), tables, or ``stats()``
    results. See :func:`render`; Note [nothing half-written]. Raises :class:`ReportError` for an
    unreadable source, an ``OSError`` (``autocastgen._core.atomic.WriteError``: the file and the reason)
    when the page cannot be written."""
    text = render(sources, advice=advice, model=model, title=title)
    return write_file(output, text)
