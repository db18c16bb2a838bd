"""Template source rules whose breach a person would see on the page."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings

TEMPLATE_DIRS = [Path(d) for t in settings.TEMPLATES for d in t["DIRS"]]


def test_no_template_comment_spans_lines():
    # Django's {# #} comment is one line only: one that goes on to the next line is printed
    # on the page as text ({% comment %} is the multi-line form).
    broken = []
    for folder in TEMPLATE_DIRS:
        for path in sorted(folder.rglob("*.html")):
            for number, line in enumerate(path.read_text().splitlines(), 1):
                start = line.find("{#")
                if start != -1 and "#}" not in line[start:]:
                    broken.append(f"{path.relative_to(folder)}:{number}")
    assert TEMPLATE_DIRS and not broken, broken
