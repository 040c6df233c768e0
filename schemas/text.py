"""Names from a capture, made safe for where zym prints them.

Kernel, function, file and API names come from the profiled program and from files anyone can
write, so they may hold terminal control sequences (``\\x1b[2J`` clears the screen), rich
markup (``[/]`` is a closing tag), HTML (``<script>``) or Markdown. Every output escapes them:

* ``printable``: C0/C1 control characters, DEL and the Unicode bidirectional overrides as
  visible ``\\xNN``/``\\uNNNN`` escapes (text output, messages, file names in errors);
* ``markup``: ``printable``, then rich's markup escaping, for text that rich will parse;
* ``md_text`` / ``md_code``: Markdown prose and inline code that stay one table cell and
  render no HTML;
* ``html_text``: ``printable`` then HTML escaping (quotes included), for pages.

>>> printable("a\\x1b[2Jb")
'a\\\\x1b[2Jb'
>>> md_code("x`y|z")
'`` x`y\\\\|z ``'
"""
from __future__ import annotations

import re

# Bidirectional controls that reorder what a reader sees (CVE-2021-42574, "Trojan Source").
_BIDI = [0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
_ESCAPES = {c: f"\\x{c:02x}" for c in [*range(0x20), 0x7F, *range(0x80, 0xA0)]}
_ESCAPES.update({c: f"\\u{c:04x}" for c in _BIDI})
# Lone surrogates (from undecodable file names) cannot be encoded on a UTF-8 terminal.
_SURROGATE = re.compile("[\ud800-\udfff]")


def printable(text: object) -> str:
    """``text`` with control characters, DEL and bidi overrides as visible escapes."""
    s = str(text).translate(_ESCAPES)
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", s)


def markup(text: object) -> str:
    """``printable`` text that rich prints literally (its markup brackets escaped)."""
    from rich.markup import escape

    return escape(printable(text))


_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|~>])")


def md_text(text: object) -> str:
    """Markdown prose: special characters backslash-escaped, HTML characters as entities, one
    line (a table cell stays a cell)."""
    s = printable(text).replace("&", "&amp;").replace("<", "&lt;")
    return _MD_SPECIAL.sub(r"\\\1", s)


def md_code(text: object) -> str:
    """An inline Markdown code span that holds ``text`` literally, whatever backticks it has;
    ``|`` escaped so that the span stays inside a table cell."""
    s = printable(text).replace("|", "\\|")
    fence = "`" * (max((len(r) for r in re.findall("`+", s)), default=0) + 1)
    pad = " " if s.startswith("`") or s.endswith("`") or fence != "`" else ""
    return f"{fence}{pad}{s}{pad}{fence}"


def html_text(text: object) -> str:
    """Text for an HTML page (element content or a quoted attribute)."""
    import html  # here: the package imports its entity table (~2 ms), which only pages need

    return html.escape(printable(text), quote=True)
