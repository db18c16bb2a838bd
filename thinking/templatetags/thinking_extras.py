from __future__ import annotations

import html
from collections.abc import Container, Sequence
from typing import Any

import nh3
from django import template
from django.utils.safestring import SafeString, mark_safe
from markdown_it import MarkdownIt
from markdown_it.renderer import RendererHTML
from markdown_it.rules_core import StateCore
from markdown_it.token import Token

from thinking import formatting
from thinking.deliberation.citations import (
    LABELS,
    MARKS,
    check_map,
    find_citations,
    unsupported_in_answer,
)
from thinking.models import SubQuestion
from thinking.page import presenters
from thinking.web.export import reference_summary

register = template.Library()


register.filter("duration", formatting.duration)
register.filter("percent", formatting.percent)

STAGE_TAGS = ("p", "li")


@register.simple_tag
def stage_line(item: object, tag: str) -> SafeString:
    """One stage (seed 003) as a `tag` element: the loop's own, or the model's progress report
    with its extras (any key may be missing; an entry that is not a mapping shows empty).
    Python, not an included template: the plan region repeats it for each of the newest
    stages on every live update, so each value is escaped once (`_escaped`, as `escape` does)
    and the line marked safe once, rather than through a `format_html` per piece."""
    if tag not in STAGE_TAGS:
        raise ValueError(f"stage_line: tag must be one of {STAGE_TAGS}, not {tag!r}")
    item = item if isinstance(item, dict) else {}
    stage = _escaped(item.get("stage") or "")
    parts = [f'<span class="badge">{stage}</span>']
    if item.get("label"):
        parts.append(f'<strong class="stage-label">{_escaped(item["label"])}</strong>')
    parts.append(f'<span class="stage-message">{_escaped(item.get("message") or "")}</span>')
    if item.get("plan_step"):
        total = item.get("total_steps")
        of = f" of {_escaped(total)}" if total else ""
        parts.append(f'<span class="stage-step">step {_escaped(item["plan_step"])}{of}</span>')
    if item.get("confidence"):
        parts.append(
            f'<span class="stage-confidence">confidence: {_escaped(item["confidence"])}</span>'
        )
    metadata = item.get("metadata")
    if isinstance(metadata, dict) and metadata:
        pairs = "; ".join(f"{_escaped(key)}: {_escaped(value)}" for key, value in metadata.items())
        parts.append(f'<span class="stage-meta">{pairs}</span>')
    if item.get("by") == "model":
        parts.append('<span class="by">reported by the model</span>')
    inner = "\n  ".join(parts)
    # Every stored value in the line was escaped above.
    return mark_safe(f'<{tag} class="progress-line stage-{stage}">{inner}</{tag}>')  # noqa: S308


def _escaped(value: object) -> str:
    """A stored value as HTML text: escaped as Django's `escape` does (`html.escape`)."""
    return html.escape(str(value))


@register.filter
def level(value: float | None) -> str:
    """A word for a confidence, for colour and for screen readers."""
    if value is None:
        return "unknown"
    value = float(value)
    if value >= 0.75:
        return "high"
    if value >= 0.5:
        return "medium"
    return "low"


_PART_ORDER = ("analysis", "plan", "reasoning", "thinking")


@register.filter
def part_items(parts: dict[str, str] | None) -> list[tuple[str, str]]:
    """A thought's structured parts in reading order, with labels: analysis, plan, reasoning,
    then any custom parts."""
    if not parts:
        return []
    ordered = [name for name in _PART_ORDER if name in parts]
    ordered += sorted(name for name in parts if name not in _PART_ORDER)
    return [
        (name.replace("_", " ").replace(".", " / ").capitalize(), parts[name]) for name in ordered
    ]


_LINK_SCHEMES = ("http://", "https://")


def _validate_link(url: str) -> bool:
    """Only web links from model text; javascript:, data:, relative paths stay plain text."""
    return url.strip().lower().startswith(_LINK_SCHEMES)


def _link_citations(state: StateCore) -> None:
    """Turn every citation form ([n], [1, 4], [1][4], [2-3]; thinking/deliberation/citations.py) in
    plain text into links to the sources the page has, each as [n]; a number with no source stays
    plain text. A citation the checker judged carries its verdict's mark."""
    numbers = state.env.get("source_numbers") or ()
    checks = state.env.get("checks") or {}
    seen: dict[int, int] = state.env.setdefault("seen", {})
    for block in state.tokens:
        if block.type != "inline" or not block.children:
            continue
        tokens: list[Token] = []
        depth = 0  # inside a model-written link: no nested citation links
        for token in block.children:
            depth += {"link_open": 1, "link_close": -1}.get(token.type, 0)
            if token.type != "text" or depth or "[" not in token.content:
                tokens.append(token)
                continue
            text, pos = token.content, 0
            for citation in find_citations(text):
                if citation.start > pos:
                    tokens.append(_text(text[pos : citation.start]))
                for index, number in enumerate(citation.numbers):
                    occurrence = seen.get(number, 0)
                    seen[number] = occurrence + 1
                    if index:
                        tokens.append(_text(", "))
                    if number not in numbers:
                        tokens.append(_text(f"[{number}]"))
                        continue
                    tokens += _citation_link(number, checks.get((number, occurrence)))
                pos = citation.end
            if pos < len(text):
                tokens.append(_text(text[pos:]))
        block.children = tokens


def _citation_link(number: int, check: tuple[str, str] | None) -> list[Token]:
    opening = Token("link_open", "a", 1)
    opening.attrs = {"class": "cite", "href": f"#source-{number}"}
    label = f"[{number}]"
    if check is not None:
        verdict, why = check
        opening.attrs["class"] = f"cite verdict-{verdict}"
        opening.attrs["title"] = f"Source {number}: {LABELS.get(verdict, verdict)}" + (
            f". {why}" if why else ""
        )
        label += MARKS.get(verdict, "")
    return [opening, _text(label), Token("link_close", "a", -1)]


def _text(content: str) -> Token:
    token = Token("text", "", 0)
    token.content = content
    return token


def _render_link_open(
    renderer: RendererHTML, tokens: Sequence[Token], idx: int, options: Any, env: Any
) -> str:
    token = tokens[idx]
    # A web page the model named (not one of our citation links): leave the app safely.
    if not str(token.attrGet("class") or "").startswith("cite"):
        token.attrSet("rel", "noopener noreferrer nofollow")
        token.attrSet("target", "_blank")
    return renderer.renderToken(tokens, idx, options, env)


def _markdown() -> MarkdownIt:
    # html=False: raw HTML in model or web text is shown as text, never parsed. Images are
    # off so model text cannot make the browser fetch anything.
    md = MarkdownIt("commonmark", {"html": False, "breaks": True})
    md.enable(["table", "strikethrough"]).disable("image")
    # markdown-it-py documents replacing validateLink; the stubs see only a method.
    md.validateLink = _validate_link  # type: ignore[method-assign]
    md.core.ruler.push("citations", _link_citations)
    md.add_render_rule("link_open", _render_link_open)
    return md


_MARKDOWN = _markdown()
SAFE_TAGS = {
    "p", "br", "strong", "em", "code", "pre", "blockquote", "ul", "ol", "li", "a", "hr",
    "h1", "h2", "h3", "h4", "h5", "h6", "table", "thead", "tbody", "tr", "th", "td", "s", "del",
}  # fmt: skip


@register.filter
def cited(text: str | None, numbers: Container[int] | None) -> SafeString:
    """Model text as Markdown, with [n] linked to source n when that source exists.

    The renderer escapes all text and has raw HTML off, so the only markup in the result is
    Markdown's own and links to http(s) pages or to a source number we generated. A citation
    with no such source stays plain text.
    """
    return _render_cited(text, numbers, {})


def _render_cited(
    text: str | None, numbers: Container[int] | None, checks: dict[tuple[int, int], Any]
) -> SafeString:
    html = _MARKDOWN.render(
        str(text or ""), {"source_numbers": numbers or (), "checks": checks, "seen": {}}
    )
    # Defence in depth: whatever the renderer let through, the maintained sanitizer keeps
    # only formatting and links to http(s) pages or our own sources.
    html = nh3.clean(
        html,
        tags=SAFE_TAGS,
        attributes={"a": {"href", "target", "title"}, "th": {"style"}, "td": {"style"}},
        allowed_classes={"a": CITE_CLASSES},
        url_schemes={"http", "https"},
        link_rel="noopener noreferrer nofollow",
        filter_style_properties={"text-align"},
    )
    return mark_safe(html)  # noqa: S308 - escaped by markdown-it, then sanitized by nh3


CITE_CLASSES = {"cite", *(f"verdict-{v}" for v in MARKS)}


@register.simple_tag
def cited_checked(synthesis: Any, numbers: Container[int] | None) -> SafeString:
    """A synthesis's text like `cited`, each checked citation marked with its verdict."""
    if synthesis is None:
        return mark_safe("")
    return _render_cited(synthesis.text, numbers, check_map(synthesis.citation_checks.all()))


@register.simple_tag
def final_synthesis(session: Any) -> Any:
    """The synthesis that is the session's final answer, if any."""
    return session.syntheses.filter(is_final=True).order_by("-sequence").first()


@register.simple_tag(name="reference_summary")
def reference_summary_tag(session: Any) -> list[dict[str, Any]]:
    """Per search tool: searches, new sources and known ones found again (export.py)."""

    return reference_summary(session)


@register.simple_tag
def unsupported_claims(session: Any) -> list[Any]:
    return unsupported_in_answer(session)


@register.filter
def web_href(url: str | None) -> str:
    """A link target only for http(s) URLs; anything else (javascript:, data:) is dropped."""
    url = (url or "").strip()
    return url if url.lower().startswith(("http://", "https://")) else ""


@register.filter
def question_tree(questions: list[SubQuestion]) -> list[dict[str, Any]]:
    """Sub-questions nested under the one they were asked about (see presenters)."""
    return presenters.sub_question_tree(list(questions))


@register.inclusion_tag("thinking/_sparkline.html")
def sparkline(values: list[float] | None) -> dict[str, Any]:
    """A session's confidence evolution as a small inline SVG line."""
    return {"spark": presenters.sparkline(list(values or [])), "values": list(values or [])}
