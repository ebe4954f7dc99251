"""A policy's top-level ``extends:`` value, read from its text in linear time (no YAML library).

Note [reading extends: without a parser]: two places need the file a policy extends before the
C++ reader sees it: ``load_policy`` of YAML text makes a relative base absolute (it is taken from
the current directory, and the text is loaded from a private file), and ``compile_policy`` hashes
every file of the chain into its cache key. Both read only the first line that starts with
``extends:`` at column 0 (a top-level key of a block mapping) and its one-line value: plain (up to
a `` #`` comment, trailing blanks dropped), single-quoted (``''`` is a quote) or double-quoted
(YAML's escapes: ``\\n``, ``\\"``, ``\\\\``, ``\\xNN``, ``\\uNNNN``, ...). Anything else (a value on
the next line, a block scalar, a flow mapping, a bad escape) is ``None``: the C++ reader, which
parses the whole file, is the authority and reports it; the compile cache also checks every
input the generator actually read. Every step is a single pass over the line (the regular
expression this replaced took 45 s on a line of 60,000 spaces), and PyYAML is not a dependency
of the package.
"""

from __future__ import annotations

import re
from typing import NamedTuple

__all__ = ["Extends", "find_extends"]

# Literal text at a line start: linear (a failed attempt costs the literal's length at most).
_KEY = re.compile(r"^extends:", re.M)

_ESCAPES = {"0": "\0", "a": "\a", "b": "\b", "t": "\t", "\t": "\t", "n": "\n", "v": "\v", "f": "\f", "r": "\r",
            "e": "\x1b", " ": " ", '"': '"', "/": "/", "\\": "\\", "N": "\x85", "_": "\xa0", "L": "\u2028",
            "P": "\u2029"}
_HEX_ESCAPES = {"x": 2, "u": 4, "U": 8}
_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")
# A plain scalar cannot start with these (YAML 1.2, 7.3.3); "-", "?" and ":" only before a blank.
_NOT_PLAIN_START = frozenset(",[]{}#&*!|>'\"%@`")


class Extends(NamedTuple):
    """The value of a policy's ``extends:`` as YAML reads it, and where its text is: ``text[start:end]``
    (the quotes included) is what a rewrite replaces."""

    value: str
    start: int
    end: int


def find_extends(text: str) -> Extends | None:
    """The first top-level one-line ``extends:`` of ``text`` (Note [reading extends: without a parser])."""
    key = _KEY.search(text)
    if key is None:
        return None
    line_end = text.find("\n", key.end())
    if line_end < 0:
        line_end = len(text)
    if line_end > key.end() and text[line_end - 1] == "\r":
        line_end -= 1
    start = key.end()
    if start < line_end and text[start] not in " \t":
        return None  # `extends:x` is one plain scalar, not this key
    while start < line_end and text[start] in " \t":
        start += 1
    if start == line_end or text[start] == "#":
        return None  # the value is on a later line, or there is none
    first = text[start]
    if first == '"':
        found = _double_quoted(text, start, line_end)
    elif first == "'":
        found = _single_quoted(text, start, line_end)
    else:
        found = _plain(text, start, line_end)
    if found is None:
        return None
    value, end = found
    rest = end
    while rest < line_end and text[rest] in " \t":
        rest += 1
    if rest < line_end and (text[rest] != "#" or rest == end):
        return None  # text after a quoted value, or a '#' that is not a comment
    return Extends(value, start, end)


def _plain(text: str, start: int, line_end: int) -> tuple[str, int] | None:
    first = text[start]
    after = text[start + 1] if start + 1 < line_end else " "
    if first in _NOT_PLAIN_START or (first in "-?:" and after in " \t"):
        return None
    end = line_end
    for blank in (" #", "\t#"):  # a comment starts at a '#' after a blank
        found = text.find(blank, start, line_end)
        if 0 <= found < end:
            end = found
    while end > start and text[end - 1] in " \t":
        end -= 1
    value = text[start:end]
    if ": " in value or value.endswith(":"):
        return None  # a mapping, not a path
    return value, end


def _single_quoted(text: str, start: int, line_end: int) -> tuple[str, int] | None:
    parts, at = [], start + 1
    while True:
        quote = text.find("'", at, line_end)
        if quote < 0:
            return None  # not closed on this line
        parts.append(text[at:quote])
        if quote + 1 < line_end and text[quote + 1] == "'":
            parts.append("'")
            at = quote + 2
            continue
        return "".join(parts), quote + 1


def _double_quoted(text: str, start: int, line_end: int) -> tuple[str, int] | None:
    parts, at = [], start + 1
    while at < line_end:
        char = text[at]
        if char == '"':
            return "".join(parts), at + 1
        if char != "\\":
            stop = at
            while stop < line_end and text[stop] not in '"\\':
                stop += 1
            parts.append(text[at:stop])
            at = stop
            continue
        if at + 1 >= line_end:
            return None
        escape = text[at + 1]
        if escape in _ESCAPES:
            parts.append(_ESCAPES[escape])
            at += 2
            continue
        digits = _HEX_ESCAPES.get(escape)
        hex_text = text[at + 2:at + 2 + digits] if digits else ""
        if not digits or len(hex_text) != digits or not set(hex_text) <= _HEX_DIGITS:
            return None
        code = int(hex_text, 16)
        if code > 0x10FFFF:
            return None
        parts.append(chr(code))
        at += 2 + digits
    return None
