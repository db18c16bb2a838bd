from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.test import Client
from markdown_it import MarkdownIt

from accounts.tokens import create_token
from tests.helpers import record_call
from thinking.models import (
    CompletionReason,
    ModelCall,
    Source,
    Status,
    SubQuestion,
    Synthesis,
    ThinkingSession,
    Thought,
)
from thinking.web.export import session_document, session_markdown

pytestmark = pytest.mark.django_db

SIGNATURE = "EqQBCkYIARgCKkBsignature-that-must-never-leave-the-server"


@pytest.fixture
def finished(make_session: Any) -> ThinkingSession:
    """A completed session with something of everything, and a model call whose stored
    content carries a thinking signature."""
    session = make_session(
        question="Why do we dream?",
        status=Status.COMPLETED,
        completion_reason=CompletionReason.BUDGET,
        completion_note="The budget ran out.",
        active_seconds=60.0,
        cycles=3,
        confidence_evolution=[0.4, 0.75],
        final_answer="Memory consolidation [1] and threat simulation [2]; see also [9].",
        final_confidence=0.75,
        model_id="claude-opus-5-5",
        plan={"steps": ["survey", "weigh"], "current": 1, "source": "model"},
        worker_id="worker-secret-lease",
    )
    root = SubQuestion.objects.create(
        session=session, text="What does REM do?", priority=5, explored=True, answer="Replays."
    )
    SubQuestion.objects.create(
        session=session, text="Which memories?", priority=3, parent=root, why="Detail."
    )
    SubQuestion.objects.create(session=session, text="Do animals dream?", priority=4)
    for seq, (kind, text) in enumerate(
        [
            ("exploration", "Dreams replay memories [1]."),
            ("critique", "<script>alert('x')</script> is not evidence."),
            ("insight", "Both theories fit [2]. [evil](javascript:alert(1))"),
        ]
    ):
        Thought.objects.create(
            session=session,
            sequence=seq,
            cycle=seq,
            text=text,
            type=kind,
            confidence=0.5 + seq / 10,
            time_offset_seconds=seq * 10.0,
            parts={"analysis": "a"},
            reasoning="Let me think." if seq == 0 else "",
            sub_question=root if seq == 0 else None,
        )
    Synthesis.objects.create(
        session=session,
        sequence=0,
        text="So far: consolidation [1].",
        key_insights=["REM replays"],
        confidence=0.4,
        remaining_questions=["Animals?"],
        time_offset_seconds=30.0,
    )
    Synthesis.objects.create(
        session=session,
        sequence=1,
        text="Memory consolidation [1] and threat simulation [2].",
        confidence=0.75,
        time_offset_seconds=60.0,
        is_final=True,
    )
    Source.objects.create(
        session=session,
        number=1,
        kind="web",
        title="Sleep and memory",
        url="https://example.org/sleep?a=1&b=(2)",
        snippet="REM sleep...",
        score=0.9,
        query="dreams memory",
        key="https://example.org/sleep",
    )
    Source.objects.create(
        session=session,
        number=2,
        kind="memory",
        title="My notes <b>on threat</b>",
        key="item-7",
    )
    record_call(session, model="claude-opus-5-5", input_tokens=1200, output_tokens=300)
    ModelCall.objects.filter(session=session).update(
        thinking_mode="adaptive",
        content=[
            {"type": "thinking", "thinking": "Let me think.", "signature": SIGNATURE},
            {"type": "text", "text": "..."},
        ],
    )
    return session


# --- JSON --------------------------------------------------------------------------------


def test_the_json_document_has_every_stored_row(finished: ThinkingSession):
    doc = session_document(finished)
    assert [t["sequence"] for t in doc["thoughts"]] == [0, 1, 2]
    assert [s["sequence"] for s in doc["syntheses"]] == [0, 1]
    assert [s["number"] for s in doc["sources"]] == [1, 2]
    assert {q["id"] for q in doc["sub_questions"]} == set(
        finished.sub_questions.values_list("pk", flat=True)
    )
    child = next(q for q in doc["sub_questions"] if q["text"] == "Which memories?")
    assert child["parent"] == "What does REM do?"
    assert child["parent_id"] == finished.sub_questions.get(text="What does REM do?").pk
    assert doc["thoughts"][0]["sub_question_id"] == child["parent_id"]
    assert doc["sources"][0] == {
        "number": 1,
        "kind": "web",
        "title": "Sleep and memory",
        "url": "https://example.org/sleep?a=1&b=(2)",
        "snippet": "REM sleep...",
        "score": 0.9,
        "query": "dreams memory",
        "found_by": "plan",
        "created_at": doc["sources"][0]["created_at"],
    }
    assert doc["plan"] == {"steps": ["survey", "weigh"], "current": 1, "source": "model"}
    assert len(doc["model_calls"]) == 1 and doc["model_calls"][0]["input_tokens"] == 1200
    assert doc["usage"]["estimated_cost_usd"] == pytest.approx(0.0108)
    assert doc["model_calls"][0]["cost_usd"] == pytest.approx(0.0108)
    assert doc["usage"]["by_model"] == [
        {
            "model": "claude-opus-5-5",
            "calls": 1,
            "input_tokens": 1200,
            "output_tokens": 300,
            "cache_read_tokens": 0,
            "cache_write_tokens": 0,
            "total_tokens": 1500,
            "cost_usd": 0.0108,
        }
    ]


def test_the_json_document_is_json(finished: ThinkingSession):
    assert json.loads(json.dumps(session_document(finished)))["id"] == str(finished.pk)


def test_the_json_document_keeps_the_fields_the_cli_promised(finished: ThinkingSession):
    promised = {
        "id",
        "status",
        "completion_reason",
        "question",
        "thoughts",
        "sub_questions",
        "syntheses",
        "final_answer",
        "final_confidence",
        "confidence_evolution",
        "usage",
    }
    assert promised <= set(session_document(finished))


def test_nothing_server_private_is_exported(finished: ThinkingSession):
    text = json.dumps(session_document(finished)) + session_markdown(finished)
    assert SIGNATURE not in text
    assert "worker-secret-lease" not in text
    assert '"content"' not in text


def test_no_api_response_carries_a_signature(finished: ThinkingSession, alice: Any):
    api = Client(headers={"Authorization": f"Bearer {create_token(alice, 't')[1]}"})
    base = f"/api/sessions/{finished.pk}"
    routes = [
        "/api/sessions",
        base,
        f"{base}/thoughts",
        f"{base}/sub-questions",
        f"{base}/syntheses",
        f"{base}/sources",
        f"{base}/export",
        f"{base}/export?format=md",
    ]
    for route in routes:
        response = api.get(route)
        assert response.status_code == 200, route
        assert SIGNATURE.encode() not in response.getvalue(), route
    response = api.post(f"{base}/cancel")  # 409, with the session's reason
    assert SIGNATURE.encode() not in response.content


def test_the_api_export_is_the_cli_document(finished: ThinkingSession):
    # `think --json` prints session_document (test_cli.py); the export is the same document.
    browser = Client()
    browser.force_login(finished.owner)
    body = json.loads(browser.get(f"/api/sessions/{finished.pk}/export").getvalue())
    assert body == json.loads(json.dumps(session_document(finished)))


# --- Markdown ----------------------------------------------------------------------------


def test_the_report_has_the_answer_with_linked_citations(finished: ThinkingSession):
    report = session_markdown(finished)
    assert report.startswith("# Why do we dream?\n")
    assert "**Confidence: 75%**" in report
    # [1] and [2] are real sources: links via the definitions; [9] is not: plain text.
    assert "Memory consolidation [1] and threat simulation [2]; see also \\[9\\]." in report
    assert "\n[1]: <https://example.org/sleep?a=1&b=(2)>" in report
    assert "\n[2]:" not in report  # a knowledge-base note has no URL to link


def test_the_report_lists_the_references_with_their_numbers(finished: ThinkingSession):
    report = session_markdown(finished)
    references = report.split("## References")[1].split("##")[0]
    assert "- \\[1\\] [Sleep and memory](<https://example.org/sleep?a=1&b=(2)>) (web)" in references
    assert "- \\[2\\] My notes &lt;b>on threat&lt;/b> (knowledge base)" in references


def test_the_report_has_the_synthesis_timeline(finished: ThinkingSession):
    report = session_markdown(finished)
    timeline = report.split("## Synthesis timeline")[1].split("\n## ")[0]
    assert "Confidence: 40% → 75%" in timeline
    assert "### 1. Synthesis at 0:30 · confidence 40%" in timeline
    assert "### 2. Final synthesis at 1:00 · confidence 75%" in timeline
    assert "- REM replays" in timeline and "- Animals?" in timeline


def test_the_report_has_the_sub_question_tree(finished: ThinkingSession):
    report = session_markdown(finished)
    tree = report.split("## Sub-questions")[1].split("\n## ")[0]
    assert tree.strip().splitlines() == [
        "- **P5** What does REM do? · explored",
        "  - *Answer:* Replays.",
        "  - **P3** Which memories?",
        "- **P4** Do animals dream?",
    ]


def test_the_report_has_thinking_stats(finished: ThinkingSession):
    stats = session_markdown(finished).split("## Thinking stats")[1].split("\n## ")[0]
    assert "- Thoughts: 3 (exploration 1, critique 1, insight 1)" in stats
    assert "- Active thinking time: 1:00 of 1:00" in stats
    assert "- Tokens: 1500 (input 1200, output 300" in stats
    assert "- Estimated cost: $0.0108" in stats
    assert "  - claude-opus-5-5: 1 call, 1500 tokens, $0.0108" in stats
    assert "- Completion: Time budget used. The budget ran out." in stats


def test_html_in_model_text_is_neutralised(finished: ThinkingSession):
    report = session_markdown(finished)
    assert "<script>" not in report
    assert "&lt;script>alert('x')&lt;/script> is not evidence." in report
    assert "<b>" not in report


def test_links_in_model_text_are_not_links(finished: ThinkingSession):
    report = session_markdown(finished)
    # Escaped brackets render as themselves: text, not a link.
    assert not re.search(r"(?<!\\)\]\(javascript:", report)
    assert "\\[evil\\](javascript:alert(1))" in report


@pytest.mark.parametrize(
    "text",
    [
        "[1](javascript:alert(1))",
        "[1]: javascript:alert(1)",
        "\\[1](javascript:alert(1))",
        "![x](https://tracker.example/pixel)",
        "<img src=x onerror=alert(1)>",
        "<javascript:alert(1)>",
    ],
)
def test_model_text_cannot_make_links_images_or_html(finished: ThinkingSession, text: str):
    finished.final_answer = text
    answer = session_markdown(finished).split("## Answer")[1].split("## References")[0]
    assert "](" not in answer.replace("\\](", "")
    assert "<" not in answer
    assert "[1]:" not in answer


def permissive_html(markdown: str) -> str:
    """Render like the least careful CommonMark renderer: raw HTML on, any link scheme."""
    renderer = MarkdownIt("commonmark", {"html": True})
    renderer.validateLink = lambda url: True
    return renderer.render(markdown)


def test_the_rendered_report_links_only_to_sources(finished: ThinkingSession):
    finished.final_answer += " [1](javascript:alert(1)) <img src=x onerror=alert(1)>"
    html = permissive_html(session_markdown(finished))
    hrefs = re.findall(r'href="([^"]*)"', html)
    assert len(hrefs) >= 3  # the answer's [1], the reference's title, the timeline's [1]
    assert set(hrefs) == {"https://example.org/sleep?a=1&amp;b=(2)"}
    assert "<script" not in html and "<img" not in html and "<b>" not in html
    assert "&lt;script&gt;alert('x')&lt;/script&gt; is not evidence." in html


def test_a_source_url_that_is_not_http_is_not_linked(finished: ThinkingSession):
    Source.objects.filter(number=1).update(url="javascript:alert(1)")
    report = session_markdown(finished)
    references = report.split("## References")[1].split("\n## ")[0]
    assert "- \\[1\\] Sleep and memory (web)" in references
    assert "javascript:" not in references
    assert "\n[1]:" not in report


def test_an_unfinished_session_says_so(make_session: Any):
    report = session_markdown(make_session(status=Status.THINKING))
    assert "*No final answer (thinking).*" in report
    assert "*No sources.*" in report and "*No sub-questions.*" in report


# --- at length (issue 67) -------------------------------------------------------------


def test_the_report_carries_the_plan_the_stages_and_the_research_notes(
    finished: ThinkingSession,
):
    from thinking.models import Stage

    ThinkingSession.objects.filter(pk=finished.pk).update(
        plan={
            "steps": ["Survey the <b>theories</b>", "Weigh them"],
            "current": 1,
            "terms": ["REM", "memory"],
            "web_queries": ["why do we dream [1](javascript:x)"],
            "source": "model",
        },
        research_notes=["Web search for 'dreams' failed: timed out"],
        stage_count=2,
    )
    Stage.objects.create(
        session=finished, sequence=1,
        entry={"stage": "planning", "label": "Planning", "message": "Planning the research",
               "at": "0:01"},
    )  # fmt: skip
    Stage.objects.create(
        session=finished, sequence=2,
        entry={"stage": "note", "label": "Note", "message": "<img src=x> found two camps"},
    )  # fmt: skip
    finished.refresh_from_db()
    report = session_markdown(finished)
    document = session_document(finished)

    plan = report.split("## Research plan")[1].split("\n## ")[0]
    assert "1. Survey the &lt;b>theories&lt;/b>" in plan and "2. Weigh them" in plan
    assert "Key terms: REM; memory" in plan
    assert "Web queries: why do we dream \\[1\\](javascript:x)" in plan
    assert "- Web search for 'dreams' failed: timed out" in plan
    assert document["research_notes"] == ["Web search for 'dreams' failed: timed out"]

    history = report.split("## Stages")[1].split("\n## ")[0]
    assert [line for line in history.splitlines() if line.startswith("- ")] == [
        "- 0:01 · **Planning**: Planning the research",
        "- **Note**: &lt;img src=x> found two camps",
    ]
    assert [s["message"] for s in document["stages"]] == [
        "Planning the research", "<img src=x> found two camps",
    ]  # fmt: skip
    assert "<img" not in report


@pytest.fixture
def five_thousand(alice: Any) -> ThinkingSession:
    from bench.long_session import build

    return build(alice, thoughts=5000, sources=500, sub_questions=50)


@pytest.mark.parametrize("fmt", ["json", "md"])
def test_a_long_sessions_export_streams_and_is_never_held_whole(
    five_thousand: ThinkingSession, fmt: str
):
    import tracemalloc

    browser = Client()
    browser.force_login(five_thousand.owner)
    response = browser.get(f"/api/sessions/{five_thousand.pk}/export?format={fmt}")
    assert response.status_code == 200 and response.streaming
    assert response["Content-Disposition"].endswith(f'.{fmt}"')

    def peak_while(read: Any) -> tuple[int, int, int]:
        tracemalloc.start()
        try:
            size, parts = read()
            return size, parts, tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    def streaming() -> tuple[int, int]:
        size = parts = 0
        for part in response.streaming_content:
            size, parts = size + len(part), parts + 1
        return size, parts

    def whole() -> tuple[int, int]:
        if fmt == "json":
            return len(json.dumps(session_document(five_thousand)).encode()), 1
        return len(session_markdown(five_thousand).encode()), 1

    size, parts, peak = peak_while(streaming)
    whole_size, _, whole_peak = peak_while(whole)
    assert parts > 10 and size == whole_size and size > 1_000_000
    # The whole export is megabytes; a stream holds a chunk of rows at a time.
    assert peak < whole_peak / 3, (peak, whole_peak)


def test_the_streamed_json_is_the_document(five_thousand: ThinkingSession):
    browser = Client()
    browser.force_login(five_thousand.owner)
    body = json.loads(browser.get(f"/api/sessions/{five_thousand.pk}/export").getvalue())
    assert body == json.loads(json.dumps(session_document(five_thousand)))
    assert [t["sequence"] for t in body["thoughts"]] == list(range(5000))
    markdown = browser.get(f"/api/sessions/{five_thousand.pk}/export?format=md").getvalue()
    assert markdown.decode() == session_markdown(five_thousand)


@pytest.mark.django_db(transaction=True)
async def test_under_asgi_the_export_streams_without_being_read_whole_first(
    finished: ThinkingSession,
):
    import warnings

    from asgiref.sync import sync_to_async
    from django.test import AsyncClient

    browser = AsyncClient()
    await browser.aforce_login(await sync_to_async(lambda: finished.owner)())
    with warnings.catch_warnings():
        # Django warns when it must read a plain iterator whole to serve it under ASGI.
        warnings.simplefilter("error")
        response = await browser.get(f"/api/sessions/{finished.pk}/export?format=md")
        assert response.streaming and response.is_async
        body = b"".join([part async for part in response.streaming_content])
    assert body.startswith(b"# Why do we dream?\n") and b"## Thoughts" in body
