"""Model-written Markdown: rendered, then sanitized; citations linked only to real sources."""

from __future__ import annotations

import re

import pytest

from thinking.templatetags.thinking_extras import cited, stage_line


def render(text: str | None, sources: object = ()) -> str:
    return str(cited(text, sources))


PAYLOADS = [
    "<script>window.__xss=1</script>",
    '<img src=x onerror="window.__xss=1">',
    "[click](javascript:window.__xss=1)",
    '<a href="#" onclick="window.__xss=1">a</a>',
    "<iframe src=https://evil.example></iframe>",
    '<svg onload="window.__xss=1"></svg>',
    "![tracker](https://evil.example/pixel.png)",
    '<a href="data:text/html,<script>x</script>">d</a>',
    "<style>body{display:none}</style>",
]


ACTIVE = re.compile(
    r"<(script|img|svg|iframe|style|object|embed)\b"  # elements that run or load things
    r"|<[^>]*\son\w+\s*="  # event-handler attributes
    r"|<[^>]*\b(href|src)\s*=\s*[\"']?\s*(javascript|data|vbscript):",  # script URLs
    re.IGNORECASE,
)


@pytest.mark.parametrize("payload", PAYLOADS)
def test_payloads_are_inert(payload: str):
    html = render(f"Answer text. {payload} More text.")
    assert not ACTIVE.search(html), html
    assert "Answer text." in html


def test_markdown_formatting_is_kept():
    html = str(render("## Findings\n\n**Sleep** helps *memory*.\n\n- one\n- two\n\n`code`"))
    assert "Findings</h" in html
    assert "<strong>Sleep</strong>" in html and "<em>memory</em>" in html
    assert "<li>one</li>" in html and "<code>code</code>" in html


def test_only_existing_sources_are_linked():
    html = str(render("As shown [1] and [2], but not [7].", {1, 2}))
    assert '<a class="cite" href="#source-1"' in html and 'href="#source-2"' in html
    assert "[7]" in html and "#source-7" not in html


def test_citations_in_code_stay_as_written():
    html = str(render("Cite `[1]` like this [1].", {1}))
    assert "<code>[1]</code>" in html and 'href="#source-1"' in html


def test_web_links_are_kept_safely():
    html = str(render("See [the study](https://example.org/study)."))
    assert (
        'href="https://example.org/study"' in html and 'rel="noopener noreferrer nofollow"' in html
    )


def test_empty_and_huge_inputs_are_fine():
    assert str(render(None)).strip() == ""
    assert render("word " * 50_000).count("word") == 50_000


HOSTILE = "<img src=x onerror=alert(1)>\"'&"


def test_a_stage_line_escapes_every_value_it_shows():
    """A stage entry is the model's own report (or a row edited in the admin): every value,
    the stage in the class attribute included, shows as text."""
    item = {
        "stage": HOSTILE,
        "label": HOSTILE,
        "message": HOSTILE,
        "plan_step": HOSTILE,
        "total_steps": HOSTILE,
        "confidence": HOSTILE,
        "metadata": {HOSTILE: HOSTILE},
        "by": "model",
    }
    html = stage_line(item, "li")
    escaped = "&lt;img src=x onerror=alert(1)&gt;&quot;&#x27;&amp;"
    assert "<img" not in html and "\"'" not in html
    assert html.count(escaped) == 9  # the class and the badge, and the seven others
    assert html.startswith(f'<li class="progress-line stage-{escaped}">')
    assert html.endswith("reported by the model</span></li>")


def test_a_stage_line_shows_a_plain_entry_and_refuses_other_tags():
    html = stage_line({"stage": "analysis", "message": "Thinking about: x"}, "p")
    assert html == (
        '<p class="progress-line stage-analysis"><span class="badge">analysis</span>\n'
        '  <span class="stage-message">Thinking about: x</span></p>'
    )
    assert stage_line("not a mapping", "li") == (
        '<li class="progress-line stage-"><span class="badge"></span>\n'
        '  <span class="stage-message"></span></li>'
    )
    with pytest.raises(ValueError):
        stage_line({}, "script")
