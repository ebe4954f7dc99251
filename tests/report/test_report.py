"""autocastgen report (docs/report.md) without a browser: the numbers on the page against the
statistics file's, the module tree, the float16 headroom chart and the advisor's places, the
non-finite events, two files, and bad input (located errors, nothing written, an older page kept).

ctest sets AUTOCASTGEN_BUILD_DIR and AUTOCASTGEN_CLI; by hand:
  AUTOCASTGEN_BUILD_DIR=build-h40 AUTOCASTGEN_CLI=build-h40/bin/autocastgen python3 -m pytest tests/report/test_report.py
"""

from __future__ import annotations

import json
import math
import os
import random
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("AUTOCASTGEN_BUILD_DIR", REPO / "build")).resolve()
CLI = os.environ.get("AUTOCASTGEN_CLI", str(BUILD / "bin" / "autocastgen"))
INPUTS = REPO / "tests" / "errors" / "stats" / "inputs"

sys.path.insert(0, str(REPO / "tests" / "python"))  # built_tree, requires
from built_tree import require_built  # noqa: E402

require_built(BUILD, "python/autocastgen/reporter/__init__.py", CLI)  # an error under ctest where missing


class Tables(HTMLParser):
    """Every <table> of a page as rows of cell texts (the header first), by the table's data-rows."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.scripts: dict[str, str] = {}
        self._table: str | None = None
        self._cell: list[str] | None = None
        self._script: str | None = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):  # noqa: ANN001
        attrs = dict(attrs)
        if tag == "table":
            self._table = attrs.get("data-rows") or attrs.get("id") or f"table{len(self.tables)}"
            self.tables[self._table] = []
        elif tag == "tr" and self._table:
            self.tables[self._table].append([])
        elif tag in ("td", "th") and self._table:
            self._cell = []
        elif tag == "script" and attrs.get("type") == "application/json":
            self._script = attrs["id"]
            self.scripts[self._script] = ""

    def handle_endtag(self, tag):  # noqa: ANN001
        if tag in ("td", "th") and self._cell is not None:
            self.tables[self._table][-1].append("".join(self._cell))
            self._cell = None
        elif tag == "table":
            self._table = None
        elif tag == "script":
            self._script = None

    def handle_data(self, data):  # noqa: ANN001
        if self._cell is not None:
            self._cell.append(data)
        if self._script is not None:
            self.scripts[self._script] += data


def page(*sources, **kwargs) -> str:
    import autocastgen.reporter as reporter

    return reporter.render(list(sources), **kwargs)


def rows_of(text: str, name: str) -> list[dict[str, str]]:
    table = Tables(text).tables[name]
    return [dict(zip(table[0], row)) for row in table[1:]]


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([CLI, "report", *args], capture_output=True, text=True, timeout=120)


def stats_file(tmp_path: Path, rows: list[dict], name: str = "s.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps({"version": 1, "ops": rows}))
    return path


def row(op: str, module: str | None = None, policy: str = "lower_precision_fp", calls: int = 1,
        ran_in: dict | None = None, **fields) -> dict:
    out = {"op": op, "policy": policy, "calls": calls, "ran_in": ran_in or {"float32": calls}, "casts": 0,
           "cast_bytes": 0, "cache_hits": 0}
    if module is not None:
        out["module"] = module
    out.update(fields)
    return out


def ranges(max_abs: float, elements: int = 100, over: int = 0) -> dict:
    return {"calls": 1, "input_max_abs": 1.0, "input_min_abs": 0.5, "output_max_abs": max_abs, "output_min_abs": 0.1,
            "output_elements": elements, "float16_overflow": over, "float16_underflow": 0, "bfloat16_overflow": 0,
            "bfloat16_underflow": 0}


# --- the numbers on the page --------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["bf16", "fp32_record", "fp16_watch", "compiled"])
def test_per_op_numbers_are_the_files(name):
    path = INPUTS / f"{name}.stats.json"
    table = json.loads(path.read_text())
    shown = {(r["op"], r["rule"]): r for r in rows_of(page(str(path)), "ops")}
    assert len(shown) == len(table["ops"])
    for entry in table["ops"]:
        r = shown[(entry["op"], entry["policy"])]
        assert int(r["calls"]) == entry["calls"]
        assert int(r["casts"]) == entry["casts"]
        assert int(r["cast bytes"]) == entry["cast_bytes"]
        assert {d: int(n) for d, n in (part.rsplit(" ", 1) for part in r["ran in"].split(", "))} == entry["ran_in"]
        if not entry.get("compiled_calls"):
            assert r["cache hit/miss/evict"] == (f"{entry['cache_hits']}/{entry.get('cache_misses', 0)}/"
                                                 f"{entry.get('cache_evictions', 0)}")
        big = entry.get("output_max_abs")
        assert r["max |out|"] == ("-" if big is None else f"{big:.6g}")
        assert r["f16 headroom"] == ("-" if big is None else f"{math.log2(65504 / big):+.1f}")
        if "ranges" in entry:
            over, elements = entry["ranges"]["float16_overflow"], entry["ranges"]["output_elements"]
            assert r["f16 over"] == ("0" if not over else f"{100 * over / elements:.3g}%")


def test_page_agrees_with_the_stats_verb(tmp_path):
    # The same figures as `autocastgen stats --json` (codegen/cli/verb_stats.cpp) prints.
    path = INPUTS / "fp32_record.stats.json"
    out = json.loads(subprocess.run([CLI, "stats", str(path), "--json"], capture_output=True, text=True,
                                    check=True).stdout)
    shown = {r["op"]: r for r in rows_of(page(str(path)), "ops")}
    for op in out["ops"]:
        assert shown[op["op"]]["f16 headroom"] == f"{op['float16_headroom_bits']:+.1f}"
        assert int(shown[op["op"]]["calls"]) == op["calls"]


def table_data(text: str, name: str) -> tuple[list[str], list[list[str]]]:
    """A table's column names and every row (cells, then the row's class), decoded from the page's
    compact rows (Note [compact rows] in html.py) as report.js decodes them."""
    from autocastgen.reporter import html

    data = json.loads(Tables(text).scripts[f"rows-{name}"])
    return [c[0] for c in data["columns"]], html.decode_rows(data)


def test_every_row_is_in_the_data_and_the_first_page_in_the_html(tmp_path):
    rows = [row(f"aten::op{i}", module=f"layers.{i % 7}", calls=i + 1) for i in range(1200)]
    text = page(str(stats_file(tmp_path, rows)))
    parsed = Tables(text)
    columns, data = table_data(text, "modules")
    assert len(data) == 1200
    assert len(parsed.tables["modules"]) == 1 + 500      # header and the first page
    assert parsed.tables["modules"][0] == columns
    assert [r[:len(columns)] for r in data[:500]] == parsed.tables["modules"][1:]
    assert "500 of 1200 rows (the rest with script)" in text
    # Sorted by module, the module column is embedded as runs; the calls (each row's differs) as texts.
    compact = json.loads(parsed.scripts["rows-modules"])
    assert "runs" in compact["cells"][0] and "texts" in compact["cells"][columns.index("calls")]


def test_every_rows_numbers_are_the_files(tmp_path):
    # All 3000 rows of the per-module table, decoded from the page, against the file's entries.
    rng = random.Random(40)
    rows = []
    for i in range(3000):
        big = 10 ** rng.uniform(-3, 5.2)
        calls = rng.randint(1, 9)
        rows.append(row(("aten::linear", "aten::mm", "aten::softmax")[i % 3], module=f"blocks.{i // 30}.{i % 10}",
                        policy=("lower_precision_fp", "fp32")[i // 3 % 2], calls=calls,
                        ran_in={"bfloat16": calls - 1, "float32": 1} if calls > 1 else {"float32": 1},
                        casts=i % 4, cast_bytes=(i % 4) * 512, outputs_checked=calls, nonfinite=0, output_max_abs=big,
                        ranges=ranges(big, elements=4096, over=40 if big > 65504 else 0)))
    text = page(str(stats_file(tmp_path, rows)))
    columns, data = table_data(text, "modules")
    assert len(data) == len(rows)
    kinds = {c: next(iter(set(cell) - {"values"})) for c, cell in zip(columns, json.loads(Tables(text).scripts["rows-modules"])["cells"])}
    assert kinds["calls"] == "codes" and kinds["max |out|"] == "texts" and kinds["module"] == "runs"  # all three decoded
    shown = {(r[0], r[1], r[2]): dict(zip(columns, r)) for r in data}
    for entry in rows:
        r = shown[(entry["module"], entry["op"], entry["policy"])]
        assert int(r["calls"]) == entry["calls"] and int(r["casts"]) == entry["casts"]
        assert int(r["cast bytes"]) == entry["cast_bytes"]
        assert {d: int(n) for d, n in (part.rsplit(" ", 1) for part in r["ran in"].split(", "))} == entry["ran_in"]
        assert r["max |out|"] == f"{entry['output_max_abs']:.6g}"
        assert r["f16 headroom"] == f"{math.log2(65504 / entry['output_max_abs']):+.1f}"
        assert r["f16 over"] == ("0" if entry["output_max_abs"] <= 65504 else f"{100 * 40 / 4096:.3g}%")
    # The per-op table sums each (op, rule)'s modules.
    columns, data = table_data(text, "ops")
    for r in (dict(zip(columns, cells)) for cells in data):
        mine = [e for e in rows if (e["op"], e["policy"]) == (r["op"], r["rule"])]
        assert int(r["calls"]) == sum(e["calls"] for e in mine)
        assert r["max |out|"] == f"{max(e['output_max_abs'] for e in mine):.6g}"


def test_self_contained():
    text = page(str(INPUTS / "fp32_record.stats.json"))
    assert "<svg" in text and "<script>" in text and "<style>" in text
    assert "<link" not in text and "<img" not in text and "@import" not in text
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text)
    assert re.findall(r"https?://[^\s\"'<>]+", text) == ["http://www.w3.org/2000/svg"]  # the SVG namespace


# --- the tree, the chart, the advisor, the events -----------------------------------------------------

def test_module_tree_by_dtype(tmp_path):
    rows = [row("aten::linear", "encoder.0", ran_in={"bfloat16": 3}, calls=3),
            row("aten::linear", "encoder.1", ran_in={"float32": 2}, calls=2, policy="fp32"),
            row("aten::softmax", "head", policy="fp32", calls=1),
            row("aten::mm", None, calls=4)]
    text = page(str(stats_file(tmp_path, rows)))
    tree = text.split('<section id="tree">', 1)[1].split("</section>", 1)[0]
    paths = re.findall(r'data-path="([^"]*)"', tree)
    assert paths == ["", "encoder", "encoder.0", "encoder.1", "head"]
    encoder = tree.split('data-path="encoder"', 1)[1]
    assert "5 calls: bfloat16 3, float32 2" in encoder  # the modules inside it summed
    assert 'class="d-bfloat16" style="width:60.00%"' in encoder
    assert "4 calls ran outside every attached module" in tree


def test_tree_shows_the_models_modules_with_their_classes(tmp_path):
    import torch  # the reporter itself imports without it
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Linear(2, 2)))
    text = page(str(stats_file(tmp_path, [row("aten::linear", "1.1")])), model=model)
    tree = text.split('<section id="tree">', 1)[1].split("</section>", 1)[0]
    assert re.findall(r'data-path="([^"]*)"', tree) == ["", "0", "1", "1.0", "1.1"]
    assert '<span class="kind">(ReLU)</span>' in tree and '<span class="kind">(Sequential)</span>' in tree


def test_headroom_chart_and_the_advisors_places(tmp_path):
    rows = [row("aten::linear", "2", output_max_abs=83951.9, outputs_checked=1, nonfinite=0,
                ranges=ranges(83951.9, elements=2048, over=10)),
            row("aten::linear", "0", output_max_abs=8.5, outputs_checked=1, nonfinite=0, ranges=ranges(8.5)),
            row("aten::linear", "4", output_max_abs=40000.0, outputs_checked=1, nonfinite=0, ranges=ranges(40000.0))]
    text = page(str(stats_file(tmp_path, rows)))
    chart = text.split('<section id="headroom">', 1)[1].split("</section>", 1)[0]
    labels = re.findall(r'text-anchor="end">([^<]*)</text>', chart)
    assert labels == ["2 · aten::linear", "4 · aten::linear", "0 · aten::linear"]  # least headroom first
    assert "83951.9 (-0.4) moved" in chart and "40000 (+0.7) moved" in chart and "8.5 (+12.9)</text>" in chart
    # The range proposal of `autocastgen advise --dtype float16` (advisor.measure, margin 1 bit).
    moved = rows_of(text, "moved")
    assert [(m["module"], m["op"], m["f16 headroom"]) for m in moved] == [("2", "aten::linear", "-0.4"),
                                                                           ("4", "aten::linear", "+0.7")]
    assert moved[0]["why"] == "by ranges: max |out| 83951.9, float16 headroom -0.4 bits, 0.488% of elements out of range"
    assert moved[1]["why"] == "by ranges: max |out| 40000, float16 headroom +0.7 bits"
    assert moved[1]["max |out|"] == "40000"


def test_the_advisors_candidates_are_every_place_it_moves():
    # Note [the advisor's candidates] in view.py: measuring only the candidate rows moves the same
    # places as measuring every row.
    from autocastgen.advisor import measure
    from autocastgen.reporter import view

    rng = random.Random(40)
    rows = []
    for i in range(3000):
        big = 65504 / 2 ** rng.uniform(-1, 3) if i % 3 else 10 ** rng.uniform(-3, 5)
        r = ranges(big, elements=1000, over=1 if big > 65504 else 0)
        r["input_max_abs"] = 65504 / 2 ** rng.uniform(0, 3) if i % 5 == 0 else 1.0
        r["float16_underflow"] = rng.choice([0, 0, 5, 20])
        rows.append(row(("aten::linear", "aten::mm")[i % 2], f"m.{i // 2}", ranges=r, output_max_abs=big))
    every = {(m.place.module, m.place.op): m.range_reason for m in measure(rows, "float16", 1.0) if m.range_reason}
    moved = view.places(rows).moved
    assert len(every) > 500 and {(p.module, p.op): p.moved for p in moved} == {k: f"by ranges: {v}" for k, v in every.items()}
    assert [p.bits for p in moved] == sorted(p.bits for p in moved)


def test_advice_marks_its_places(tmp_path):
    from autocastgen.advisor import Advice, Moved

    advice = Advice(base="cpu.yaml", dtype="float16", moved=(Moved("0", "aten::linear", "needed to pass validation",
                                                                   "validation"),))
    rows = [row("aten::linear", "0", ran_in={"float16": 1}, output_max_abs=8.5, outputs_checked=1)]
    text = page(str(stats_file(tmp_path, rows)), advice=advice)
    assert "8.5 (+12.9) moved" in text.split('<section id="headroom">', 1)[1]
    assert [(m["module"], m["why"]) for m in rows_of(text, "moved")] == [("0", "by validation: needed to pass validation")]


def test_nonfinite_events_with_module_and_line(tmp_path):
    message = ("autocastgen: non-finite output: aten::linear (rule lower_precision_fp, ran in float16) returned inf "
               "in output 0 (float16 [32, 64]); in module 'layers.0'; called from train.py:41")
    rows = [row("aten::linear", "layers.0", ran_in={"float16": 2}, calls=2, outputs_checked=2, nonfinite=2,
                first_nonfinite={"message": message, "line": "train.py:41"}),
            row("aten::cross_entropy_loss", None, policy="fp32", outputs_checked=1, nonfinite=1)]
    events = rows_of(page(str(stats_file(tmp_path, rows))), "events")
    assert events[0] == {"op": "aten::linear", "module": "layers.0", "rule": "lower_precision_fp", "outputs": "2",
                         "first at": "train.py:41", "first event": message}
    assert events[1]["module"] == "-" and events[1]["first event"] == "(no event kept: the watch was off)"


def test_two_files_what_changed():
    text = page(str(INPUTS / "bf16.stats.json"), str(INPUTS / "linear_fp32.stats.json"))
    diff = {r["op"]: r for r in rows_of(text, "diff")}
    assert diff["aten::linear"]["policy"] == "lower_precision_fp -> fp32"
    assert diff["aten::linear"]["ran in"] == "bfloat16 6 -> float32 6"
    assert diff["aten::linear"]["casts"] == "7 -> 0"
    assert diff["aten::cross_entropy_loss"]["cast bytes"] == "1536 -> 0"
    assert "2 places (module, op) changed, 0 unchanged" in text


# --- fp8 decisions ---------------------------------------------------------------------------------------

AUTO = "auto: M, K or N below 4096 (fp8 does not pay on CUDA there)"
MEASURED = "measured: the lower precision was faster"


def fp8_rows(second_all_fp8: bool = False) -> list[dict]:
    """A hand-written record of fp8 decisions (docs/fp8.md, Statistics): the skipped calls ran in
    bfloat16, each counted under its reason."""
    first = row("aten::linear", "layers.0", policy="fp8", calls=10, ran_in={"float8_e4m3fn": 6, "bfloat16": 4},
                fp8_skipped={AUTO: 3, "place layers.0": 1})
    if second_all_fp8:
        second = row("aten::linear", "layers.1", policy="fp8", calls=5, ran_in={"float8_e4m3fn": 5})
    else:
        second = row("aten::linear", "layers.1", policy="fp8", calls=5, ran_in={"float8_e4m3fn": 3, "bfloat16": 2},
                     fp8_skipped={MEASURED: 2})
    return [first, second, row("aten::softmax", "layers.0", policy="fp32", calls=2)]


def test_fp8_calls_and_why_they_were_skipped(tmp_path):
    path = stats_file(tmp_path, fp8_rows())
    from autocastgen.reporter.reading import read_stats

    assert read_stats(path)["ops"][0]["fp8_skipped"] == {AUTO: 3, "place layers.0": 1}  # the key is read
    text = page(str(path))
    ops = {r["op"]: r for r in rows_of(text, "ops")}
    assert ops["aten::linear"]["fp8 / skipped"] == "9 / 6"
    assert ops["aten::linear"]["fp8 skipped because"] == f"{AUTO}: 3; {MEASURED}: 2; place layers.0: 1"
    assert ops["aten::softmax"]["fp8 / skipped"] == "-" and ops["aten::softmax"]["fp8 skipped because"] == "-"
    modules = {(r["module"], r["op"]): r for r in rows_of(text, "modules")}
    assert modules[("layers.0", "aten::linear")]["fp8 / skipped"] == "6 / 4"
    assert modules[("layers.0", "aten::linear")]["fp8 skipped because"] == f"{AUTO}: 3; place layers.0: 1"
    assert modules[("layers.1", "aten::linear")]["fp8 skipped because"] == f"{MEASURED}: 2"
    # The embedded rows (what report.js draws) hold the same texts.
    columns, data = table_data(text, "modules")
    assert [dict(zip(columns, r)) for r in data[:3]] == rows_of(text, "modules")


def test_fp8_decisions_in_what_changed(tmp_path):
    a = stats_file(tmp_path, fp8_rows(), "a.json")
    b = stats_file(tmp_path, fp8_rows(second_all_fp8=True), "b.json")
    diff = {(r["module"], r["op"]): r for r in rows_of(page(str(a), str(b)), "diff")}
    assert list(diff) == [("layers.1", "aten::linear")]
    assert diff[("layers.1", "aten::linear")]["fp8 / skipped"] == "3 / 2 -> 5 / 0"
    assert diff[("layers.1", "aten::linear")]["fp8 skipped because"] == f"{MEASURED}: 2 -> -"
    assert diff[("layers.1", "aten::linear")]["ran in"] == "float8_e4m3fn 3, bfloat16 2 -> float8_e4m3fn 5"


@pytest.mark.parametrize("skipped, at, wanted", [
    ('{"auto": -1}', "-1", "error: 'fp8_skipped' of 'auto' must be a non-negative integer, found '-1'"),
    ('[1]', "[1]", "error: 'fp8_skipped' must be an object of reason to calls, found an array"),
], ids=["count", "shape"])
def test_bad_fp8_skipped_is_located(skipped, at, wanted, tmp_path):
    entry = json.dumps(row("aten::linear", "layers.0", policy="fp8", calls=1, ran_in={"bfloat16": 1}))
    line = '{"version": 1, "ops": [' + entry[:-1] + ', "fp8_skipped": ' + skipped + "}]}"
    path = tmp_path / "bad.json"
    path.write_text(line + "\n")
    text = refused(str(path), out=tmp_path / "r.html")
    assert text.startswith(f"{path}:1:{line.rindex(at) + 1}: {wanted}\n"), text
    if Path(CLI).is_file():  # the stats verb checks the key the same way
        assert subprocess.run([CLI, "stats", str(path)], capture_output=True, text=True).stderr == text


# --- bad input ------------------------------------------------------------------------------------------

def noise(tmp_path: Path) -> Path:
    path = tmp_path / "noise.json"
    path.write_bytes(random.Random(40).randbytes(3 * 1024 * 1024))
    return path


def truncated(tmp_path: Path) -> Path:
    path = tmp_path / "cut.json"
    path.write_text((INPUTS / "bf16.stats.json").read_text()[:300])
    return path


def other_version(tmp_path: Path) -> Path:
    path = tmp_path / "v2.json"
    path.write_text('{"version": 2, "ops": []}\n')
    return path


BAD = [  # (the file, the first line of stderr after its name)
    (other_version, ":1:13: error: unsupported statistics file version '2' (this autocastgen reads version 1)"),
    (truncated, ":2:276: error: invalid JSON: the file ends before its JSON does (a file cut short?)"),
    (noise, ":1:1: error: byte 0x"),
    (lambda tmp: REPO / "tests" / "errors" / "audit" / "inputs" / "bad_shape.manifest.json",
     ":1:1: error: not an autocastgen statistics file: expected an object with 'version' and 'ops' (as "
     "AUTOCASTGEN_STATS writes), found an object without them"),
    (lambda tmp: INPUTS / "bad_fields.stats.json", ":2:67: error: 'calls' must be a non-negative integer, found '-3'"),
]


def refused(*sources, out: Path) -> str:
    """The located errors of a report that must not be made (in process: the CLI runs the same
    code, test_the_cli_refuses_bad_input_and_writes_nothing checks its side once)."""
    import autocastgen.reporter as reporter

    with pytest.raises(reporter.ReportError) as caught:
        reporter.report(*sources, output=out)
    return str(caught.value) + f"autocastgen: {caught.value.count} error{'s' if caught.value.count != 1 else ''}; no report written\n"


@pytest.mark.parametrize("make, wanted", BAD, ids=["version", "truncated", "noise", "manifest", "fields"])
def test_bad_input_is_located_and_writes_nothing(make, wanted, tmp_path):
    bad = make(tmp_path)
    out = tmp_path / "report.html"
    text = refused(str(bad), out=out)
    assert text.startswith(f"{bad}{wanted}"), text[:400]
    assert not out.exists() and not any(p.name.startswith(".report.html.") for p in tmp_path.iterdir())
    # An older page stays as it was; a good first file and a bad second write nothing either.
    out.write_text("older")
    refused(str(INPUTS / "bf16.stats.json"), str(bad), out=out)
    assert out.read_text() == "older"


def test_truncated_file_names_the_bracket_left_open(tmp_path):
    text = refused(str(truncated(tmp_path)), out=tmp_path / "r.html")
    assert f"{tmp_path / 'cut.json'}:2:3: note: the '{{' that is not closed\n" in text


def test_errors_are_the_stats_verbs(tmp_path):
    for name in ("bad_fields", "version2", "nul_byte"):
        path = INPUTS / f"{name}.stats.json"
        stats = subprocess.run([CLI, "stats", str(path)], capture_output=True, text=True)
        assert refused(str(path), out=tmp_path / "r.html") == stats.stderr


def test_the_cli_refuses_bad_input_and_writes_nothing(tmp_path):
    out = tmp_path / "report.html"
    out.write_text("older")
    result = run_cli(str(noise(tmp_path)), str(tmp_path / "absent.json"), "-o", str(out))
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.startswith(f"{tmp_path / 'noise.json'}:1:1: error: byte 0x"), result.stderr[:300]
    assert result.stderr.endswith(f"autocastgen: error: cannot read '{tmp_path / 'absent.json'}': No such file or "
                                  "directory\nautocastgen: 12 errors; no report written\n"), result.stderr[-300:]
    # The verb checks its files with the stats verb's reader (codegen/cli/stats_file.cpp): the same errors.
    stats = subprocess.run([CLI, "stats", str(tmp_path / "noise.json"), str(tmp_path / "absent.json")],
                           capture_output=True, text=True)
    assert stats.stderr == result.stderr
    assert out.read_text() == "older"


def test_a_good_report_from_the_cli(tmp_path):
    good = run_cli(str(INPUTS / "fp16_watch.stats.json"), "-o", str(tmp_path / "r.html"))
    assert good.returncode == 0 and good.stdout == f"wrote {tmp_path / 'r.html'}\n", good.stderr
    assert (tmp_path / "r.html").read_text() == page(str(INPUTS / "fp16_watch.stats.json"))
