"""Markdown and HTML markup taken out of text, leaving what a reader sees.

A passage is what search shows the model and what a citation is checked against: "**bold**",
"[a link](https://…)", "<br>", "## " and "|---|" are noise there. `plain(text)` keeps the
words and the layout that carries meaning: emphasis, links and images give their text (an
image its description), inline code its code, HTML tags and comments go, heading markers and
quote markers go (the heading's words stay), rules and link definitions go. Fenced code
blocks stay as written (their fences too: the model should know it reads code), and tables
stay rows of cells ("| a | b |") without their "|---|" rule.

Everything here takes time linear in the length of the text: the patterns cannot backtrack
(possessive quantifiers, no bracket inside a bracket), and emphasis is paired with a stack.
"""

from __future__ import annotations

import html
import re

# Block-level lines.
_TABLE_RULE = re.compile(r"[ \t]*+\|?[ \t]*+:?-++:?[ \t]*+(?:\|[ \t]*+:?-++:?[ \t]*+)*+\|?[ \t]*+")
_THEMATIC_BREAK = re.compile(r"[ ]{0,3}+(?:(?:\*[ \t]*+){3,}+|(?:-[ \t]*+){3,}+|(?:_[ \t]*+){3,}+)")
_SETEXT = re.compile(r"[ ]{0,3}+(?:=++|-++)[ \t]*+")
_LINK_DEFINITION = re.compile(r"[ ]{0,3}+\[[^\[\]\n]++\]:[ \t]*+\S++.*+")
_QUOTE = re.compile(r"[ ]{0,3}+(?:>[ ]?+)++")

# Inline markup, in the order it is taken out. No bracket inside a bracket, no parenthesis
# inside a link's address: from each "[" the search stops at the next one.
_IMAGE = re.compile(r"!\[([^\[\]\n]*+)\](?:\([^()\n]*+\)|\[[^\[\]\n]*+\])")
_LINK = re.compile(r"\[([^\[\]\n]++)\](?:\([^()\n]*+\)|\[[^\[\]\n]*+\])")
_AUTOLINK = re.compile(r"<((?:https?|ftp|mailto):[^<>\s]++)>", re.IGNORECASE)
# The HTML elements a Markdown file or an extracted page uses; "x<y and y>z" is no tag.
_ELEMENTS = (
    "a|abbr|address|article|aside|b|bdi|bdo|big|blockquote|body|br|button|caption|center|cite|"
    "code|col|colgroup|dd|del|details|dfn|div|dl|dt|em|figcaption|figure|font|footer|form|h[1-6]|"
    "head|header|hr|html|i|iframe|img|input|ins|kbd|label|li|main|mark|nav|ol|p|picture|pre|q|s|"
    "samp|section|small|source|span|strike|strong|sub|summary|sup|table|tbody|td|tfoot|th|thead|"
    "time|tr|tt|u|ul|var|video|wbr"
)
_ELEMENT_NAMES = frozenset(_ELEMENTS.replace("h[1-6]", "h1|h2|h3|h4|h5|h6").split("|"))
_TAG = re.compile(r"</?+([A-Za-z][A-Za-z0-9-]*+)[^<>]*+>")
_ENTITY = re.compile(r"&(?:#[0-9]{1,7}|#[xX][0-9A-Fa-f]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});")
# A run of emphasis delimiters, not escaped, and not inside a word ("2*3*4", "snake_case").
_DELIMITER = re.compile(r"(?<![*_~\\])(?:(?<![^\W_])(?:\*++|_++|~~++)|(?:\*++|_++|~~++)(?![^\W_]))")
_ESCAPE = re.compile(r"\\([!-/:-@\[-`{-~])")
_BACKTICKS = re.compile(r"`++")
_MARKS = re.compile(r"[*_~\[<&\\]")  # a text without any of these has no inline markup


def plain(text: str) -> str:
    """`text` (Markdown, maybe with HTML in it) without its markup; see the module."""
    out: list[str] = []
    open_fence = ""
    in_comment = False
    previous = ""
    for line in text.split("\n"):
        if open_fence:
            out.append(line)
            open_fence = "" if closes(open_fence, line) else open_fence
            continue
        marker = fence(line)
        if marker and not in_comment:
            open_fence = marker
            out.append(line)
            previous = line
            continue
        line, in_comment = _without_comments(line, in_comment)
        if _TABLE_RULE.fullmatch(line) and "|" in line:
            continue  # a table's rule: the rows before and after stay one table
        if (
            _THEMATIC_BREAK.fullmatch(line)
            or (previous.strip() and _SETEXT.fullmatch(line))
            or _LINK_DEFINITION.fullmatch(line)
        ):
            line = ""
        else:
            line = inline(_block_marks_removed(line))
        out.append(line)
        previous = line
    return "\n".join(out)


def fence(line: str) -> str:
    """The fence ("```", "~~~~") when `line` opens or closes a fenced code block, else ""."""
    stripped = line.lstrip(" ")
    if len(line) - len(stripped) > 3 or not stripped.startswith(("```", "~~~")):
        return ""
    return stripped[: len(stripped) - len(stripped.lstrip(stripped[0]))]


def closes(open_fence: str, line: str) -> bool:
    """Whether `line` closes the code block `open_fence` opened (a fence at least as long)."""
    marker = fence(line)
    return marker.startswith(open_fence) and line.strip() == marker


def atx_heading(line: str) -> str:
    """The title of an ATX Markdown heading ("## Title", "## Title ##"), or "" when `line` is
    not one ("#hashtag" is not)."""
    stripped = line.lstrip(" \t")
    if len(line) - len(stripped) > 3 or not stripped.startswith("#"):
        return ""
    rest = stripped.lstrip("#")
    if len(stripped) - len(rest) > 6 or (rest and rest[0] not in " \t"):
        return ""
    title = rest.strip(" \t")
    unclosed = title.rstrip("#")
    if unclosed != title and (not unclosed or unclosed[-1] in " \t"):
        title = unclosed.rstrip(" \t")
    return title


def _without_comments(line: str, in_comment: bool) -> tuple[str, bool]:
    """`line` without the HTML comments in it, and whether one is still open at its end."""
    kept: list[str] = []
    position = 0
    while True:
        if in_comment:
            end = line.find("-->", position)
            if end < 0:
                return "".join(kept), True
            position, in_comment = end + 3, False
        start = line.find("<!--", position)
        if start < 0:
            kept.append(line[position:])
            return "".join(kept), False
        kept.append(line[position:start])
        position, in_comment = start + 4, True


def _block_marks_removed(line: str) -> str:
    """The line without its heading or quote marker ("## Title" is "Title")."""
    if quote := _QUOTE.match(line):
        line = line[quote.end() :]
    return atx_heading(line) or line


def inline(line: str) -> str:
    """One line's inline markup taken out: code spans keep their code, as written."""
    parts: list[str] = []
    position = 0
    opening: re.Match[str] | None = None
    for run in _BACKTICKS.finditer(line):
        if opening is None:
            opening = run
        elif len(run.group()) == len(opening.group()):
            parts.append(_prose(line[position : opening.start()]))
            parts.append(line[opening.end() : run.start()].strip(" ") or run.group())
            position, opening = run.end(), None
    parts.append(_prose(line[position:]))
    return "".join(parts)


def _prose(text: str) -> str:
    if not _MARKS.search(text):
        return text
    text = _IMAGE.sub(r"\1", text)
    text = _LINK.sub(r"\1", text)
    text = _AUTOLINK.sub(r"\1", text)
    if "<" in text:
        text = _TAG.sub(_tag_removed, text)
    text = _emphasis_removed(text)
    text = _ESCAPE.sub(r"\1", text)
    return _ENTITY.sub(lambda match: html.unescape(match.group()), text)


def _tag_removed(match: re.Match[str]) -> str:
    return "" if match.group(1).lower() in _ELEMENT_NAMES else match.group()


def _emphasis_removed(text: str) -> str:
    """`*a*`, `**a**`, `_a_`, `__a__` and `~~a~~` give `a`; a delimiter without its pair,
    or inside a word (`2*3*4`, `snake_case`), stays."""
    openers: dict[str, list[int]] = {}
    removed: set[int] = set()
    runs: list[re.Match[str]] = []
    for run in _DELIMITER.finditer(text):
        before = text[run.start() - 1] if run.start() else " "
        after = text[run.end()] if run.end() < len(text) else " "
        left = not after.isspace() and (before.isspace() or not before.isalnum())
        right = not before.isspace() and (after.isspace() or not after.isalnum())
        key = run.group()
        if right and openers.get(key):
            removed.add(openers[key].pop())
            removed.add(len(runs))
        elif left and not (before.isalnum() and after.isalnum()):
            openers.setdefault(key, []).append(len(runs))
        runs.append(run)
    if not removed:
        return text
    kept: list[str] = []
    position = 0
    for index in sorted(removed):
        run = runs[index]
        kept.append(text[position : run.start()])
        position = run.end()
    kept.append(text[position:])
    return "".join(kept)
