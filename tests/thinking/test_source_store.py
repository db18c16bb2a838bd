"""What the research store keeps of each search, called as the loop and the tools call it
(issue 16: mutants of thinking/deliberation/evidence.py's stores that no session test noticed)."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import async_to_sync

from research.memory import MemoryResult
from research.web import WebResult
from thinking.deliberation import evidence
from thinking.models import LeaseLost, Source, Status, ThinkingSession
from thinking.web import export

pytestmark = pytest.mark.django_db

WORKER = "w1"


def held(make_session: Any, **fields: Any) -> ThinkingSession:
    """A session this test's worker is running."""
    fields.setdefault("status", Status.THINKING)
    return make_session(worker_id=WORKER, **fields)


def web(url: str, title: str = "Page", passage: str = "Text.") -> WebResult:
    return WebResult(url, title, "", "", 0.5, None, "q", passage)


def store(session: ThinkingSession, kind: str, results: list[Any], **kwargs: Any) -> list[Source]:
    kwargs.setdefault("worker_id", WORKER)
    query = kwargs.pop("query", "why is the sky blue")
    found = [evidence.Found(kind, query, results)]
    return async_to_sync(evidence.store_found)(session.pk, found, **kwargs)


def test_citation_numbers_run_on_across_searches_and_kinds(make_session: Any):
    session = held(make_session)
    first = store(session, "web", [web("https://a.org/"), web("https://b.org/")])
    memory = MemoryResult(4, "Lab notes", "We measured it.", "", "note", 1.0)
    second = store(session, "memory", [memory])
    third = store(session, "web", [web("https://c.org/")])
    assert [s.number for s in [*first, *second, *third]] == [1, 2, 3, 4]
    assert [s.kind for s in session.sources.order_by("number")] == ["web", "web", "memory", "web"]


def test_a_page_found_again_keeps_its_number_and_is_reported_once(make_session: Any):
    session = held(make_session)
    store(session, "web", [web("https://a.org/"), web("https://b.org/")])
    again: list[int] = []
    new = store(
        session,
        "web",
        [
            web("https://b.org/"),
            web("https://d.org/"),
            web("https://b.org/"),
            web("https://a.org/"),
        ],
        again=again,
    )
    assert [(s.number, s.url) for s in new] == [(3, "https://d.org/")]
    assert again == [2, 1]  # the model is told which sources it already has, each once
    assert session.sources.count() == 3


def test_a_page_found_twice_in_one_search_is_stored_once(make_session: Any):
    session = held(make_session)
    store(session, "web", [web("https://a.org/")])
    again: list[int] = []
    new = store(
        session,
        "web",
        [web("https://b.org/"), web("https://b.org/", "Same page"), web("https://a.org/")],
        again=again,
    )
    assert [(s.number, s.title) for s in new] == [(2, "Page")]
    # The model is told of [2] once, as new, and of [1] as found again.
    assert again == [1]


def test_each_search_tool_has_its_own_tally_of_searches_and_sources(make_session: Any):
    session = held(make_session)
    store(session, "web", [web("https://a.org/"), web("https://b.org/")])
    store(session, "web", [web("https://a.org/"), web("https://c.org/")], found_by="web_search")
    store(session, "web", [web("https://c.org/")], found_by="web_search")
    session.refresh_from_db()
    # What the download's "References" section says.
    rows = export.reference_summary(session)
    assert [(r["tool"], r["searches"], r["new"], r["known"]) for r in rows] == [
        ("plan", 1, 2, 0),
        ("web_search", 2, 1, 2),
    ]  # fmt: skip
    assert list(
        session.sources.order_by("number").values_list("found_by", "query")
    ) == [
        ("plan", "why is the sky blue"),
        ("plan", "why is the sky blue"),
        ("web_search", "why is the sky blue"),
    ]  # fmt: skip


def test_a_search_with_nothing_new_still_counts_as_a_search(make_session: Any):
    session = held(make_session)
    assert store(session, "web", []) == []
    session.refresh_from_db()
    assert session.search_tally == {"plan": {"searches": 1, "new": 0, "known": 0}}


def test_long_fields_are_clipped_to_what_the_page_shows(make_session: Any):
    session = held(make_session)
    url = "https://a.org/" + "p" * 2100
    result = web(url, title="T" * 600, passage="word " * 400)
    [source] = store(session, "web", [result], query="q" * 1200)
    source.refresh_from_db()
    assert source.title == "T" * 499 + "…"
    assert source.url == url[:2000] and source.key == url[:2000]
    assert len(source.snippet) == evidence.MAX_SNIPPET_CHARS and source.snippet.endswith("…")
    assert source.query == "q" * 1000


def test_a_result_without_a_title_is_named_by_its_link_else_untitled(make_session: Any):
    session = held(make_session)
    untitled = MemoryResult(4, "", "A note.", "", "note", 1.0)
    stored = store(session, "web", [web("https://a.org/x", title="")])
    stored += store(session, "memory", [untitled])
    assert [s.title for s in stored] == ["https://a.org/x", "Untitled"]


def test_a_worker_that_lost_the_session_stores_no_sources(make_session: Any):
    session = held(make_session)
    with pytest.raises(LeaseLost):
        store(session, "web", [web("https://a.org/")], worker_id="w-gone")
    session.refresh_from_db()
    assert not session.sources.exists() and session.search_tally == {}


def note(session: ThinkingSession, text: str) -> list[str]:
    async_to_sync(evidence.store_found)(session.pk, [], worker_id=WORKER, notes=[text])
    session.refresh_from_db()
    return session.research_notes


def test_a_research_note_is_shown_once_and_the_twenty_newest_are_kept(make_session: Any):
    session = held(make_session, research_notes=[f"Note {n}" for n in range(20)])
    assert note(session, "Web search failed.")[-2:] == ["Note 19", "Web search failed."]
    assert len(session.research_notes) == 20 and session.research_notes[0] == "Note 1"
    assert note(session, "Web search failed.").count("Web search failed.") == 1


def test_a_worker_that_lost_the_session_adds_no_note(make_session: Any):
    session = held(make_session)
    with pytest.raises(LeaseLost):
        async_to_sync(evidence.store_found)(
            session.pk, [], worker_id="w-gone", notes=["Search failed."]
        )
    session.refresh_from_db()
    assert session.research_notes == []
