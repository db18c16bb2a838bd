"""Tolerant, typed extraction of XML-like tags from model output ("enhanced thinking" format).

A model is asked to answer in tags (``<think>``, ``<interactive>``, ...). What comes back is
not XML: prose around the tags, code fences, forgotten closing tags, odd case and whitespace,
entities. `extract` reads what is there according to a tree of `TagSpec` and reports problems
in `Extraction.errors`; it never raises on a `str` and runs in linear time (one tokenizing
pass with possessive regexes, then one walk per nesting level, at most `MAX_DEPTH` levels).

Result contract (`Node`):

* ``raw``  - the element's inner source, stripped, markup and entities untouched.
* ``text`` - the element's *own* text: inner content with the recognized child elements (tags
  named in ``spec.children``) cut out, comments dropped, CDATA unwrapped, entities decoded
  (`html.unescape`), pieces stripped and joined by a blank line. For a leaf it is simply the
  decoded inner text; unknown tags inside it (``<b>``) are left as they are.
* ``type``/``value`` - the ``type="..."`` attribute (lower-cased; when absent, "string", or the
  spec's only/first supported type if "string" is not supported) and ``text`` converted to it.
  A failed conversion gives ``value=None`` and an error.
* ``children`` - recognized child elements by spec tag; a list when the spec says ``multiple``.

Modes (`parse_structured`): "standard" (``<think>`` + ``<interactive>``), "enhanced" (``<think>``
split into ``<analysis>``/``<plan>``/``<reasoning>``, the default) and "custom" (a user spec,
validated by `spec_from_json`).
"""

from __future__ import annotations

import bisect
import html
import json
import math
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

__all__ = [
    "DEFAULT_MODE",
    "ENHANCED_SPEC",
    "KNOWN_TYPES",
    "MAX_DEPTH",
    "MAX_INPUT_CHARS",
    "MAX_SPECS",
    "MODES",
    "STANDARD_SPEC",
    "Extraction",
    "Node",
    "SpecError",
    "StructuredReply",
    "TagSpec",
    "extract",
    "find_stop_signal",
    "iter_specs",
    "mode_spec",
    "parse_structured",
    "render_format_instructions",
    "spec_from_json",
]

MAX_DEPTH = 8
MAX_INPUT_CHARS = 200_000
MAX_SPECS = 64
KNOWN_TYPES: tuple[str, ...] = ("string", "boolean", "number", "json")
MODES: tuple[str, ...] = ("standard", "enhanced", "custom")
DEFAULT_MODE = "enhanced"

# ASCII on purpose: tag names are identifiers, and lower-casing non-ASCII names is not stable.
_TAG_NAME = r"[A-Za-z_][\w.-]{0,63}"
_TAG_NAME_RE = re.compile(_TAG_NAME, re.ASCII)

# One tag token. Possessive quantifiers keep every attempt bounded by the distance to the
# next "<" or ">", so a scan of the whole input is linear. The lookahead refuses a prefix of
# a longer or namespaced name (`<thinking>`, `<ns:think>` are not `<think>`).
_TAG_RE = re.compile(
    r"<\s*+(/?)\s*+(" + _TAG_NAME + r")(?![\w.:-])([^<>]*+)>",
    re.ASCII,
)
# An attribute may only start at a name boundary (the lookbehind), so a long run of name
# characters without "=" is consumed once, not once per position.
_ATTR_RE = re.compile(
    r"(?<![\w.:-])([A-Za-z_][\w.:-]*+)\s*+=\s*+(?:\"([^\"]*+)\"|'([^']*+)'|([^\s\"'=<>`]++))",
    re.ASCII,
)
_MAX_ATTR_SOURCE = 4096  # nobody writes longer attribute lists; bounds pathological tags
_OPAQUE_START_RE = re.compile(r"<!\[CDATA\[|<!--")
_FENCE_LINE_RE = re.compile(r"^[ \t]*+```[^\n`]*+$", re.MULTILINE)
_BARE_FENCE_RE = re.compile(r"[ \t]*+```[ \t]*+")
_INT_RE = re.compile(r"[+-]?\d+", re.ASCII)
_FLOAT_RE = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?", re.ASCII)
_TRUE = frozenset({"true", "yes", "1"})
_FALSE = frozenset({"false", "no", "0"})

_OPEN, _CLOSE, _SELF = 0, 1, 2
_CDATA, _COMMENT = 0, 1


class SpecError(ValueError):
    """A custom tag spec was refused; the message names the offending entry's path."""


@dataclass(frozen=True)
class TagSpec:
    """How to extract one tag (and, recursively, its children)."""

    tag: str
    optional: bool = True
    allow_empty: bool = True
    children: tuple[TagSpec, ...] = ()
    validator: Callable[[str], bool] | None = None
    supported_types: tuple[str, ...] = KNOWN_TYPES
    multiple: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.tag, str) or not _TAG_NAME_RE.fullmatch(self.tag):
            raise ValueError(f"invalid tag name {self.tag!r}")
        # Accept lists from callers but keep the spec hashable and immutable.
        object.__setattr__(self, "children", tuple(self.children))
        types = tuple(str(t).lower() for t in self.supported_types)
        if not types or any(t not in KNOWN_TYPES for t in types):
            raise ValueError(f"supported_types must be a non-empty subset of {KNOWN_TYPES}")
        object.__setattr__(self, "supported_types", types)

    @property
    def default_type(self) -> str:
        """Type used when the tag has no ``type`` attribute."""
        return "string" if "string" in self.supported_types else self.supported_types[0]


@dataclass
class Node:
    """One extracted element (see the module docstring for what each field holds)."""

    tag: str
    text: str = ""
    raw: str = ""
    type: str = "string"
    value: object = None
    attrs: dict[str, str] = field(default_factory=dict)
    children: dict[str, Node | list[Node]] = field(default_factory=dict)
    closed: bool = True
    error: str | None = None
    span: tuple[int, int] = (0, 0)

    def get(self, path: str) -> Node | None:
        """First descendant at a dotted path of spec tags (``"stop_signal"``), or None."""
        return _lookup(self.children, path)


@dataclass
class Extraction:
    """Top-level nodes by spec tag plus every problem found (never raised)."""

    nodes: dict[str, Node | list[Node]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    truncated: bool = False

    def get(self, path: str) -> Node | None:
        """First node at a dotted path of spec tags (``"interactive.stop_signal"``), or None."""
        return _lookup(self.nodes, path)

    def get_all(self, path: str) -> list[Node]:
        """All nodes at the last step of a dotted path (first match at the earlier steps)."""
        head, _, last = path.rpartition(".")
        container = self.nodes
        if head:
            parent = _lookup(self.nodes, head)
            if parent is None:
                return []
            container = parent.children
        return _as_list(_get_key(container, last))


@dataclass
class StructuredReply:
    """A model reply read in one mode, flattened for the caller."""

    mode: str
    parts: dict[str, str] = field(default_factory=dict)
    response: str | None = None
    stop_signal: bool | None = None
    errors: list[str] = field(default_factory=list)
    found: bool = False


# --------------------------------------------------------------------------- helpers


def _as_list(item: Node | list[Node] | None) -> list[Node]:
    if item is None:
        return []
    return item if isinstance(item, list) else [item]


def _first(item: Node | list[Node] | None) -> Node | None:
    items = _as_list(item)
    return items[0] if items else None


def _get_key(container: dict[str, Node | list[Node]], key: str) -> Node | list[Node] | None:
    if key in container:
        return container[key]
    low = key.lower()
    for name, item in container.items():
        if name.lower() == low:
            return item
    return None


def _lookup(container: dict[str, Node | list[Node]], path: str) -> Node | None:
    node: Node | None = None
    for step in path.split("."):
        node = _first(_get_key(container, step))
        if node is None:
            return None
        container = node.children
    return node


def _preview(text: str, limit: int = 40) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "…")


def _parse_bool(text: str) -> bool | None:
    low = text.strip().lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    return None


def _convert(text: str, type_name: str) -> tuple[object, str | None]:
    """Typed value of ``text`` or ``(None, reason)``; never raises."""
    if type_name == "string":
        return text, None
    if type_name == "boolean":
        flag = _parse_bool(text)
        if flag is None:
            return None, f"cannot read {_preview(text)} as boolean (true/false/yes/no/1/0)"
        return flag, None
    if type_name == "number":
        s = text.strip()
        if _INT_RE.fullmatch(s):
            try:
                return int(s), None
            except ValueError:  # beyond sys.get_int_max_str_digits()
                return None, f"number {_preview(s)} has too many digits"
        if _FLOAT_RE.fullmatch(s):
            number = float(s)
            if math.isfinite(number):
                return number, None
        return None, f"cannot read {_preview(text)} as a number"
    if type_name == "json":
        try:
            return json.loads(text), None
        except Exception as exc:  # JSONDecodeError, RecursionError on deep nesting, ...
            return None, f"invalid JSON {_preview(text)}: {exc.__class__.__name__}: {exc}"
    return None, f"unknown type {type_name!r}"


def _parse_attrs(source: str) -> dict[str, str]:
    attrs: dict[str, str] = {}
    for m in _ATTR_RE.finditer(source[:_MAX_ATTR_SOURCE]):
        name = m.group(1).lower()
        if name not in attrs:  # first wins, as in HTML
            value = m.group(2) if m.group(2) is not None else m.group(3)
            if value is None:
                value = m.group(4)
            attrs[name] = html.unescape(value)
    return attrs


# --------------------------------------------------------------------------- tokenizer


class _Doc:
    """The input tokenized once: tag tokens, their matching closes, opaque spans."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.opaque = self._opaque_spans(text)
        self.opaque_ends = [end for _, end, _ in self.opaque]
        self.kinds: list[int] = []
        self.names: list[str] = []
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.attr_sources: list[str] = []
        j, n_opaque = 0, len(self.opaque)
        for m in _TAG_RE.finditer(text):
            start = m.start()
            while j < n_opaque and self.opaque[j][1] <= start:
                j += 1
            if j < n_opaque and self.opaque[j][0] <= start:
                continue  # markup inside CDATA or a comment is text, not a tag
            slash, name, rest = m.groups()
            if slash:
                kind = _CLOSE
            elif rest.rstrip().endswith("/"):
                kind = _SELF
            else:
                kind = _OPEN
            self.kinds.append(kind)
            self.names.append(name.lower())
            self.starts.append(start)
            self.ends.append(m.end())
            self.attr_sources.append(rest)
        # Pair each close with the latest unclosed open of the same name (one stack per
        # name), so pairing is O(n) and a stray or missing close only affects its own name.
        self.match = [-1] * len(self.kinds)
        stacks: dict[str, list[int]] = {}
        for idx, kind in enumerate(self.kinds):
            if kind == _OPEN:
                stacks.setdefault(self.names[idx], []).append(idx)
            elif kind == _CLOSE:
                stack = stacks.get(self.names[idx])
                if stack:
                    self.match[stack.pop()] = idx
        self.end = self._content_end()

    @staticmethod
    def _opaque_spans(text: str) -> list[tuple[int, int, int]]:
        spans: list[tuple[int, int, int]] = []
        dead: set[int] = set()  # a kind with no terminator left cannot close again
        pos = 0
        while len(dead) < 2:
            m = _OPAQUE_START_RE.search(text, pos)
            if m is None:
                break
            kind = _CDATA if m.group() == "<![CDATA[" else _COMMENT
            if kind in dead:
                pos = m.end()
                continue
            terminator = "]]>" if kind == _CDATA else "-->"
            stop = text.find(terminator, m.end())
            if stop == -1:
                dead.add(kind)  # unterminated: leave it as ordinary text
                pos = m.end()
                continue
            spans.append((m.start(), stop + len(terminator), kind))
            pos = stop + len(terminator)
        return spans

    def _content_end(self) -> int:
        """End of the usable text: drops a closing code fence that wraps the whole reply.

        Only matters for an element left unclosed at the end, whose text would otherwise
        end in "```". Applied only when a fence also opens before the first tag, so a
        response that legitimately ends with its own code block is left alone.
        """
        text, end = self.text, len(self.text)
        if not self.starts:
            return end
        fences = list(_FENCE_LINE_RE.finditer(text))
        if len(fences) < 2 or fences[0].start() >= self.starts[0]:
            return end
        last = fences[-1]
        if (
            last.start() >= self.ends[-1]
            and _BARE_FENCE_RE.fullmatch(last.group())
            and not text[last.end() :].strip()
        ):
            return last.start()
        return end

    def decode(self, start: int, stop: int) -> str:
        """Text of [start, stop): comments dropped, CDATA unwrapped, entities decoded."""
        if start >= stop:
            return ""
        text, out, pos = self.text, [], start
        i = bisect.bisect_right(self.opaque_ends, start)
        while i < len(self.opaque) and self.opaque[i][0] < stop:
            o_start, o_end, kind = self.opaque[i]
            if o_start > pos:
                out.append(html.unescape(text[pos:o_start]))
            if kind == _CDATA:
                out.append(text[max(o_start + 9, pos) : min(o_end - 3, stop)])
            pos = max(pos, min(o_end, stop))
            i += 1
        if pos < stop:
            out.append(html.unescape(text[pos:stop]))
        return "".join(out)

    def own_text(self, start: int, stop: int, holes: list[tuple[int, int]]) -> str:
        if not holes:
            return self.decode(start, stop).strip()
        pieces, pos = [], start
        for h_start, h_end in holes:  # holes are sorted and disjoint
            pieces.append(self.decode(pos, h_start).strip())
            pos = max(pos, h_end)
        pieces.append(self.decode(pos, stop).strip())
        return "\n\n".join(p for p in pieces if p)


# --------------------------------------------------------------------------- extraction


@dataclass
class _Occurrence:
    open_idx: int
    lo: int  # token range of the content
    hi: int
    inner_start: int  # character range of the content
    inner_end: int
    outer_start: int
    outer_end: int
    closed: bool


def _scan_level(
    doc: _Doc,
    lo: int,
    hi: int,
    region_end: int,
    by_name: dict[str, TagSpec],
    primary: set[str],
) -> dict[str, list[_Occurrence]]:
    """Occurrences of the sibling tags in ``by_name`` within tokens [lo, hi).

    Tokens of other names are skipped, so tags wrapped in unknown markup are still found. A
    closed element's contents are jumped over (they belong to the next level); an unclosed
    one runs to the next opening tag of a ``primary`` sibling (of any sibling, for a
    non-primary "stray" tag) or to the end of the region.
    """
    found: dict[str, list[_Occurrence]] = {}
    kinds, names, starts, ends, match = doc.kinds, doc.names, doc.starts, doc.ends, doc.match
    i = lo
    while i < hi:
        if kinds[i] == _CLOSE or names[i] not in by_name:
            i += 1
            continue
        name = names[i]
        stops = primary if name in primary else by_name
        if kinds[i] == _SELF:
            occ = _Occurrence(i, i + 1, i + 1, ends[i], ends[i], starts[i], ends[i], True)
            nxt = i + 1
        elif lo <= match[i] < hi:
            m = match[i]
            occ = _Occurrence(i, i + 1, m, ends[i], starts[m], starts[i], ends[m], True)
            nxt = m + 1
        else:
            k = i + 1
            while k < hi and not (kinds[k] != _CLOSE and names[k] in stops):
                k += 1
            stop = starts[k] if k < hi else region_end
            occ = _Occurrence(i, i + 1, k, ends[i], stop, starts[i], stop, False)
            nxt = k
        found.setdefault(name, []).append(occ)
        i = nxt
    return found


def _extract_level(
    doc: _Doc,
    lo: int,
    hi: int,
    region_end: int,
    specs: Sequence[TagSpec],
    depth: int,
    prefix: str,
    errors: list[str],
    strays: Sequence[TagSpec] = (),
) -> tuple[dict[str, Node | list[Node]], list[tuple[int, int]]]:
    by_name: dict[str, TagSpec] = {}
    for spec in specs:
        by_name.setdefault(spec.tag.lower(), spec)  # duplicate siblings: first spec wins
    primary = set(by_name)
    for spec in strays:
        by_name.setdefault(spec.tag.lower(), spec)
    found = _scan_level(doc, lo, hi, region_end, by_name, primary)
    nodes: dict[str, Node | list[Node]] = {}
    holes: list[tuple[int, int]] = []
    for name, spec in by_name.items():
        path = prefix + spec.tag
        occs = found.get(name, [])
        holes.extend((o.outer_start, o.outer_end) for o in occs)
        if not occs:
            if not spec.optional:
                errors.append(f"{path}: required tag is missing")
            continue
        if spec.multiple:
            nodes[spec.tag] = [
                _build(doc, spec, occ, depth, f"{path}[{n}]", errors) for n, occ in enumerate(occs)
            ]
        else:
            # First complete occurrence wins: an unclosed earlier one is usually the tag
            # being mentioned in prose. Otherwise the first one.
            chosen = next((o for o in occs if o.closed), occs[0])
            nodes[spec.tag] = _build(doc, spec, chosen, depth, path, errors)
    holes.sort()
    return nodes, holes


def _build(
    doc: _Doc, spec: TagSpec, occ: _Occurrence, depth: int, path: str, errors: list[str]
) -> Node:
    attrs = _parse_attrs(doc.attr_sources[occ.open_idx])
    node = Node(
        tag=spec.tag,
        raw=doc.text[occ.inner_start : occ.inner_end].strip(),
        attrs=attrs,
        closed=occ.closed,
        span=(occ.outer_start, occ.outer_end),
    )
    problems: list[str] = []
    holes: list[tuple[int, int]] = []
    if spec.children:
        if depth >= MAX_DEPTH:
            problems.append(f"children deeper than {MAX_DEPTH} levels are not extracted")
        else:
            node.children, holes = _extract_level(
                doc, occ.lo, occ.hi, occ.inner_end, spec.children, depth + 1, path + ".", errors
            )
    node.text = doc.own_text(occ.inner_start, occ.inner_end, holes)

    declared = attrs.get("type")
    node.type = spec.default_type if declared is None else declared.strip().lower()
    if node.type not in KNOWN_TYPES:
        problems.append(f"unknown type {node.type!r} (known: {', '.join(KNOWN_TYPES)})")
    elif node.type not in spec.supported_types:
        problems.append(f"type {node.type!r} is not supported here")
    else:
        node.value, problem = _convert(node.text, node.type)
        if problem:
            problems.append(problem)

    if not spec.allow_empty and not node.text and not node.children:
        problems.append("empty content is not allowed")
    if spec.validator is not None:
        try:
            ok = bool(spec.validator(node.text))
        except Exception as exc:  # a user's validator must not break extraction
            problems.append(f"validator raised {exc.__class__.__name__}: {exc}")
        else:
            if not ok:
                problems.append("rejected by validator")
    if problems:
        node.error = "; ".join(problems)
        errors.extend(f"{path}: {p}" for p in problems)
    return node


def extract(text: str, specs: Sequence[TagSpec]) -> Extraction:
    """Extract the tags described by ``specs`` from ``text``.

    Never raises for a ``str``: problems (missing required tags, empty content, validator
    failures, unknown or unsupported types, conversion failures, truncation) are listed in
    ``errors``. Input beyond `MAX_INPUT_CHARS` is cut off; nesting beyond `MAX_DEPTH` is not
    followed. Tags match case-insensitively and may carry any other attributes. A repeated
    tag gives a list if its spec is ``multiple``; otherwise the first closed occurrence wins
    (the first occurrence if none is closed).
    """
    return _extract(text, specs)


def _extract(text: str, specs: Sequence[TagSpec], strays: Sequence[TagSpec] = ()) -> Extraction:
    if not isinstance(text, str):
        raise TypeError(f"text must be str, not {type(text).__name__}")
    result = Extraction()
    if len(text) > MAX_INPUT_CHARS:
        text = text[:MAX_INPUT_CHARS]
        result.truncated = True
        result.errors.append(f"input truncated to {MAX_INPUT_CHARS} characters")
    doc = _Doc(text)
    result.nodes, _ = _extract_level(
        doc, 0, len(doc.kinds), doc.end, tuple(specs), 1, "", result.errors, strays
    )
    return result


# --------------------------------------------------------------------------- custom specs

_SPEC_KEYS = ("tag", "optional", "allow_empty", "children", "supported_types", "multiple")


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def spec_from_json(data: object) -> tuple[TagSpec, ...]:
    """Validate a user-supplied custom spec (parsed JSON, or JSON text) into `TagSpec` trees.

    The spec is a list of objects with keys tag (required), optional, allow_empty, multiple
    (booleans), supported_types (list of known type names) and children (the same, nested).
    Raises `SpecError` naming the path of the first offending entry, e.g.
    ``[0].children[1].tag: ...``.
    """
    if isinstance(data, str | bytes):
        try:
            data = json.loads(data)
        except Exception as exc:  # JSONDecodeError, RecursionError, UnicodeDecodeError
            raise SpecError(f"spec: not valid JSON ({exc})") from None
    if isinstance(data, list) and not data:
        raise SpecError("spec: needs at least one tag")
    return _specs_from_list(data, "", 1, [0])


def _specs_from_list(items: object, path: str, depth: int, count: list[int]) -> tuple[TagSpec, ...]:
    if not isinstance(items, list):
        raise SpecError(
            f"{path or 'spec'}: expected an array of tag objects, got {_json_type(items)}"
        )
    specs: list[TagSpec] = []
    seen: dict[str, str] = {}
    for n, item in enumerate(items):
        where = f"{path}[{n}]"
        if depth > MAX_DEPTH:
            raise SpecError(f"{where}: nested deeper than {MAX_DEPTH} levels")
        count[0] += 1
        if count[0] > MAX_SPECS:
            raise SpecError(f"{where}: too many tags (at most {MAX_SPECS} in a spec)")
        if not isinstance(item, dict):
            raise SpecError(f"{where}: expected an object, got {_json_type(item)}")
        unknown = sorted(str(k) for k in item if k not in _SPEC_KEYS)
        if unknown:
            raise SpecError(
                f"{where}: unknown key {unknown[0]!r} (allowed: {', '.join(_SPEC_KEYS)})"
            )
        if "tag" not in item:
            raise SpecError(f"{where}.tag: required")
        tag = item["tag"]
        if not isinstance(tag, str):
            raise SpecError(f"{where}.tag: expected a string, got {_json_type(tag)}")
        if not _TAG_NAME_RE.fullmatch(tag):
            raise SpecError(
                f"{where}.tag: {_preview(tag)} is not a valid tag name (a letter or _ then up"
                " to 63 letters, digits, _ . -)"
            )
        if tag.lower() in seen:
            raise SpecError(f"{where}.tag: duplicate tag {tag!r} (also at {seen[tag.lower()]})")
        seen[tag.lower()] = where
        flags: dict[str, bool] = {}  # only the boolean fields of TagSpec
        for key in ("optional", "allow_empty", "multiple"):
            if key in item:
                if not isinstance(item[key], bool):
                    raise SpecError(
                        f"{where}.{key}: expected true or false, got {_json_type(item[key])}"
                    )
                flags[key] = item[key]
        types = KNOWN_TYPES
        if "supported_types" in item:
            types = _types_from_json(item["supported_types"], f"{where}.supported_types")
        children: tuple[TagSpec, ...] = ()
        if "children" in item:
            children = _specs_from_list(item["children"], f"{where}.children", depth + 1, count)
        specs.append(
            TagSpec(
                tag=tag,
                children=children,
                supported_types=types,
                optional=flags.get("optional", True),
                allow_empty=flags.get("allow_empty", True),
                multiple=flags.get("multiple", False),
            )
        )
    return tuple(specs)


def _types_from_json(value: object, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        raise SpecError(f"{where}: expected a non-empty array of type names")
    types: list[str] = []
    for n, name in enumerate(value):
        if not isinstance(name, str):
            raise SpecError(f"{where}[{n}]: expected a string, got {_json_type(name)}")
        if name not in KNOWN_TYPES:
            raise SpecError(
                f"{where}[{n}]: unknown type {_preview(name)} (known: {', '.join(KNOWN_TYPES)})"
            )
        if name in types:
            raise SpecError(f"{where}[{n}]: duplicate type {name!r}")
        types.append(name)
    return tuple(types)


# --------------------------------------------------------------------------- modes

_STOP_SIGNAL = TagSpec("stop_signal", supported_types=("boolean",))
_RESPONSE = TagSpec("response", optional=False)
_INTERACTIVE = TagSpec("interactive", optional=False, children=(_RESPONSE, _STOP_SIGNAL))
_THINK_PARTS = ("analysis", "plan", "reasoning")

STANDARD_SPEC: tuple[TagSpec, ...] = (TagSpec("think"), _INTERACTIVE)
ENHANCED_SPEC: tuple[TagSpec, ...] = (
    TagSpec("think", children=tuple(TagSpec(name) for name in _THINK_PARTS)),
    _INTERACTIVE,
)

# Looked for at the top level too, outside the mode's elements, because models drop the
# wrapper (`<response>` without `<interactive>`, `<analysis>` without `<think>`). They do not
# cut an unclosed mode element short: inside an unclosed `<interactive>` a `<response>` is
# its child, not a stray.
_STRAYS: dict[str, tuple[TagSpec, ...]] = {
    "standard": (TagSpec("response"), _STOP_SIGNAL),
    "enhanced": (*(TagSpec(name) for name in _THINK_PARTS), TagSpec("response"), _STOP_SIGNAL),
    "custom": (TagSpec("response"), _STOP_SIGNAL),
}


def mode_spec(mode: str, custom: Sequence[TagSpec] | None = None) -> tuple[TagSpec, ...]:
    """The tag spec of a mode; "custom" needs ``custom``. Raises ValueError otherwise."""
    if mode == "standard":
        return STANDARD_SPEC
    if mode == "enhanced":
        return ENHANCED_SPEC
    if mode == "custom":
        if not custom:
            raise ValueError("custom mode needs a spec (see spec_from_json)")
        return tuple(custom)
    raise ValueError(f"unknown thinking mode {mode!r} (expected one of {', '.join(MODES)})")


def _node_bool(node: Node | None) -> bool | None:
    if node is None:
        return None
    if isinstance(node.value, bool):
        return node.value
    return _parse_bool(node.text)  # e.g. type="string" or a misspelt type: still readable


def _walk(
    nodes: dict[str, Node | list[Node]], specs: Sequence[TagSpec], prefix: str = ""
) -> Iterator[tuple[str, TagSpec, Node]]:
    """(dotted spec path, spec, node) for every extracted node, depth first, in order."""
    for spec in specs:
        for node in _as_list(nodes.get(spec.tag)):
            path = prefix + spec.tag
            yield path, spec, node
            yield from _walk(node.children, spec.children, path + ".")


def _leaf_keys(specs: Sequence[TagSpec]) -> dict[str, str]:
    """Dotted leaf path -> flat key: the tag name, or the dotted path where names repeat."""
    paths: list[tuple[str, str]] = []

    def visit(level: Sequence[TagSpec], prefix: str) -> None:
        for spec in level:
            if spec.children:
                visit(spec.children, prefix + spec.tag + ".")
            else:
                paths.append((prefix + spec.tag, spec.tag))

    visit(specs, "")
    counts: dict[str, int] = {}
    for _, tag in paths:
        counts[tag.lower()] = counts.get(tag.lower(), 0) + 1
    return {path: tag if counts[tag.lower()] == 1 else path for path, tag in paths}


def parse_structured(
    text: str, mode: str = DEFAULT_MODE, custom: Sequence[TagSpec] | None = None
) -> StructuredReply:
    """Read a model reply in ``mode`` into a flat `StructuredReply`.

    ``parts``: standard -> {"thinking"}; enhanced -> whichever of analysis/plan/reasoning were
    found, plus "thinking" for text in ``<think>`` outside them; custom -> every extracted leaf
    tag (by tag name, or dotted path where a name repeats; repeats joined by a blank line)
    except response and stop_signal. ``response``/``stop_signal`` come from the mode's tree,
    else from a stray tag at the top level. Never raises for a ``str`` except ValueError for
    an unknown mode or a custom mode without ``custom``.
    """
    specs = mode_spec(mode, custom)
    top = {spec.tag.lower() for spec in specs}
    strays = tuple(s for s in _STRAYS[mode] if s.tag not in top)
    extraction = _extract(text, specs, strays)
    nodes = extraction.nodes
    reply = StructuredReply(mode=mode, errors=extraction.errors, found=bool(nodes))

    response: Node | None = None
    stop: Node | None = None
    if mode in ("standard", "enhanced"):
        think = _first(nodes.get("think"))
        interactive = _first(nodes.get("interactive"))
        if mode == "standard":
            if think is not None:
                reply.parts["thinking"] = think.text
        else:
            for name in _THINK_PARTS:
                part = think.get(name) if think is not None else None
                part = part or _first(nodes.get(name))
                if part is not None:
                    reply.parts[name] = part.text
            if think is not None and think.text:
                reply.parts["thinking"] = think.text
        if interactive is not None:
            response = interactive.get("response")
            stop = interactive.get("stop_signal")
    else:
        keys = _leaf_keys(specs)
        for path, spec, node in _walk(nodes, specs):
            name = spec.tag.lower()
            if name == "response":
                response = response or node
            elif name == "stop_signal":
                stop = stop or node
            elif not spec.children:
                key = keys[path]
                previous = reply.parts.get(key)
                reply.parts[key] = node.text if previous is None else f"{previous}\n\n{node.text}"
    response = response or _first(nodes.get("response"))
    stop = stop or _first(nodes.get("stop_signal"))
    reply.response = response.text if response is not None else None
    reply.stop_signal = _node_bool(stop)
    return reply


_STOP_SPEC = (TagSpec("stop_signal", multiple=True),)


def find_stop_signal(text: str) -> bool | None:
    """The stop signal anywhere in ``text`` (inside ``<interactive>`` or buried in prose).

    The last ``<stop_signal>`` whose content reads as a boolean wins: a reply that mentions
    the tag while reasoning states its actual decision at the end. None if there is none.
    """
    for node in reversed(extract(text, _STOP_SPEC).get_all("stop_signal")):
        flag = _node_bool(node)
        if flag is not None:
            return flag
    return None


# --------------------------------------------------------------------------- prompt text

_PLACEHOLDERS = {
    "think": "Your private thinking, as much as you need",
    "analysis": "What is being asked, what you know, what is missing",
    "plan": "The steps you will take next and why",
    "reasoning": "The chain of logic behind your conclusion",
    "response": "What the user should read",
    "stop_signal": "false",
}
_TYPE_PLACEHOLDERS = {"string": "…", "boolean": "false", "number": "0", "json": "{}"}


def _skeleton(specs: Sequence[TagSpec], lines: list[str], described: bool) -> None:
    for spec in specs:
        kind = spec.default_type
        attr = "" if kind == "string" else f' type="{kind}"'
        if spec.children:
            lines.append(f"<{spec.tag}{attr}>")
            _skeleton(spec.children, lines, described)
            lines.append(f"</{spec.tag}>")
        else:
            filler = _PLACEHOLDERS.get(spec.tag) if described else None
            filler = filler or _TYPE_PLACEHOLDERS[kind]
            lines.append(f"<{spec.tag}{attr}>{filler}</{spec.tag}>")


def render_format_instructions(
    mode: str = DEFAULT_MODE, custom: Sequence[TagSpec] | None = None
) -> str:
    """Prompt text asking a model to answer in ``mode``'s tag format (with a skeleton).

    The skeleton itself parses cleanly with `parse_structured` in the same mode.
    """
    specs = mode_spec(mode, custom)
    lines = ["Format your whole reply with these XML tags, in this order:", ""]
    _skeleton(specs, lines, described=mode != "custom")
    lines.append("")
    optional: list[str] = []
    repeatable: list[str] = []
    typed: list[str] = []
    has_stop = False
    for spec in iter_specs(specs):
        if spec.optional:
            optional.append(spec.tag)
        if spec.multiple:
            repeatable.append(spec.tag)
        if spec.default_type != "string":
            typed.append(f"{spec.tag} ({spec.default_type})")
        has_stop = has_stop or spec.tag.lower() == "stop_signal"
    if optional:
        lines.append(
            f"Optional tags (leave out if there is nothing to say): {', '.join(optional)}."
        )
    if repeatable:
        lines.append(f"Tags that may appear more than once: {', '.join(repeatable)}.")
    if typed:
        lines.append(f"Typed tags, write a plain value of that type: {', '.join(typed)}.")
    if has_stop:
        lines.append(
            "stop_signal: true when you are finished and need no further turn, otherwise false."
        )
    lines.append(
        "Close every tag you open. Write a literal less-than sign inside text as &lt; and an"
        " ampersand as &amp;."
    )
    return "\n".join(lines)


def iter_specs(specs: Sequence[TagSpec]) -> Iterator[TagSpec]:
    """Every spec in the tree, depth first."""
    for spec in specs:
        yield spec
        yield from iter_specs(spec.children)
