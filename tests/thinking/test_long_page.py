"""A long session's page (#67): it holds a bounded part of each list, the rest one request
away in keyset pages; and it follows the session's end (the follow-up card)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.db.models.functions import Mod
from django.test import Client

from bench.long_session import build
from thinking.models import CitationCheck, CompletionReason, Source, Status, ThinkingSession
from thinking.page import presenters

pytestmark = pytest.mark.django_db

PAGE_BYTES = 300 * 1024
# A page of the stream filter: 50 thoughts, whatever the sub-question's length.
FILTER_BYTES = 128 * 1024  # ~95 KB with every cycle's parts and reasoning
FILTER_QUERIES = 6  # the login, the session, the page, its count, the sources


@pytest.fixture
def long_session(alice: Any) -> ThinkingSession:
    return build(alice, thoughts=1000)  # 400 sources, 400 sub-questions, 20 syntheses


def ids(page: str, prefix: str) -> list[int]:
    return [int(n) for n in re.findall(rf'<li id="{prefix}-(\d+)"', page)]


@pytest.fixture
def alice_client(client: Client, alice: Any) -> Client:
    client.force_login(alice)
    return client


def test_a_long_sessions_page_holds_the_newest_the_first_and_the_most_cited(
    alice_client: Client, alice: Any, long_session: ThinkingSession
):
    page = alice_client.get(long_session.get_absolute_url()).content.decode()
    short = build(alice, thoughts=200, seed=1)
    short_page = alice_client.get(short.get_absolute_url()).content.decode()

    assert len(page.encode()) <= PAGE_BYTES
    # The page's size does not follow the session's: five times the rows, about the same page.
    assert len(page) < 1.2 * len(short_page)
    stream = page[page.index('id="thought-list"') :].split("</ol>", 1)[0]
    assert len(ids(stream, "thought")) == 50
    assert len(ids(page, "source")) == presenters.SOURCE_TOP
    assert len(ids(page, "subq")) == presenters.SUB_QUESTION_TOP
    assert len(ids(page, "synthesis")) == presenters.SYNTHESIS_TOP
    assert "All 400 sources, by number" in page
    assert "All 400 sub-questions, in the order asked" in page
    assert "Show earlier syntheses" in page and "(10 not shown)" in page


def test_the_most_cited_sources_come_first_then_the_first_found(
    make_session: Any, alice_client: Client
):
    session = make_session(status=Status.THINKING)
    Source.objects.bulk_create(
        Source(session=session, number=n, kind="web", title=f"Source {n}", key=f"k{n}")
        for n in range(1, 31)
    )
    synthesis = session.syntheses.create(
        sequence=0, text="x", confidence=0.5, time_offset_seconds=1
    )
    for number, times in ((27, 3), (12, 2), (5, 2)):
        for _ in range(times):
            CitationCheck.objects.create(synthesis=synthesis, number=number, claim="c")
    shown = [s.number for s in presenters.most_cited(session)]
    assert shown == [27, 5, 12, *range(1, 5), *range(6, 12), *range(13, 20)]
    page = alice_client.get(session.get_absolute_url()).content.decode()
    assert ids(page, "source") == shown


def test_all_sources_sub_questions_and_earlier_syntheses_page_by_key(
    alice_client: Client, long_session: ThinkingSession
):
    base = long_session.get_absolute_url()
    first = alice_client.get(f"{base}sources/?after=0").content.decode()
    numbers = [int(n) for n in re.findall(r'data-number="(\d+)"', first)]
    assert numbers == list(range(1, 101)) and "sources/?after=100" in first
    last = alice_client.get(f"{base}sources/?after=350").content.decode()
    assert re.findall(r'data-number="(\d+)"', last)[-1] == "400" and "Show more" not in last
    assert 'id="source-' not in last, "copies: the live list keeps the ids"

    asked = list(long_session.sub_questions.order_by("pk").values_list("pk", flat=True))
    page = alice_client.get(f"{base}sub-questions/?after={asked[99]}").content.decode()
    assert [int(n) for n in re.findall(r'data-subq="(\d+)"', page)] == asked[100:200]
    assert f"sub-questions/?after={asked[199]}" in page and 'id="subq-' not in page

    earlier = alice_client.get(f"{base}syntheses/?before=10").content.decode()
    assert ids(earlier, "synthesis") == list(range(10)) and "Show earlier" not in earlier


@pytest.mark.parametrize(
    "path", ["sources/?after=x", "sub-questions/?after=-1", "syntheses/?before=1.5"]
)
def test_a_page_of_a_list_refuses_what_is_not_a_whole_number(
    alice_client: Client, make_session: Any, path: str
):
    response = alice_client.get(f"{make_session().get_absolute_url()}{path}")
    assert response.status_code == 400


@pytest.mark.parametrize("path", ["sources/", "sub-questions/", "syntheses/", "followups/"])
def test_the_lists_and_the_follow_up_card_are_the_owners(
    client: Client, bob: Any, make_session: Any, path: str
):
    client.force_login(bob)
    assert client.get(f"{make_session().get_absolute_url()}{path}").status_code == 404


# -- the page follows the session's end --------------------------------------------------


def followups_of(client: Client, session: ThinkingSession) -> str:
    return client.get(f"{session.get_absolute_url()}followups/").content.decode()


def test_a_running_pages_follow_up_card_asks_for_itself_again_when_the_session_ends(
    alice_client: Client, make_session: Any
):
    session = make_session(status=Status.THINKING)
    page = alice_client.get(session.get_absolute_url()).content.decode()
    card = page[page.index('<section id="followups"') :].split("</section>", 1)[0]
    assert 'hx-trigger="deepthink:ended from:body"' in card
    assert f'hx-get="/sessions/{session.pk}/followups/"' in card
    assert "Notify me in this tab" in card and "Think longer" not in card


def test_a_completed_session_offers_more_time_and_a_follow_up_not_notification(
    alice_client: Client, make_session: Any
):
    session = make_session(
        status=Status.COMPLETED,
        completion_reason=CompletionReason.BUDGET,
        final_answer="Tides come mostly from the Moon.",
        final_confidence=0.8,
    )
    card = followups_of(alice_client, session)
    assert "Think longer" in card and "Ask a follow-up" in card
    assert 'name="csrfmiddlewaretoken"' in card, "its forms post"
    assert "Notify me" not in card and "hx-trigger" not in card
    page = alice_client.get(session.get_absolute_url()).content.decode()
    assert "Writing" not in page, "a finished session is not writing anything"


def test_a_cancelled_session_offers_neither(alice_client: Client, make_session: Any):
    session = make_session(status=Status.CANCELLED, completion_reason=CompletionReason.CANCELLED)
    for html in (
        followups_of(alice_client, session),
        alice_client.get(session.get_absolute_url()).content.decode(),
    ):
        assert "Think longer" not in html and "Ask a follow-up" not in html
        assert "Notify me" not in html


def test_a_catch_up_redraws_only_the_sub_questions_the_page_shows(long_session: ThinkingSession):
    """A long session's page shows its first sub-questions: reconnecting, it gets those
    that moved redrawn, not every one of the hundreds explored since."""
    from thinking.page.broadcast import PageMarks, catch_up
    from thinking.web.consumers import page_marks

    rows = long_session.sub_questions.order_by("pk")
    explored = list(rows.filter(explored=True).values_list("pk", flat=True))
    top = rows.last().pk
    shown = [explored[0], explored[5], rows.filter(explored=False).first().pk]
    _, marks = page_marks(f"q={top}&qs={','.join(map(str, shown))},x".encode())
    assert marks.shown_questions == frozenset(shown)

    def redrawn(marks: PageMarks) -> list[int]:
        plan = catch_up(long_session.pk, None, marks, owner=True)
        section = next(s for s in plan.sections if s.__name__ == "questions")
        return sorted(int(n) for n in re.findall(r'id="subq-row-(\d+)"', "".join(section())))

    assert redrawn(marks) == sorted(explored[:6:5])
    assert redrawn(PageMarks(question=top)) == explored, "a page that did not say: all"


# -- the stream filter, a page at a time ---------------------------------------------------


def filtered(client: Client, url: str) -> tuple[list[int], str, int]:
    """A filtered page's thoughts, its "Show earlier" link (or ""), and its size in bytes."""
    html = client.get(url, HTTP_HX_REQUEST="true").content.decode()
    assert 'id="thought-' not in html, "copies: the stream keeps the ids"
    more = re.search(r'class="earlier focus-earlier".*?hx-get="([^"]+)"', html, re.S)
    return (
        [int(n) for n in re.findall(r'data-seq="(\d+)"', html)],
        more[1] if more else "",
        len(html.encode()),
    )


def test_the_filter_on_a_long_sub_question_pages_back_to_its_first_thought(
    alice_client: Client, alice: Any, django_assert_max_num_queries: Any
):
    session = build(alice, thoughts=5000)
    chosen, small = session.sub_questions.order_by("pk")[:2]
    # Half the session on one sub-question: thousands of thoughts behind one filter.
    session.thoughts.alias(odd=Mod("sequence", 2)).filter(odd=0, sequence__lt=4000).update(
        sub_question=chosen
    )
    on_it = list(
        session.thoughts.filter(sub_question=chosen)
        .exclude(type="scratchpad")
        .order_by("sequence")
        .values_list("sequence", flat=True)
    )
    assert len(on_it) > 1500
    url = f"{session.get_absolute_url()}thoughts/"
    with django_assert_max_num_queries(FILTER_QUERIES):
        newest, more, size = filtered(alice_client, f"{url}?focus={chosen.pk}")
    assert newest == on_it[-presenters.THOUGHT_PAGE :]
    assert size <= FILTER_BYTES, size
    assert (
        f"({len(on_it) - presenters.THOUGHT_PAGE} not shown)"
        in alice_client.get(f"{url}?focus={chosen.pk}").content.decode()
    )

    # "Show earlier", again and again: every page as small, back to the first thought.
    seen = newest
    while more:
        assert more.startswith(f"{url}?focus={chosen.pk}&amp;before=")
        with django_assert_max_num_queries(FILTER_QUERIES):
            page, more, size = filtered(alice_client, more.replace("&amp;", "&"))
        assert 0 < len(page) <= presenters.THOUGHT_PAGE and size <= FILTER_BYTES
        seen = page + seen
    assert seen == on_it

    # A sub-question with a few thoughts: one page, no "Show earlier", the same queries.
    few, more, _ = filtered(alice_client, f"{url}?focus={small.pk}")
    assert few == list(
        session.thoughts.filter(sub_question=small)
        .exclude(type="scratchpad")
        .order_by("sequence")
        .values_list("sequence", flat=True)
    )
    assert more == ""
