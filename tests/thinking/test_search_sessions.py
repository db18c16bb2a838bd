"""Whole sessions against the fake model with each web search provider's fake (#72):
SearxNG and Tavily feed sources into a session as Exa does; a session may use several; and
thoughts, syntheses and the answer follow the language of the question unless the session
sets one."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import sync_to_async

from fakes import searxng_server
from fakes.searxng_server import FakeSearxng
from fakes.tavily_server import FakeTavily
from tests.helpers import FrozenClock, each_call_takes, run
from thinking.deliberation import prompts
from thinking.models import Source, Status, Synthesis, Thought

pytestmark = pytest.mark.django_db(transaction=True)

SEARXNG_HOSTS = set(searxng_server.HOSTS)


async def whole_session(fake_claude: Any, make_session: Any, **fields: Any) -> Any:
    """A session from its plan to its final answer, each model call a second of its clock."""
    frozen = FrozenClock()
    each_call_takes(fake_claude, frozen, 1.0)
    fields = {"plan": {}, "budget_seconds": 12.0, "synthesis_interval_seconds": 6.0, **fields}
    session = await sync_to_async(make_session)(**fields)
    assert await run(session, clock=frozen.clock) == Status.COMPLETED
    await session.arefresh_from_db()
    return session


async def web_sources(session: Any) -> list[Source]:
    return [s async for s in Source.objects.filter(session=session, kind="web").order_by("number")]


async def test_searxng_feeds_sources_into_a_whole_session(
    fake_claude: Any, fake_searxng: FakeSearxng, make_session: Any
):
    session = await whole_session(fake_claude, make_session, question="Why do we dream?")

    sources = await web_sources(session)
    assert fake_searxng.searches, "the plan's web queries went to SearxNG"
    assert sources and all(s.url.split("/")[2] in SEARXNG_HOSTS for s in sources)
    assert sources[0].snippet.startswith("Result 1 from en.wikipedia.org")
    # The answer cites what SearxNG found.
    assert "[1]" in session.final_answer


async def test_tavily_chosen_by_the_session_feeds_its_sources_within_its_domains(
    fake_claude: Any, fake_exa: Any, fake_tavily: FakeTavily, make_session: Any
):
    session = await whole_session(
        fake_claude,
        make_session,
        web_search=["tavily"],
        include_domains=["arxiv.org", "nature.com"],
        search_recency="year",
    )

    assert not fake_exa.searches, "the deployment's default (Exa) was not asked"
    assert fake_tavily.searches
    assert all(r.body["time_range"] == "year" for r in fake_tavily.searches)
    sources = await web_sources(session)
    assert sources
    assert {s.url.split("/")[2] for s in sources} <= {"arxiv.org", "nature.com"}


async def test_a_session_may_search_searxng_and_tavily_together(
    fake_claude: Any, fake_searxng: FakeSearxng, fake_tavily: FakeTavily, make_session: Any
):
    session = await whole_session(
        fake_claude, make_session, web_search=["searxng", "tavily"], exclude_domains=["bbc.co.uk"]
    )
    hosts = {s.url.split("/")[2] for s in await web_sources(session)}
    assert hosts & SEARXNG_HOSTS and hosts - SEARXNG_HOSTS
    assert "www.bbc.co.uk" not in hosts


async def test_a_french_question_gets_a_french_answer(fake_claude: Any, make_session: Any):
    session = await whole_session(
        fake_claude, make_session, question="Pourquoi est-ce que nous rêvons la nuit ?"
    )

    # Every call asked for the language of the question; the model answered in French.
    assert all(
        r["body"]["system"][0]["text"] == prompts.system("")
        for r in fake_claude.requests
        if "system" in r["body"] and "VERDICT" not in str(r["body"]["messages"])
    )
    assert "Write in the language of the question" in prompts.system("")
    assert session.final_answer.startswith("Sur la question")
    assert "En bref, la position la plus défendable" in session.final_answer
    thoughts = [t.text async for t in Thought.objects.filter(session=session)]
    assert thoughts and all(
        t.startswith(("J'explore", "Je relie", "Je critique", "Idée sur", "Lesquelles des"))
        for t in thoughts
    )
    syntheses = [s.text async for s in Synthesis.objects.filter(session=session)]
    assert syntheses and all(s.startswith("Sur la question") for s in syntheses)


async def test_a_session_set_to_a_language_is_written_in_it_whatever_the_question(
    fake_claude: Any, make_session: Any
):
    session = await whole_session(
        fake_claude, make_session, question="Why do we dream?", language="French"
    )
    assert any(
        "Write in French:" in r["body"]["system"][0]["text"]
        for r in fake_claude.requests
        if "system" in r["body"]
    )
    assert session.final_answer.startswith("Sur la question")


async def test_an_english_question_gets_an_english_answer(fake_claude: Any, make_session: Any):
    session = await whole_session(fake_claude, make_session, question="Why do we dream?")
    assert session.final_answer.startswith("On the question")
