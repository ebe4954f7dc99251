"""Names as a terminal shows them: control and other unprintable characters written as escapes.

Note [names on a terminal]: op names, module paths, file paths and policy names come from users
and from files (a statistics file, a model's attribute names, a folder). Printed raw, an escape
sequence in one could recolour, move the cursor or retitle the terminal, a line break could fake a
line of output, and a right-to-left override reorder what follows. So everything the package
prints or raises that holds such a name passes it through :func:`shown`: each character that is
not printable (C0 and C1 controls, DEL, line and paragraph separators, format characters such as
the bidirectional overrides, unassigned and private code points) becomes ``\\xNN``, ``\\uNNNN`` or
``\\UNNNNNNNN``, and a byte that was not UTF-8 in a file name (Python's ``surrogateescape``
character U+DC80-U+DCFF) becomes ``\\xNN`` of that byte. Printable text, spaces and backslashes
included, is unchanged.
"""

from __future__ import annotations

__all__ = ["shown"]


def shown(text: str) -> str:
    """``text`` with every unprintable character escaped (Note [names on a terminal])."""
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else _escape(ord(char)) for char in text)


def _escape(code: int) -> str:
    if 0xDC80 <= code <= 0xDCFF:  # a byte that was not UTF-8 (surrogateescape)
        return f"\\x{code - 0xDC00:02x}"
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"
