"""Reading statistics files for the report: every problem as ``file:line:col: error: ...`` with the
source line and a caret, as ``autocastgen stats`` reports it (codegen/cli/verb_stats.cpp).

Note [located JSON errors]: the file is parsed with the json module's C parser, which is fast but
keeps no positions. Only when a check fails is it parsed again with the module's pure-Python
scanner, told to note where each object and array starts and ends, and the checks run once more
to place each error: a good file pays nothing for the locations. The checks and their messages
are the stats verb's (Note [reading a statistics file] there), so the two commands agree about a
file; a file is refused as a whole when any entry is wrong.

Note [hostile statistics files]: a file is data from anywhere, so reading one is bounded. Nesting
deeper than the C++ reader's limit (64 levels, kMaxYamlDepth in core/support/yaml.h) is its error,
"invalid JSON: nesting deeper than 64 levels", at the first bracket past it: found by a pass over
the file's brackets alone (bytes.translate, a few percent of the read), exactly by a scan that
skips strings when that pass says it may be so, and before the position-keeping parser (which
recurses) ever runs. Strings full of closing brackets can hide nesting from the quick pass: such a
file is still refused where the json module's parser runs out of recursion (about 1000 levels)
or a check fails, and otherwise read (its deep part is a member nothing reads), where the stats
verb refuses it. A number the json module will not turn into an int (more than 4300 digits)
or a count past 2^64 - 1 is the stats verb's "must be a non-negative integer" error, not a
ValueError; every regular expression here is linear in the text it scans. A name (an op, a rule, a
module path) over MAX_NAME_BYTES of UTF-8, or a member name (a dtype, a reason) over MAX_KEY_BYTES,
is an error, as in the stats verb (whose message for the second is yaml-cpp's): the bounds the
runtime writes within (Note [names in statistics files] in core/support/stats_names.h), so every
file it writes reads here (the report's tree leaves long paths to the per-module table, Note
[bounded tree] in view.py).
"""

from __future__ import annotations

import array
import itertools
import json
import json.decoder
import json.scanner
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from .._core.terminal import shown as _shown

__all__ = ["Diagnostic", "ReadError", "read_json", "read_stats"]

_MAX_SHOWN = 20  # diagnostics printed per file; the count says how many there were
_LONG_LINE = 400  # characters: a longer source line is shown around its column
MAX_DEPTH = 64  # nested objects and arrays, the file itself included (kMaxYamlDepth in core/support/yaml.h)
MAX_COUNT = 2**64 - 1  # the largest count the C++ reader takes (a uint64_t)
MAX_NAME_BYTES = 2**20  # a value: kMaxStatsNameBytes in core/support/stats_names.h
MAX_KEY_BYTES = 1022  # a member name (a dtype, a reason): kMaxStatsKeyBytes there
_SURELY_SHORT = MAX_NAME_BYTES // 4  # characters: UTF-8 takes at most 4 bytes for one
_KEY_SURELY_SHORT = MAX_KEY_BYTES // 4


def _name_bytes(text: str) -> int:
    """A name's length as the C++ reader counts it: bytes of UTF-8 (a lone surrogate from a JSON
    escape as the 3 bytes it would take)."""
    return len(text.encode("utf-8", "surrogatepass"))


def _too_long(text: str, bound: int = MAX_NAME_BYTES) -> bool:
    return len(text) > bound // 4 and _name_bytes(text) > bound


def _long_name(what: str, text: str, bound: int = MAX_NAME_BYTES) -> str:
    kind = "names" if bound == MAX_NAME_BYTES else "member names"
    return f"{what} is {_name_bytes(text)} bytes long; {kind} in statistics files hold at most {bound} bytes"

_QUOTED_BYTES = 40  # as the stats verb quotes a value (shortened() in core/support/strings.h)


def _shortened(text: str) -> str:
    """At most 40 bytes of UTF-8, cut between characters, then `...`: the stats verb's form."""
    data = text.encode("utf-8", "surrogateescape")
    if len(data) <= _QUOTED_BYTES:
        return text
    end = _QUOTED_BYTES
    while end > 0 and (data[end] & 0xC0) == 0x80:
        end -= 1
    return data[:end].decode("utf-8", "surrogateescape") + "..."


@dataclass(frozen=True)
class Diagnostic:
    """One error or note: where (a character offset into the file's text, or None) and what."""

    severity: str
    offset: int | None
    message: str
    length: int = 1


class ReadError(ValueError):
    """A file that is not a readable statistics file; ``str()`` is the located diagnostics."""

    def __init__(self, text: str, count: int) -> None:
        super().__init__(text)
        self.count = count


class _Source:
    """A file's text, turning offsets into ``line:col`` (1-based, columns in bytes as the CLI counts)."""

    def __init__(self, name: str, text: str) -> None:
        self.name = _shown(name)
        self.text = text
        self._line_starts: list[int] | None = None  # found when an error is printed: a good file never needs them

    @property
    def _starts(self) -> list[int]:
        if self._line_starts is None:
            self._line_starts = [0] + [m.end() for m in re.finditer("\n", self.text)]
        return self._line_starts

    def format(self, d: Diagnostic) -> str:
        if d.offset is None:
            return f"autocastgen: {d.severity}: {_shown(d.message)}\n"
        import bisect

        line = bisect.bisect_right(self._starts, d.offset) - 1
        start = self._starts[line]
        end = self.text.find("\n", start)
        source = self.text[start:] if end < 0 else self.text[start:end]
        before = source[: d.offset - start]
        column = len(before.encode("utf-8")) + 1
        # A long line (a minified or noisy file) is shown around the column only.
        left = max(0, len(before) - 100) if len(source) > _LONG_LINE else 0
        right = len(before) + 100 if len(source) > _LONG_LINE else len(source)
        shown = ("..." if left else "") + source[left:right] + ("..." if len(source) > right else "")
        pad = ("..." if left else "") + "".join("\t" if c == "\t" else " " for c in before[left:])
        shown_line = "".join("?" if (ord(c) < 0x20 and c != "\t") or c == "\x7f" else c for c in shown)
        room = max(0, min(len(source), right) - len(before) - 1)  # under the shown part only
        caret = "^" + "~" * min(d.length - 1, room)
        return f"{self.name}:{line + 1}:{column}: {d.severity}: {_shown(d.message)}\n{shown_line}\n{pad}{caret}\n"


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    return "a scalar"


# The pure-Python parser's pieces (JSONObject, JSONArray, scanstring, WHITESPACE, py_make_scanner,
# a decoder's parse_object and scan_once), which typeshed does not declare.
_json_decoder: Any = json.decoder
_json_scanner: Any = json.scanner


class _Spans:
    """Where each object and array of a parse starts and ends (Note [located JSON errors])."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.spans: dict[int, tuple[int, int]] = {}
        decoder: Any = json.JSONDecoder()
        spans = self.spans
        decoder.parse_int = _int_or_long

        def parse_object(s_and_end: tuple[str, int], *args: Any) -> tuple[Any, int]:
            value, end = _json_decoder.JSONObject(s_and_end, *args)
            spans[id(value)] = (s_and_end[1] - 1, end)
            return value, end

        def parse_array(s_and_end: tuple[str, int], scan_once: Any) -> tuple[Any, int]:
            value, end = _json_decoder.JSONArray(s_and_end, scan_once)
            spans[id(value)] = (s_and_end[1] - 1, end)
            return value, end

        decoder.parse_object = parse_object
        decoder.parse_array = parse_array
        decoder.memo = {}
        decoder.scan_once = _json_scanner.py_make_scanner(decoder)
        self.root = decoder.decode(text)

    def start(self, container: Any) -> int:
        return self.spans[id(container)][0]

    def member(self, obj: dict[str, Any], key: str) -> tuple[int, int]:
        """The offset and source length of ``obj[key]``'s value (its text as written)."""
        start, end = self.spans[id(obj)]
        found = re.compile(r'"' + re.escape(key) + r'"\s*:\s*').search(self.text, start, end)
        if found is None:
            return start, 1
        value = obj[key]
        if isinstance(value, (dict, list)):
            return found.end(), 1
        token = _json_decoder.scanstring(self.text, found.end() + 1)[1] - found.end() if isinstance(value, str) else 0
        if not token:
            match = re.compile(r"[^,}\]\s]+").match(self.text, found.end())
            token = len(match.group(0)) if match else 1
        return found.end(), token

    def key(self, obj: dict[str, Any], key: str) -> tuple[int, int]:
        """The offset and source length of the member name ``key`` of ``obj``, as the runtime
        writes names (json.dumps's escapes); else the object's start."""
        start, end = self.spans[id(obj)]
        written = json.dumps(key, ensure_ascii=False)
        at = self.text.find(written, start, end)
        while at >= 0:  # a name, not a value that reads the same: a ':' follows
            if self.text.startswith(":", _json_decoder.WHITESPACE.match(self.text, at + len(written)).end()):
                return at, len(written)
            at = self.text.find(written, at + 1, end)
        return start, 1

    def item(self, array: list[Any], index: int) -> int:
        value = array[index]
        if isinstance(value, (dict, list)):
            return self.spans[id(value)][0]
        # A scalar entry: the index-th value after the '[' (scalars in 'ops' are rare: scan for it).
        decoder = json.JSONDecoder(parse_int=_int_or_long)
        position: int = self.spans[id(array)][0] + 1
        for i in range(index + 1):
            position = _json_decoder.WHITESPACE.match(self.text, position).end()
            if i == index:
                return position
            position = decoder.raw_decode(self.text, position)[1]
            position = _json_decoder.WHITESPACE.match(self.text, position).end() + 1  # the ','
        return position


_Locate = Callable[..., tuple[int | None, int]]


def _no_place(*_: Any) -> tuple[None, int]:
    return None, 1


class _FirstError(Exception):
    """A _Checker(first_only=True) found an error."""


class _Checker:
    """The stats verb's checks (StatsReader in codegen/cli/verb_stats.cpp), over parsed JSON."""

    def __init__(self, spans: _Spans | None, first_only: bool = False) -> None:
        self.spans = spans
        self.found: list[Diagnostic] = []
        self.errors = 0
        self.first_only = first_only  # stop at the first error (_FirstError): is the file good?

    # --- places ---
    @property
    def _locating(self) -> bool:
        """Only the errors that are printed are placed: each place is a search in its object, and
        a file of a million bad entries would otherwise cost a million searches."""
        return self.spans is not None and self.errors < _MAX_SHOWN

    @property
    def _where(self) -> _Spans:
        """The spans, where ``_locating`` says there are."""
        assert self.spans is not None
        return self.spans

    def _at_member(self, obj: dict[str, Any], key: str) -> tuple[int | None, int]:
        return self._where.member(obj, key) if self._locating else (None, 1)

    def _at(self, container: Any) -> int | None:
        return self._where.start(container) if self._locating else None

    def error(self, place: tuple[int | None, int], message: str) -> bool:
        self.found.append(Diagnostic("error", place[0], message, place[1]))
        self.errors += 1
        if self.first_only:
            raise _FirstError
        return False

    def _found(self, obj: dict[str, Any], key: str) -> str:
        if self.errors >= _MAX_SHOWN:
            return "..."  # not printed: counted only
        value = obj[key]
        if isinstance(value, (dict, list)) or value is None:
            return _describe(value)
        if isinstance(value, str):
            return f"'{_shortened(value)}'"
        if isinstance(value, _LongNumber):
            return f"'{_shortened(value.text)}'"
        if self._locating:
            start, length = self._where.member(obj, key)
            return f"'{_shortened(self._where.text[start:start + length])}'"
        return f"'{_shortened(json.dumps(value))}'"

    # --- values ---
    def name(self, obj: dict[str, Any], key: str, what: str) -> bool:
        """A name member of at most MAX_NAME_BYTES (the stats verb's short_enough)."""
        if not _too_long(obj[key]):
            return True
        return self.error(self._at_member(obj, key), _long_name(what, obj[key]))

    def key_name(self, obj: dict[str, Any], key: str, what: str) -> bool:
        """A member name (a dtype, a reason) of at most MAX_KEY_BYTES: the stats verb refuses a
        longer one too, as yaml-cpp does ("end of map flow not found", Note [names in statistics
        files])."""
        if not _too_long(key, MAX_KEY_BYTES):
            return True
        return self.error(self._where.key(obj, key) if self._locating else (None, 1),
                          _long_name(what, key, MAX_KEY_BYTES))

    def integer(self, obj: dict[str, Any], key: str, what: str) -> bool:
        value = obj[key]
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_COUNT:
            return True
        return self.error(self._at_member(obj, key),
                          f"{what} must be a non-negative integer, found {self._found(obj, key)}")

    def count(self, obj: dict[str, Any], key: str, needed: bool) -> bool:
        if key not in obj:
            if needed:
                self.error((self._at(obj), 1), f"missing member '{key}'")
            return not needed
        return self.integer(obj, key, f"'{key}'")

    def magnitude(self, obj: dict[str, Any], key: str) -> bool:
        value = obj.get(key)
        if value is None:
            return True
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0:
            return True
        return self.error(self._at_member(obj, key),
                          f"'{key}' must be a non-negative number or null, found {self._found(obj, key)}")

    # --- the file ---
    def run(self, root: Any) -> None:
        if not isinstance(root, dict) or "version" not in root or "ops" not in root:
            found = "an object without them" if isinstance(root, dict) else _describe(root)
            place = (self._at(root) if isinstance(root, (dict, list)) else (0 if self.spans else None), 1)
            self.error(place, "not an autocastgen statistics file: expected an object with 'version' and 'ops' "
                              f"(as AUTOCASTGEN_STATS writes), found {found}")
            return
        version = root["version"]
        if not (isinstance(version, int) and not isinstance(version, bool) and version == 1):
            shown = self._found(root, "version") if not isinstance(version, (dict, list)) else _describe(version)
            self.error((self._at_member(root, "version")[0], 1),
                       f"unsupported statistics file version {shown} (this autocastgen reads version 1)")
            return
        ops = root["ops"]
        if not isinstance(ops, list):
            self.error((self._at_member(root, "ops")[0], 1),
                       f"'ops' must be an array of objects, found {_describe(ops)}")
            return
        seen: dict[tuple[str, str, bool, str], int] = {}
        for index, item in enumerate(ops):
            if not (self.spans is None and _plain_entry(item)) and not self.entry(ops, index, item):
                continue
            key = (item["op"], item.get("policy", ""), "module" in item, item.get("module", ""))
            if key in seen:
                rule = f" ({_shortened(item['policy'])})" if item.get("policy") else ""
                module = f" in module '{_shortened(item['module'])}'" if "module" in item else ""
                self.error((self._at(item), 1), f"'{_shortened(item['op'])}'{rule}{module} is listed twice")
                first = ops[seen[key]]
                at = self.spans.start(first) if self.spans is not None and self.errors <= _MAX_SHOWN else None
                self.found.append(Diagnostic("note", at, "first listed here"))
                continue
            seen[key] = index

    def entry(self, ops: list[Any], index: int, item: Any) -> bool:
        if not isinstance(item, dict):
            place = self._where.item(ops, index) if self._locating else None
            return self.error((place, 1), "each entry of 'ops' must be an object with 'op' and 'calls', "
                                          f"found {_describe(item)}")
        ok = True
        name = item.get("op")
        if "op" not in item:
            ok = self.error((self._at(item), 1), "missing member 'op'")
        elif not isinstance(name, str) or not name:
            ok = self.error((self._at_member(item, "op")[0], 1),
                            "'op' must be an op name such as \"aten::linear\", found "
                            f"{_describe(name) if not isinstance(name, str) else repr(name)}")
        else:
            ok = self.name(item, "op", "'op'") and ok
        if "policy" in item and not isinstance(item["policy"], str):
            ok = self.error(self._at_member(item, "policy"), "'policy' must be a string")
        elif "policy" in item:
            ok = self.name(item, "policy", "'policy'") and ok
        if "module" in item and not isinstance(item["module"], str):
            ok = self.error(self._at_member(item, "module"),
                            f"'module' must be a module path string, found {_describe(item['module'])}")
        elif "module" in item:
            ok = self.name(item, "module", "'module'") and ok
        ok = self.count(item, "calls", True) and ok
        if "ran_in" not in item:
            ok = self.error((self._at(item), 1), "missing member 'ran_in'")
        elif not isinstance(item["ran_in"], dict):
            ok = self.error((self._at_member(item, "ran_in")[0], 1),
                            f"'ran_in' must be an object of dtype name to calls, found {_describe(item['ran_in'])}")
        else:
            for dtype in item["ran_in"]:
                ok = (self.key_name(item["ran_in"], dtype, "a dtype name in 'ran_in'")
                      and self.integer(item["ran_in"], dtype, f"'ran_in' of '{_shortened(dtype)}'")) and ok
        for key, needed in (("casts", True), ("cast_bytes", True), ("cache_hits", True), ("cache_misses", False),
                            ("cache_evictions", False), ("compiled_calls", False), ("outputs_checked", False),
                            ("nonfinite", False)):
            ok = self.count(item, key, needed) and ok
        ok = self.magnitude(item, "output_max_abs") and ok
        if "ranges" in item:
            ranges = item["ranges"]
            if not isinstance(ranges, dict):
                ok = self.error((self._at_member(item, "ranges")[0], 1),
                                f"'ranges' must be an object, found {_describe(ranges)}")
            else:
                ok = self.count(ranges, "calls", True) and ok
                for key in ("input_max_abs", "input_min_abs", "output_max_abs", "output_min_abs"):
                    ok = self.magnitude(ranges, key) and ok
                for key in ("output_elements", "float16_overflow", "float16_underflow", "bfloat16_overflow",
                            "bfloat16_underflow"):
                    ok = self.count(ranges, key, True) and ok
        if "fp8_skipped" in item:  # fp8 calls that ran in the lower precision, by why (docs/fp8.md)
            skipped = item["fp8_skipped"]
            if not isinstance(skipped, dict):
                ok = self.error((self._at_member(item, "fp8_skipped")[0], 1),
                                f"'fp8_skipped' must be an object of reason to calls, found {_describe(skipped)}")
            else:
                for reason in skipped:
                    ok = (self.key_name(skipped, reason, "a reason in 'fp8_skipped'")
                          and self.integer(skipped, reason, f"'fp8_skipped' of '{_shortened(reason)}'")) and ok
        event = item.get("first_nonfinite")
        if event is not None and not (isinstance(event, dict) and isinstance(event.get("message"), str)
                                      and isinstance(event.get("line", ""), str)):
            ok = self.error((self._at_member(item, "first_nonfinite")[0], 1),
                            "'first_nonfinite' must be an object with a 'message' string")
        return ok


_NEEDED = ("calls", "casts", "cast_bytes", "cache_hits")
_OPTIONAL = ("cache_misses", "cache_evictions", "compiled_calls", "outputs_checked", "nonfinite")
_RANGE_NEEDED = ("calls", "output_elements", "float16_overflow", "float16_underflow", "bfloat16_overflow",
                 "bfloat16_underflow")
_RANGE_MAGNITUDES = ("input_max_abs", "input_min_abs", "output_max_abs", "output_min_abs")
_NUMBERS = (int, float)


def _plain_entry(item: Any) -> bool:
    """An entry as the runtime writes it, checked quickly: True when _Checker.entry would find
    nothing (False sends it to entry(), which says what is wrong). Plain loops, no generators: a
    100k-row file is checked in a few tenths of a second (bench/report_100k.py)."""
    if type(item) is not dict:
        return False
    get = item.get
    op, ran_in = get("op"), get("ran_in")
    if type(op) is not str or not op or type(ran_in) is not dict:
        return False
    policy, module = get("policy", ""), get("module", "")
    if type(policy) is not str or type(module) is not str:
        return False
    if len(op) > _SURELY_SHORT or len(policy) > _SURELY_SHORT or len(module) > _SURELY_SHORT:
        return False  # maybe past MAX_NAME_BYTES: entry() counts its bytes
    for key in _NEEDED:
        value = get(key)
        if type(value) is not int or not 0 <= value <= MAX_COUNT:
            return False
    for key in _OPTIONAL:
        value = get(key, 0)
        if type(value) is not int or not 0 <= value <= MAX_COUNT:
            return False
    for dtype, value in ran_in.items():
        if type(value) is not int or not 0 <= value <= MAX_COUNT or len(dtype) > _KEY_SURELY_SHORT:
            return False
    value = get("output_max_abs")
    if value is not None and not (type(value) in _NUMBERS and 0 <= value < math.inf):
        return False
    ranges = get("ranges")
    if ranges is not None:
        if type(ranges) is not dict:
            return False
        for key in _RANGE_NEEDED:
            value = ranges.get(key)
            if type(value) is not int or not 0 <= value <= MAX_COUNT:
                return False
        for key in _RANGE_MAGNITUDES:
            value = ranges.get(key)
            if value is not None and not (type(value) in _NUMBERS and 0 <= value < math.inf):
                return False
    if "fp8_skipped" in item:
        skipped = item["fp8_skipped"]
        if type(skipped) is not dict:
            return False
        for reason, value in skipped.items():
            if type(value) is not int or not 0 <= value <= MAX_COUNT or len(reason) > _KEY_SURELY_SHORT:
                return False
    event = get("first_nonfinite")
    return event is None or (type(event) is dict and type(event.get("message")) is str
                             and type(event.get("line", "")) is str)


def _unclosed(text: str, end: int) -> int | None:
    """The offset of the innermost '[' or '{' still open at ``end`` (strings skipped)."""
    stack: list[int] = []
    for match in _TOKENS.finditer(text, 0, end):
        token = text[match.start()]
        if token in "[{":
            stack.append(match.start())
        elif token in "]}" and stack:
            stack.pop()
    return stack[-1] if stack else None


def _syntax(text: str, error: json.JSONDecodeError) -> list[Diagnostic]:
    if not text.strip():
        return [Diagnostic("error", 0, "the file is empty: not an autocastgen statistics file")]
    end = len(text.rstrip())
    in_last_string = error.msg.startswith("Unterminated string") and '"' not in text[error.pos + 1:]
    if error.pos >= end or in_last_string:
        found = [Diagnostic("error", max(end - 1, 0),
                            "invalid JSON: the file ends before its JSON does (a file cut short?)")]
        opened = _unclosed(text, end)
        if opened is not None:
            found.append(Diagnostic("note", opened, f"the '{text[opened]}' that is not closed"))
        return found
    return [Diagnostic("error", error.pos, f"invalid JSON: {error.msg}")]


def read_stats(path: str | Path) -> dict[str, Any]:
    """The statistics file at ``path``, checked as ``autocastgen stats`` checks it. Raises
    :class:`ReadError` with the located diagnostics."""
    source, root = _read_json(path)
    try:
        _Checker(None, first_only=True).run(root)
    except _FirstError:  # Note [located JSON errors]: again, with places
        deep = _too_deep_at(source.text)  # exactly: the position-keeping parser recurses
        if deep is not None:
            return _fail(source, [_too_deep(deep)])
        spans = _Spans(source.text)
        checker = _Checker(spans)
        checker.run(spans.root)
        return _fail(source, checker.found)
    table: dict[str, Any] = root  # checked: an object
    return table


def read_json(path: str | Path) -> Any:
    """The JSON of a statistics file (or a record) at ``path``, not checked further: the reading
    half of :func:`read_stats` (UTF-8, nesting, syntax; Note [hostile statistics files]). Raises
    :class:`ReadError` with the located diagnostics."""
    return _read_json(path)[1]


def _read_json(path: str | Path) -> tuple[_Source, Any]:
    name = str(path)
    try:
        data = Path(path).read_bytes()
    except OSError as error:
        raise ReadError(f"autocastgen: error: cannot read '{_shown(name)}': {error.strerror}\n", 1) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        text = data[: error.start].decode("utf-8") + "\ufffd" + data[error.start + 1:].decode("utf-8", "replace")
        return _fail(_Source(name, text), [Diagnostic(
            "error", len(data[: error.start].decode("utf-8")),
            f"byte 0x{data[error.start]:02X} is not UTF-8; statistics files must be UTF-8")])
    if text.startswith("\ufeff"):
        text = text[1:]
    source = _Source(name, text)
    nul = text.find("\0")
    if nul >= 0:
        return _fail(source, [Diagnostic("error", nul, "NUL byte; JSON text cannot hold control characters")])
    # Note [hostile statistics files]: the quick pass over the brackets, then the exact one.
    deep = _too_deep_at(text) if _may_nest_too_deep(data) else None
    try:
        root = _parse(text)
    except json.JSONDecodeError as error:
        return _fail(source, [_too_deep(deep)] if deep is not None and deep < error.pos else _syntax(text, error))
    except RecursionError:  # brackets in strings hid the depth from the quick pass
        deep = _too_deep_at(text)
        return _fail(source, [_too_deep(deep or 0)])
    if deep is not None:
        return _fail(source, [_too_deep(deep)])
    return source, root


class _LongNumber:
    """An integer with more digits than ``int()`` takes from text: an error wherever a count is due."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def _int_or_long(text: str) -> int | _LongNumber:
    try:
        return int(text)
    except ValueError:  # past sys.get_int_max_str_digits()
        return _LongNumber(text)


def _parse(text: str) -> Any:
    """The file's JSON; a number past int()'s digit limit is a :class:`_LongNumber` (only then is
    every integer parsed by a Python function: the C parser raises ValueError for it)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except ValueError:
        return json.loads(text, parse_int=_int_or_long)


# Strings (closed or running to the end) and brackets: one pass, no backtracking across a string.
_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?|[\[\]{}]')
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_NESTING_STEPS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")  # +1 and -1 as signed bytes


def _may_nest_too_deep(data: bytes) -> bool:
    """Whether the brackets alone, strings not told apart, nest past MAX_DEPTH (a quick pass in C:
    a file the runtime wrote nests 4 deep)."""
    steps = array.array("b", data.translate(None, _NOT_BRACKETS).translate(_NESTING_STEPS))
    return max(itertools.accumulate(steps), default=0) > MAX_DEPTH


def _too_deep_at(text: str) -> int | None:
    """The offset of the first '[' or '{' nested deeper than MAX_DEPTH, strings skipped, or None."""
    depth = 0
    for match in _TOKENS.finditer(text):
        token = text[match.start()]
        if token in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return match.start()
        elif token in "]}":
            depth = max(0, depth - 1)
    return None


def _too_deep(offset: int) -> Diagnostic:
    return Diagnostic("error", offset, f"invalid JSON: nesting deeper than {MAX_DEPTH} levels")


def _fail(source: _Source, found: list[Diagnostic]) -> NoReturn:
    errors = sum(d.severity == "error" for d in found)
    lines, printed = [], 0
    for d in found:
        if d.severity == "error":
            printed += 1
        if printed > _MAX_SHOWN:
            break
        lines.append(source.format(d))
    if printed > _MAX_SHOWN:
        lines.append(f"autocastgen: ... and {errors - _MAX_SHOWN} more errors in {source.name}\n")
    raise ReadError("".join(lines), errors)
