"""The session page's presentation: the sub-question tree, the chart and sparklines, Markdown
answers, the stream filter's hooks, the list's search, and the start form's extras."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.urls import reverse

from thinking.models import Status, SubQuestion, ThinkingSession, Thought
from thinking.page import presenters
from thinking.templatetags.thinking_extras import cited

pytestmark = pytest.mark.django_db


@pytest.fixture
def alice_client(client: Any, alice: Any) -> Any:
    client.force_login(alice)
    return client


def page_of(client: Any, session: ThinkingSession) -> str:
    return client.get(session.get_absolute_url()).content.decode()


# -- the sub-question tree --------------------------------------------------------------------


def test_follow_up_questions_nest_under_the_question_they_came_from(
    alice_client: Any, make_session: Any
):
    session = make_session(status=Status.THINKING)
    root = SubQuestion.objects.create(session=session, text="Why do we sleep?", priority=9)
    child = SubQuestion.objects.create(
        session=session, text="Does REM sleep matter?", priority=7, parent=root, explored=True
    )
    SubQuestion.objects.create(session=session, text="What about naps?", priority=5, parent=child)
    html = page_of(alice_client, session)
    tree = html.split('id="sub-questions"')[1]
    # root > children list > child > children list > grandchild
    nested = (
        f'id="subq-{root.pk}".*?subq-children.*?id="subq-{child.pk}".*?subq-children'
        ".*?What about naps"
    )
    assert re.search(nested, tree, re.DOTALL)
    assert "✓ Explored" in tree and "Queued" in tree


def test_a_parent_cycle_never_hides_a_question():
    a = SubQuestion(pk=1, text="a", priority=5, parent_id=2)
    b = SubQuestion(pk=2, text="b", priority=5, parent_id=1)
    c = SubQuestion(pk=3, text="c", priority=5, parent_id=99)  # parent not in the list
    tree = presenters.sub_question_tree([a, b, c])
    shown = []

    def walk(nodes: list[dict]) -> None:
        for node in nodes:
            shown.append(node["question"].pk)
            walk(node["children"])

    walk(tree)
    assert sorted(shown) == [1, 2, 3]


def test_a_persons_sub_question_says_so(alice_client: Any, make_session: Any, alice: Any):
    session = make_session(status=Status.THINKING)
    session.steer(user=alice, kind="question", text="What about <b>naps</b>?")
    tree = page_of(alice_client, session).split('id="sub-questions"')[1]
    assert "asked by a person" in tree and "What about &lt;b&gt;naps&lt;/b&gt;?" in tree


def test_a_long_chain_of_follow_ups_is_nested_a_few_levels_then_listed():
    chain = [SubQuestion(pk=1, text="q1", priority=5)]
    for pk in range(2, 600):
        chain.append(SubQuestion(pk=pk, text=f"q{pk}", priority=5, parent_id=pk - 1))
    tree = presenters.sub_question_tree(chain)
    depth, node = 1, tree[0]
    while node["children"] and node["children"][0]["children"]:
        depth, node = depth + 1, node["children"][0]
    assert depth == presenters.TREE_DEPTH
    listed = [n["question"].pk for n in node["children"]]
    assert listed == list(range(presenters.TREE_DEPTH + 1, 600)), "the rest, in order, flat"


# -- the stream filter's hooks ------------------------------------------------------------------


def test_thoughts_and_sub_questions_carry_the_focus_the_filter_uses(
    alice_client: Any, make_session: Any
):
    session = make_session(status=Status.THINKING)
    focus = SubQuestion.objects.create(session=session, text="Why?", priority=9)
    for sequence, sub_question in enumerate([focus, None]):
        Thought.objects.create(
            session=session, sequence=sequence, text=f"t{sequence}", type="insight",
            confidence=0.7, time_offset_seconds=1, sub_question=sub_question,
        )  # fmt: skip
    html = page_of(alice_client, session)
    assert f'id="thought-0" class="thought type-insight" data-focus="{focus.pk}"' in html
    assert 'id="thought-1" class="thought type-insight" data-focus=""' in html
    assert html.count(f'data-filter-focus="{focus.pk}"') == 2  # the tree and the thought
    assert 'id="stream-filter"' in html


# -- the confidence chart and sparklines ------------------------------------------------------


def test_the_chart_puts_each_synthesis_at_its_thinking_time():
    points = presenters.confidence_points([0.5, 1.0], times=[30, 60], span=60)
    left, right = presenters.CHART_LEFT, presenters.CHART_WIDTH - presenters.CHART_RIGHT
    bottom = presenters.CHART_HEIGHT - presenters.CHART_BOTTOM
    assert points[0]["x"] == pytest.approx((left + right) / 2, abs=0.1)
    assert points[1]["x"] == pytest.approx(right) and points[1]["y"] == presenters.CHART_TOP
    assert presenters.CHART_TOP < points[0]["y"] < bottom


def test_the_chart_has_axis_labels_and_the_trend_in_words(alice_client: Any, make_session: Any):
    session = make_session(status=Status.COMPLETED, confidence_evolution=[0.4, 0.7])
    for sequence, (confidence, offset) in enumerate([(0.4, 15), (0.7, 45)]):
        session.syntheses.create(
            sequence=sequence, text="s", confidence=confidence, time_offset_seconds=offset
        )
    html = page_of(alice_client, session).split('id="confidence"')[1]
    assert ">100%</text>" in html and ">0%</text>" in html and ">thinking time</text>" in html
    assert ">1:00</text>" in html  # the budget ends the time axis
    assert "up 30 points since the first" in html


def test_the_list_shows_a_sparkline_of_each_sessions_confidence(
    alice_client: Any, make_session: Any
):
    make_session(question="Charted", status=Status.COMPLETED, confidence_evolution=[0.5, 0.8])
    make_session(question="Not yet")
    html = alice_client.get(reverse("session-list")).content.decode()
    assert html.count('class="sparkline"') == 1
    assert 'aria-label="Confidence 50%, 80%"' in html


# -- Markdown answers ---------------------------------------------------------------------


def test_model_text_renders_as_markdown_with_citations():
    html = cited("**Yes** [1], mostly.\n\n- one\n- two [7]", {1})
    assert "<strong>Yes</strong>" in html and "<li>one</li>" in html
    assert '<a class="cite" href="#source-1" rel="noopener noreferrer nofollow">[1]</a>' in html
    assert "[7]" in html and "#source-7" not in html


def test_only_web_links_become_links_and_they_leave_safely():
    html = cited(
        "[ok](https://example.org) [bad](javascript:alert(1)) [data](data:text/html,x)", ()
    )
    assert (
        '<a href="https://example.org" target="_blank" rel="noopener noreferrer nofollow">ok</a>'
        in html
    )
    assert "javascript:" not in html.replace("[bad](javascript:alert(1))", "")
    assert 'href="data:' not in html and 'href="javascript:' not in html


def test_raw_html_and_images_in_model_text_stay_text():
    html = cited(
        '<script>alert(1)</script> <img src=x onerror="a()"> ![i](https://e.org/i.png)', ()
    )
    assert "<script" not in html and "<img" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_a_citation_inside_a_model_link_is_not_linked_again():
    html = cited("[see [1]](https://example.org)", {1})
    assert html.count("<a ") == 1


# -- the sessions list ------------------------------------------------------------------------


def test_search_finds_sessions_by_words_in_the_question(alice_client: Any, make_session: Any):
    make_session(question="Why are flamingos pink?")
    make_session(question="How do bees dance?")
    html = alice_client.get(reverse("session-list"), {"q": "  FLAMINGOS "}).content.decode()
    rows = html.split('id="session-rows"')[1]
    assert "flamingos pink" in rows and "bees" not in rows
    assert "1 session matching “FLAMINGOS”" in html


def test_the_search_form_over_htmx_gets_rows_count_and_pager(alice_client: Any, make_session: Any):
    for n in range(30):
        make_session(question=f"Question {n:02d}", status=Status.COMPLETED)
    response = alice_client.get(
        reverse("session-list"),
        {"q": "question", "status": "completed"},
        headers={"HX-Request": "true", "HX-Target": "session-results"},
    )
    html = response.content.decode()
    assert html.lstrip().startswith('<div id="session-results">')
    assert "30 sessions matching “question”, completed." in html
    assert "?q=question&amp;status=completed&amp;page=2" in html


def test_an_unknown_status_filter_is_ignored(alice_client: Any, make_session: Any):
    make_session(question="Still listed")
    html = alice_client.get(reverse("session-list"), {"status": "bogus"}).content.decode()
    assert "Still listed" in html


# -- state changes over htmx ------------------------------------------------------------------


def test_a_refused_change_over_htmx_says_why_in_the_header(alice_client: Any, make_session: Any):
    session = make_session(status=Status.COMPLETED)
    response = alice_client.post(
        reverse("session-pause", args=[session.pk]), headers={"HX-Request": "true"}
    )
    html = response.content.decode()
    assert html.lstrip().startswith('<section id="session-header"')
    assert 'role="alert">Cannot pause a session that is completed' in html
    # Shown in place, so it does not also surface later as a flash message.
    assert "Cannot pause" not in alice_client.get(reverse("home")).content.decode()


# -- the start form -------------------------------------------------------------------------


def test_the_start_page_offers_budget_presets_and_explains_defaults(alice_client: Any):
    html = alice_client.get(reverse("home")).content.decode()
    for minutes in ("5", "30", "120"):
        assert f'data-minutes="{minutes}"' in html
    assert "Default: adaptive." in html and "Default: none." in html
    assert 'aria-describedby="id_minutes_helptext"' in html


@pytest.mark.parametrize(
    ("tools", "stored"),
    [
        (None, ["search", "think", "progress"]),  # not sent (an older page): the defaults
        (["search", "think", "progress"], ["search", "think", "progress"]),
        (["search"], ["search"]),
        (["think", "progress"], ["think", "progress"]),
        ([], []),  # the page's boxes all unticked: no tools
    ],
)
def test_the_tools_ticked_on_the_form_are_the_sessions(
    alice_client: Any, fake_claude: Any, tools: list[str] | None, stored: list[str]
):
    from thinking.deliberation.tools import chosen

    data: dict[str, Any] = {"question": "Q?", "minutes": "1"}
    if tools is not None:
        data.update(tools=tools, tools_chosen="True")
    assert alice_client.post(reverse("session-create"), data).status_code == 302
    session = ThinkingSession.objects.get()
    assert chosen(session) == stored
    assert session.tools_enabled == bool(stored)


def test_a_tool_the_deployment_does_not_offer_is_refused(
    alice_client: Any, fake_claude: Any, settings: Any
):
    settings.DEEPTHINK_THINK_TOOL = False
    html = alice_client.get(reverse("home")).content.decode()
    assert 'value="think"' not in html and 'value="progress"' in html
    data = {"question": "Q?", "minutes": "1", "tools": ["think"], "tools_chosen": "True"}
    response = alice_client.post(reverse("session-create"), data)
    assert response.status_code == 422
    assert "think is not a tool this deployment offers." in response.content.decode()
    assert not ThinkingSession.objects.exists()


def test_steering_offers_hint_or_sub_question_as_radio_buttons(
    alice_client: Any, make_session: Any
):
    html = page_of(alice_client, make_session(status=Status.THINKING))
    assert 'type="radio" name="kind" value="hint"' in html
    assert 'type="radio" name="kind" value="question"' in html


# -- long sessions: a light page, older thoughts on demand, the filter over all of them -------


def many_thoughts(make_session: Any, count: int, **fields: Any) -> tuple[ThinkingSession, Any]:
    session = make_session(status=Status.COMPLETED, **fields)
    early = SubQuestion.objects.create(session=session, text="An early question", priority=5)
    Thought.objects.bulk_create(
        Thought(
            session=session,
            sequence=n,
            cycle=n,
            text=f"Thought number {n}.",
            type="insight",
            confidence=0.5,
            time_offset_seconds=n,
            sub_question=early if n % 100 == 0 else None,
        )
        for n in range(count)
    )
    return session, early


def shown_thoughts(html: str) -> list[int]:
    return [int(n) for n in re.findall(r'<li id="thought-(\d+)"', html)]


def test_a_long_sessions_page_shows_the_newest_thoughts_and_loads_earlier_ones(
    alice_client: Any, make_session: Any
):
    session, _ = many_thoughts(make_session, 2000)
    page = page_of(alice_client, session)
    assert shown_thoughts(page) == list(range(2000 - presenters.THOUGHT_PAGE, 2000))
    assert "1950 not shown" in page
    url = reverse("session-thoughts", args=[session.pk])
    assert f'hx-get="{url}?before=1950"' in page

    earlier = alice_client.get(url, {"before": 1950}, HTTP_HX_REQUEST="true").content.decode()
    assert shown_thoughts(earlier) == list(range(1900, 1950))
    assert f'hx-get="{url}?before=1900"' in earlier and "1900 not shown" in earlier
    first = alice_client.get(url, {"before": 50}).content.decode()
    assert shown_thoughts(first) == list(range(50)) and 'id="thought-earlier"' not in first


def test_the_filter_finds_a_sub_questions_thoughts_across_the_whole_session(
    alice_client: Any, make_session: Any
):
    session, early = many_thoughts(make_session, 2000)
    url = reverse("session-thoughts", args=[session.pk])
    html = alice_client.get(url, {"focus": early.pk}).content.decode()
    # Copies for the filtered list: every thought on it, none with an id the stream uses.
    assert re.findall(r'data-seq="(\d+)"', html) == [str(n) for n in range(0, 2000, 100)]
    assert 'id="thought-' not in html


@pytest.mark.parametrize("query", [{"before": "x"}, {"focus": "-1"}, {"before": "9" * 30}])
def test_a_thoughts_request_without_a_clear_range_is_refused(
    alice_client: Any, make_session: Any, query: dict
):
    session = make_session()
    response = alice_client.get(reverse("session-thoughts", args=[session.pk]), query)
    assert response.status_code == 400


def test_thoughts_on_demand_are_only_for_who_may_see_the_session(
    client: Any, make_session: Any, bob: Any
):
    session, early = many_thoughts(make_session, 60)
    url = reverse("session-thoughts", args=[session.pk])
    assert client.get(url, {"before": 10}).status_code == 302  # to the login
    client.force_login(bob)
    assert client.get(url, {"before": 10}).status_code == 404
    assert client.get(url, {"focus": early.pk}).status_code == 404


# -- controls per viewer, and "Shared with me" -------------------------------------------------


@pytest.fixture
def lab(alice: Any, bob: Any) -> Any:
    from django.utils import timezone

    from accounts.models import Membership, Role, Team

    team = Team.objects.create(name="Lab")
    Membership.objects.create(team=team, user=alice, role=Role.OWNER, accepted_at=timezone.now())
    Membership.objects.create(team=team, user=bob, role=Role.MEMBER, accepted_at=timezone.now())
    return team


def test_a_teammate_sees_only_the_controls_they_may_use(
    client: Any, make_session: Any, alice: Any, bob: Any, lab: Any
):
    session = make_session(status=Status.THINKING, team=lab)
    client.force_login(alice)
    assert ">Cancel</button>" in page_of(client, session)
    client.force_login(bob)
    page = page_of(client, session)
    assert ">Cancel</button>" not in page and "Pause</button>" in page
    # Pausing over htmx swaps in a header rendered for them too.
    header = client.post(
        reverse("session-pause", args=[session.pk]), HTTP_HX_REQUEST="true"
    ).content.decode()
    assert "Resume</button>" in header and ">Cancel</button>" not in header
    client.force_login(alice)
    header = client.post(
        reverse("session-resume", args=[session.pk]), HTTP_HX_REQUEST="true"
    ).content.decode()
    assert ">Cancel</button>" in header


def test_the_list_filters_sessions_shared_with_me(
    client: Any, make_session: Any, alice: Any, bob: Any, lab: Any
):
    make_session(question="Alice's own, private")
    make_session(question="Alice's, shared with the lab", team=lab)
    make_session(question="Bob's, shared with the lab", owner=bob, team=lab)
    client.force_login(bob)
    everything = client.get(reverse("session-list")).content.decode()
    assert "Alice&#x27;s, shared" in everything and "Bob&#x27;s, shared" in everything
    shared = client.get(reverse("session-list"), {"shared": "1"}).content.decode()
    assert "Alice&#x27;s, shared" in shared and "Bob&#x27;s" not in shared
    assert "private" not in shared and "shared with you" in shared


# -- honest clocks ------------------------------------------------------------------------------


def test_the_clock_stands_still_while_waiting_for_the_provider_or_a_dead_worker(
    make_session: Any, settings: Any
):
    from datetime import timedelta

    from django.utils import timezone

    settings.DEEPTHINK_HEARTBEAT_SECONDS = 10
    now = timezone.now()
    session = make_session(
        status=Status.THINKING,
        budget_seconds=600,
        active_seconds=20,
        running_since=now - timedelta(seconds=60),
        heartbeat_at=now,
    )
    assert session.elapsed_seconds(now) == pytest.approx(80)
    # The provider is down since 30 s ago: the clock stopped then, and stays stopped.
    session.waiting_since = now - timedelta(seconds=30)
    assert session.elapsed_seconds(now) == pytest.approx(50)
    assert session.elapsed_seconds(now + timedelta(minutes=5)) == pytest.approx(50)
    # The worker died (no heartbeat for a minute): the clock stopped a heartbeat and a half
    # after its last sign of life, not when its lease ran out or never.
    session.waiting_since = None
    session.heartbeat_at = now - timedelta(seconds=40)
    assert session.elapsed_seconds(now) == pytest.approx(20 + 60 - 40 + 15)
    assert session.remaining_seconds(now) == pytest.approx(600 - 55)


def test_the_page_clock_knows_when_to_stop(alice_client: Any, make_session: Any):
    from datetime import timedelta

    from django.utils import timezone

    now = timezone.now()
    session = make_session(status=Status.THINKING, running_since=now, heartbeat_at=now)
    header = re.search(r'<section id="session-header"[^>]*>', page_of(alice_client, session))[0]
    assert 'data-ticking="1"' in header
    assert 0 < float(re.search(r'data-tick-for="([\d.]+)"', header)[1]) <= 15
    ThinkingSession.objects.filter(pk=session.pk).update(waiting_since=now - timedelta(seconds=1))
    header = re.search(r'<section id="session-header"[^>]*>', page_of(alice_client, session))[0]
    assert 'data-ticking="0"' in header


def test_the_header_shows_one_instants_clock_and_the_cost(alice_client: Any, make_session: Any):
    # Paused: the clock stands still at its stored active time, so every figure is exact.
    session = make_session(
        status=Status.PAUSED,
        budget_seconds=600,
        active_seconds=150.04,
        model_id="claude-opus-4-5",
        input_tokens=12_000,
        output_tokens=3_000,
    )
    header = re.search(
        r'<section id="session-header".*?</section>', page_of(alice_client, session), re.S
    )[0]
    assert 'data-elapsed="150.0" data-budget="600.0"' in header
    assert '<span data-role="remaining">7:30</span> left of 10:00' in header
    assert 'aria-valuenow="25" aria-valuetext="25% of the thinking time used"' in header
    assert 'style="width: 25.0%"' in header
    assert f"<dt>Est. cost</dt><dd>${session.estimated_cost:.4f}</dd>" in header
    ThinkingSession.objects.filter(pk=session.pk).update(model_id="someone-elses-model")
    header = page_of(alice_client, session)
    assert "<dt>Est. cost</dt><dd>n/a</dd>" in header


# -- the header's counts ----------------------------------------------------------------------


def test_the_header_counts_this_sessions_rows_only(alice_client: Any, make_session: Any):
    from thinking.models import CitationCheck, Synthesis

    def fill(session: ThinkingSession, thoughts: int, questions: int, verdicts: list[str]) -> None:
        for n in range(thoughts):
            Thought.objects.create(
                session=session,
                sequence=n,
                text="t",
                type="insight",
                confidence=0.5,
                time_offset_seconds=n,
            )
        for n in range(questions):
            SubQuestion.objects.create(session=session, text=f"q{n}", priority=5)
        synthesis = Synthesis.objects.create(
            session=session, sequence=0, text="s", confidence=0.5, time_offset_seconds=1
        )
        for n, verdict in enumerate(verdicts):
            CitationCheck.objects.create(
                synthesis=synthesis, claim=f"c{n}", number=1, occurrence=n, verdict=verdict
            )

    session = make_session(status=Status.THINKING)
    other = make_session(status=Status.THINKING)
    fill(session, 3, 2, ["supported", "supported", "unsupported", "unchecked"])
    fill(other, 7, 5, ["partial"])
    assert presenters.header_counts(session) == {
        "thoughts": 3,
        "sub_questions": 2,
        "syntheses": 1,
        "supported": 2,
        "partial": 0,
        "unsupported": 1,
        "unchecked": 1,
    }
    header = page_of(alice_client, session)
    header = header[header.index('id="session-header"') : header.index("</section>")]
    stats = dict(re.findall(r"<dt>([\w -]+)</dt><dd>(\d+)</dd>", header))
    assert stats == {"Thoughts": "3", "Sub-questions": "2", "Syntheses": "1"}
    assert re.search(r"2 ✓</span> · .*0 ≈</span> · .*1 ✗</span> · .*1 \?</span>", header)
    # A session with nothing yet counts zeros, and no verdicts line.
    empty = make_session(status=Status.THINKING)
    assert set(presenters.header_counts(empty).values()) == {0}
    assert "Citations checked" not in page_of(alice_client, empty)


# -- what a page costs the database -------------------------------------------------------------

# The statements a fresh session page's GET makes (the login's session and user, the
# session's row, each region's bounded read: the newest thoughts, notes and syntheses, the
# first sub-questions, the most cited sources, and their counts; the navigation's waiting
# invitations and ownership offers). The same for 10 thoughts as for 200: a query added per
# thought, source, sub-question or synthesis fails this.
PAGE_QUERIES = 31


def full_session(make_session: Any, thoughts: int) -> ThinkingSession:
    """A finished session with `thoughts` thoughts (notes among them, cycles with parts, some
    on sub-questions) and, growing with them, sub-questions, sources, syntheses with checked
    citations, and stages."""
    from thinking.deliberation import stages
    from thinking.models import CitationCheck, Source, Synthesis

    session = make_session(status=Status.THINKING)
    for n in range(3):
        assert stages.record_sync(session.pk, stages.entry("analysis", f"Stage {n}"))
    ThinkingSession.objects.filter(pk=session.pk).update(
        status=Status.COMPLETED, final_answer="Tides follow the moon [1].", final_confidence=0.8
    )
    questions = [
        SubQuestion.objects.create(session=session, text=f"Why {n}?", priority=5, explored=n % 2)
        for n in range(2 + thoughts // 10)
    ]
    Source.objects.bulk_create(
        Source(session=session, number=n, kind="web", title=f"S{n}", key=f"k{n}")
        for n in range(1, 2 + thoughts // 4)
    )
    Thought.objects.bulk_create(
        Thought(
            session=session, sequence=n, cycle=n // 2, text=f"Thought {n} [1].",
            type="scratchpad" if n % 7 == 0 else "insight", confidence=0.5,
            time_offset_seconds=n, sub_question=questions[n % len(questions)],
            parts={"analysis": "Again."} if n % 2 == 0 else {},
        )
        for n in range(thoughts)
    )  # fmt: skip
    for n in range(1 + thoughts // 50):
        synthesis = Synthesis.objects.create(
            session=session, sequence=n, text="So far [1].", confidence=0.5,
            time_offset_seconds=n, is_final=n == thoughts // 50,
        )  # fmt: skip
        CitationCheck.objects.create(
            synthesis=synthesis, claim="So far", number=1, verdict="unsupported"
        )
    return session


def test_a_session_pages_queries_do_not_grow_with_the_session(alice_client: Any, make_session: Any):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    counts = []
    for thoughts in (10, 200):
        session = full_session(make_session, thoughts)
        with CaptureQueriesContext(connection) as queries:
            page = page_of(alice_client, session)
        counts.append(len(queries.captured_queries))
        assert f'id="thought-{thoughts - 1}"' in page and "Claims the sources do not back" in page
    assert counts[0] == counts[1] <= PAGE_QUERIES, counts
