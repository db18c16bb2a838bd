"""The session page's presentation: the sub-question tree, the chart and sparklines, Markdown
answers, the stream filter's hooks, the list's search, and the start form's extras."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.urls import reverse

from thinking import presenters
from thinking.models import Status, SubQuestion, ThinkingSession, Thought
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
    ("tools", "enabled", "think"),
    [("", True, True), ("all", True, True), ("search", True, False), ("none", False, False)],
)
def test_the_tools_choice_is_stored_on_the_session(
    alice_client: Any, fake_claude: Any, tools: str, enabled: bool, think: bool
):
    data = {"question": "Q?", "minutes": "1", "tools": tools}
    assert alice_client.post(reverse("session-create"), data).status_code == 302
    session = ThinkingSession.objects.get()
    assert (session.tools_enabled, session.think_tool) == (enabled, think)


def test_steering_offers_hint_or_sub_question_as_radio_buttons(
    alice_client: Any, make_session: Any
):
    html = page_of(alice_client, make_session(status=Status.THINKING))
    assert 'type="radio" name="kind" value="hint"' in html
    assert 'type="radio" name="kind" value="question"' in html
