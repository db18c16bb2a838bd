"""Tests for thinking.provider.tags: the seed's examples, tolerance of real model output,
properties."""

from __future__ import annotations

import html
import json
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from thinking.provider.tags import (
    ENHANCED_SPEC,
    KNOWN_TYPES,
    MAX_DEPTH,
    MAX_INPUT_CHARS,
    MAX_SPECS,
    STANDARD_SPEC,
    Extraction,
    Node,
    SpecError,
    TagSpec,
    extract,
    find_stop_signal,
    parse_structured,
    render_format_instructions,
    spec_from_json,
)

# --------------------------------------------------------------------------- seed examples

SEED_STANDARD = """```xml
<think>
General thinking content mixed together
</think>

<interactive>
<response>User response content</response>
<stop_signal type="boolean">true</stop_signal>
</interactive>
```"""

SEED_ENHANCED = """```xml
<think>
<analysis>Current situation analysis and problem understanding</analysis>
<plan>Specific action steps and strategy formulation</plan>
<reasoning>Logic chain and decision reasoning process</reasoning>
</think>

<interactive>
<response>Response content for user</response>
<stop_signal type="boolean">true</stop_signal>
</interactive>
```"""

SEED_ENHANCED_MODE_EXAMPLE = """
<think>
<analysis>The user is asking about XML parsing implementation</analysis>
<plan>1. Explain architecture 2. Provide code example 3. Show testing approach</plan>
<reasoning>This approach balances clarity with technical depth</reasoning>
</think>

<interactive>
<response>Here's the XML parsing architecture...</response>
<stop_signal type="boolean">false</stop_signal>
</interactive>
"""

SEED_TYPE_EXTRACTION = """
<interactive>
<response>Processing complete</response>
<stop_signal type="boolean">true</stop_signal>
<confidence type="number">0.95</confidence>
<metadata type="json">{"tokens": 150, "time": "2ms"}</metadata>
</interactive>
"""

SEED_TYPED_TAGS = """```xml
<stop_signal type="boolean">true</stop_signal>  <!-- Parsed as boolean -->
<count type="number">42</count>                 <!-- Parsed as number -->
<data type="json">{"key": "value"}</data>       <!-- Parsed as object -->
<message>Hello</message>                        <!-- Parsed as string (default) -->
```"""


def test_seed_enhanced_mode_example():
    reply = parse_structured(SEED_ENHANCED_MODE_EXAMPLE, "enhanced")
    assert reply.parts == {
        "analysis": "The user is asking about XML parsing implementation",
        "plan": "1. Explain architecture 2. Provide code example 3. Show testing approach",
        "reasoning": "This approach balances clarity with technical depth",
    }
    assert reply.response == "Here's the XML parsing architecture..."
    assert reply.stop_signal is False
    assert reply.errors == []
    assert reply.found is True


def test_seed_enhanced_is_the_default_mode():
    assert parse_structured(SEED_ENHANCED_MODE_EXAMPLE).mode == "enhanced"


def test_seed_standard_block():
    reply = parse_structured(SEED_STANDARD, "standard")
    assert reply.parts == {"thinking": "General thinking content mixed together"}
    assert reply.response == "User response content"
    assert reply.stop_signal is True
    assert reply.errors == []


def test_seed_enhanced_block():
    reply = parse_structured(SEED_ENHANCED, "enhanced")
    assert reply.parts == {
        "analysis": "Current situation analysis and problem understanding",
        "plan": "Specific action steps and strategy formulation",
        "reasoning": "Logic chain and decision reasoning process",
    }
    assert reply.response == "Response content for user"
    assert reply.stop_signal is True
    assert reply.errors == []


def test_seed_enhanced_block_read_in_standard_mode_keeps_the_raw_thinking():
    reply = parse_structured(SEED_ENHANCED, "standard")
    assert reply.parts["thinking"].startswith("<analysis>Current situation analysis")
    assert reply.response == "Response content for user"


def test_seed_type_extraction_example():
    spec = (
        TagSpec(
            "interactive",
            children=(
                TagSpec("response"),
                TagSpec("stop_signal"),
                TagSpec("confidence"),
                TagSpec("metadata"),
            ),
        ),
    )
    result = extract(SEED_TYPE_EXTRACTION, spec)
    assert result.errors == []
    assert result.get("interactive.stop_signal").value is True
    assert result.get("interactive.stop_signal").type == "boolean"
    assert result.get("interactive.confidence").value == 0.95
    assert result.get("interactive.metadata").value == {"tokens": 150, "time": "2ms"}
    assert result.get("interactive.response").value == "Processing complete"
    assert result.get("interactive.response").type == "string"
    # The reply-level view of the same text.
    reply = parse_structured(SEED_TYPE_EXTRACTION)
    assert (reply.response, reply.stop_signal, reply.parts) == ("Processing complete", True, {})


def test_seed_typed_tags_block():
    spec = tuple(TagSpec(name) for name in ("stop_signal", "count", "data", "message"))
    result = extract(SEED_TYPED_TAGS, spec)
    assert result.errors == []
    assert result.get("stop_signal").value is True
    count = result.get("count").value
    assert count == 42
    assert isinstance(count, int)
    assert result.get("data").value == {"key": "value"}
    assert result.get("message").value == "Hello"
    assert result.get("message").type == "string"


# --------------------------------------------------------------------------- tolerance


def test_prose_around_tags():
    text = (
        "Sure! Here is my answer.\n<think>short</think>\nand then\n"
        "<interactive><response>ok</response></interactive>\nHope that helps."
    )
    reply = parse_structured(text, "standard")
    assert (reply.parts, reply.response, reply.errors) == ({"thinking": "short"}, "ok", [])


def test_whole_reply_in_xml_code_fence_with_unclosed_last_tag():
    text = (
        "```xml\n<think>pondering</think>\n<interactive>\n<response>All done\n"
        '<stop_signal type="boolean">true</stop_signal>\n```\n'
    )
    reply = parse_structured(text, "standard")
    assert reply.response == "All done"
    assert reply.stop_signal is True
    assert reply.errors == []


def test_trailing_fence_is_dropped_from_unclosed_tag():
    reply = parse_structured("```\n<think>abc\n```", "standard")
    assert reply.parts == {"thinking": "abc"}


def test_response_ending_in_its_own_code_block_keeps_the_fence():
    text = "<interactive><response>Run:\n```sh\nls\n```"
    assert parse_structured(text).response == "Run:\n```sh\nls\n```"


def test_missing_close_at_end_takes_rest_of_text():
    reply = parse_structured("<think>a</think><interactive><response>partial answer")
    assert reply.response == "partial answer"
    assert reply.errors == []


def test_missing_close_stops_at_next_sibling_opening():
    text = "<think>thoughts\n<interactive><response>hi\n<stop_signal>false</stop_signal>"
    reply = parse_structured(text, "standard")
    assert reply.parts == {"thinking": "thoughts"}
    assert reply.response == "hi"
    assert reply.stop_signal is False
    assert reply.errors == []


def test_missing_close_inside_a_closed_parent_stops_at_the_parent_close():
    result = extract("<think><analysis>half</think> tail", ENHANCED_SPEC)
    node = result.get("think.analysis")
    assert node.text == "half"
    assert node.closed is False


# Which element a tag belongs to: the wrappers models drop or leave open must not pull in
# their neighbours, and a tag mentioned inside another element is not a sibling.
@pytest.mark.parametrize(
    ("text", "parts"),
    [
        ("<plan>p<think/>", {"plan": "p"}),
        ("<think/><plan>p</plan>", {"plan": "p"}),
        ("<analysis>x<think>y</think>", {"analysis": "x", "thinking": "y"}),
        ("<analysis>x<think>y", {"analysis": "x", "thinking": "y"}),
        (
            "<think>I think <b>so\n<interactive><response>r</response>",
            {"thinking": "I think <b>so"},
        ),
    ],
    ids=[f"neighbours{n}" for n in range(5)],
)
def test_neighbouring_elements_stay_apart(text, parts):
    assert parse_structured(text).parts == parts


def test_a_tag_mentioned_inside_another_element_is_not_a_sibling():
    spec = (TagSpec("note"), TagSpec("step", multiple=True))
    result = extract("<note>see <step></note><step>real</step>", spec)
    assert [n.text for n in result.get_all("step")] == ["real"]
    assert result.get("note").text == "see <step>"


def test_repeated_tags_multiple_gives_list():
    spec = (TagSpec("step", multiple=True),)
    result = extract("<step>one</step> and <step>two</step><step>three", spec)
    assert [n.text for n in result.get_all("step")] == ["one", "two", "three"]
    assert isinstance(result.nodes["step"], list)


def test_repeated_tags_under_a_parent_by_dotted_path():
    spec = (TagSpec("plan", children=(TagSpec("step", multiple=True),)), TagSpec("step"))
    result = extract("<plan><step>a</step><step>b</step></plan><step>outside</step>", spec)
    assert [n.text for n in result.get_all("plan.step")] == ["a", "b"]
    assert [n.text for n in result.get_all("step")] == ["outside"]
    assert [n.text for n in result.get_all("PLAN.Step")] == ["a", "b"]  # as tags match
    assert result.get_all("review.step") == []  # no such parent
    assert extract("<step>x</step>", spec).get_all("plan.step") == []


def test_repeated_tags_not_multiple_first_wins():
    result = extract("<plan>first</plan><plan>second</plan>", (TagSpec("plan"),))
    assert result.get("plan").text == "first"


def test_tag_mentioned_in_prose_before_the_real_one():
    text = "I will write a <think> section now.\n<think>real thoughts</think>"
    assert parse_structured(text, "standard").parts == {"thinking": "real thoughts"}


def test_odd_whitespace_inside_tags():
    text = "< think >x</ THINK>< interactive ><response >y</response ></interactive\n>"
    reply = parse_structured(text, "standard")
    assert (reply.parts, reply.response, reply.errors) == ({"thinking": "x"}, "y", [])


def test_letter_case_of_tags():
    text = "<THINK><Analysis>a</ANALYSIS></think><Interactive><RESPONSE>r</Response></interactive>"
    reply = parse_structured(text)
    assert reply.parts == {"analysis": "a"}
    assert reply.response == "r"


def test_other_attributes_and_single_quotes():
    text = "<interactive><response id=3>r</response><stop_signal type='boolean' foo=\"x\">yes"
    text += "</stop_signal></interactive>"
    result = extract(text, STANDARD_SPEC)
    node = result.get("interactive.stop_signal")
    assert node.value is True
    assert node.attrs == {"type": "boolean", "foo": "x"}
    assert result.get("interactive.response").attrs == {"id": "3"}


def test_longer_and_namespaced_names_are_not_the_tag():
    result = extract("<thinking>no</thinking><ns:think>no</ns:think>", (TagSpec("think"),))
    assert result.nodes == {}


def test_html_entities_are_decoded():
    text = (
        "<interactive><response>a &lt; b &amp;&amp; c &gt; d &quot;q&quot; &#39;s&#39;"
        "</response></interactive>"
    )
    assert parse_structured(text).response == "a < b && c > d \"q\" 's'"


def test_entities_decoded_before_json_conversion():
    result = extract(
        '<data type="json">{&quot;a&quot;: &quot;&lt;b&gt;&quot;}</data>', (TagSpec("data"),)
    )
    assert result.get("data").value == {"a": "<b>"}


def test_cdata_is_kept_verbatim_and_hides_tags():
    text = (
        "<interactive><response><![CDATA[if a < b && <stop_signal>true</stop_signal>]]>"
        "</response></interactive>"
    )
    reply = parse_structured(text)
    assert reply.response == "if a < b && <stop_signal>true</stop_signal>"
    assert reply.stop_signal is None


def test_comments_are_ignored():
    text = "<think>a <!-- <analysis>hidden</analysis> --> b</think>"
    result = extract(text, ENHANCED_SPEC)
    assert result.get("think").text == "a  b"
    assert result.get("think.analysis") is None


# Where a comment or CDATA section begins and ends decides which tags are real: one at the
# very start, one right before a tag, several in a row, and unterminated ones (plain text,
# which must not stop the other kind from being recognised).
@pytest.mark.parametrize(
    ("text", "thinking"),
    [
        ("<!-- <think>old</think> --><think>new</think>", "new"),
        ("<!-- a --> <think>t <!-- </think> --> u</think>", "t  u"),
        ("<!-- a --><think>right after a comment</think>", "right after a comment"),
        ("<think>a <![CDATA[x]]> <b>mid</b> <![CDATA[y]]></think>", "a x <b>mid</b> y"),
        ("<think>a <!-- b</think>", "a <!-- b"),
        ("<think>a <!-- b --> c <!-- unterminated</think>", "a  c <!-- unterminated"),
        ("<think><![CDATA[ never closed <!-- <x> --> done</think>", "<![CDATA[ never closed  done"),
        ("<think><!-- never closed <![CDATA[<b>]]> done</think>", "<!-- never closed <b> done"),
        (
            "<think>a <![CDATA[ b <![CDATA[ c <!-- <think>p</think> --> d</think>",
            "a <![CDATA[ b <![CDATA[ c  d",
        ),
        ("<think>a <!-- b <!-- c <![CDATA[<x>]]> d</think>", "a <!-- b <!-- c <x> d"),
        ("<think>a <!-- x <!--> b <!-- c --> d</think>", "a  b  d"),  # ends at the first -->
    ],
    ids=[f"opaque{n}" for n in range(11)],
)
def test_comment_and_cdata_boundaries(text, thinking):
    assert parse_structured(text, "standard").parts == {"thinking": thinking}


# A code fence around the whole reply is dropped from an element left unclosed at the end,
# but only a bare closing fence with nothing after it: the response's own code blocks stay.
@pytest.mark.parametrize(
    ("text", "response"),
    [
        ("```xml\n<interactive><response>Run:\n```sh\nls\n```\n```\n", "Run:\n```sh\nls\n```"),
        (
            "```xml\n<interactive><response>Run:\n```sh\nls\n```\nthat is it",
            "Run:\n```sh\nls\n```\nthat is it",
        ),
        ("```\n<interactive><response>See:\n```python", "See:\n```python"),
        ("```\n<interactive><response>Done.\n   ```  \n", "Done."),
    ],
    ids=[f"fence{n}" for n in range(4)],
)
def test_wrapping_code_fence_and_the_responses_own_code(text, response):
    assert parse_structured(text, "standard").response == response


def test_unknown_markup_inside_a_leaf_is_kept():
    reply = parse_structured("<interactive><response>Use <b>bold</b></response></interactive>")
    assert reply.response == "Use <b>bold</b>"


def test_tags_wrapped_in_unknown_markup_are_found():
    text = "<div><answer><think>t</think></answer></div>"
    assert parse_structured(text, "standard").parts == {"thinking": "t"}


def test_self_closing_tag_is_empty():
    result = extract("<think/><plan />", (TagSpec("think"), TagSpec("plan", allow_empty=False)))
    assert result.get("think").text == ""
    assert (result.get("think").closed, result.get("think").span) == (True, (0, 8))
    assert result.errors == ["plan: empty content is not allowed"]
    result = extract("<think/ >not inside<plan / >nor this", (TagSpec("think"), TagSpec("plan")))
    assert (result.get("think").text, result.get("plan").text) == ("", "")


def test_enhanced_think_without_parts_keeps_its_text():
    reply = parse_structured("<think>just thinking</think><interactive><response>r</response>")
    assert reply.parts == {"thinking": "just thinking"}


def test_empty_think_is_a_part_in_standard_mode_only():
    text = "<think></think><interactive><response>r</response></interactive>"
    assert parse_structured(text, "standard").parts == {"thinking": ""}
    assert parse_structured(text, "enhanced").parts == {}


def test_own_text_of_a_parent_excludes_children():
    result = extract(
        "<think>intro<analysis>A</analysis>between<plan>P</plan>outro</think>", ENHANCED_SPEC
    )
    think = result.get("think")
    assert (think.tag, think.span) == ("think", (0, 68))  # where it sits in the reply
    assert think.text == "intro\n\nbetween\n\noutro"
    assert think.raw == "intro<analysis>A</analysis>between<plan>P</plan>outro"
    assert think.get("plan").text == "P"
    assert (think.get("plan").tag, think.get("plan").span) == ("plan", (41, 55))


def test_stray_tags_without_their_wrapper():
    reply = parse_structured(
        "<analysis>A</analysis><response>R</response><stop_signal>true</stop_signal>"
    )
    assert reply.parts == {"analysis": "A"}
    assert reply.response == "R"
    assert reply.stop_signal is True
    assert reply.found is True
    assert "interactive: required tag is missing" in reply.errors


def test_an_unclosed_stray_tag_ends_where_the_next_stray_tag_opens():
    reply = parse_structured("<analysis>A</analysis><response>R<stop_signal>true</stop_signal>")
    assert (reply.response, reply.stop_signal) == ("R", True)


def test_unclosed_interactive_keeps_its_children():
    reply = parse_structured("<interactive><response>R</response><stop_signal>no</stop_signal>")
    assert (reply.response, reply.stop_signal, reply.errors) == ("R", False, [])


def test_nothing_found():
    reply = parse_structured("just some prose, no tags at all")
    assert reply.found is False
    assert reply.parts == {}
    assert reply.response is None
    assert reply.stop_signal is None
    assert reply.errors == ["interactive: required tag is missing"]


def test_required_nested_tag_missing():
    reply = parse_structured("<interactive><stop_signal>true</stop_signal></interactive>")
    assert reply.errors == ["interactive.response: required tag is missing"]
    assert reply.stop_signal is True


def test_input_is_truncated():
    text = "<think>" + "x" * MAX_INPUT_CHARS + "</think>"
    result = extract(text, (TagSpec("think"),))
    assert result.truncated is True
    assert result.errors == [f"input truncated to {MAX_INPUT_CHARS} characters"]
    assert result.get("think").closed is False
    assert len(result.get("think").text) == MAX_INPUT_CHARS - len("<think>")


def test_input_of_exactly_the_limit_is_whole():
    text = "<think>" + "x" * (MAX_INPUT_CHARS - len("<think></think>")) + "</think>"
    result = extract(text, (TagSpec("think"),))
    assert (result.truncated, result.errors, result.get("think").closed) == (False, [], True)


def test_only_text_is_read():
    with pytest.raises(TypeError) as info:
        extract(b"<think>x</think>", (TagSpec("think"),))
    assert str(info.value) == "text must be str, not bytes"


def test_depth_is_bounded():
    spec = TagSpec("t9")
    for n in range(8, 0, -1):
        spec = TagSpec(f"t{n}", children=(spec,))
    text = "".join(f"<t{n}>" for n in range(1, 10)) + "deep"
    result = extract(text, (spec,))
    path = ".".join(f"t{n}" for n in range(1, MAX_DEPTH + 1))
    assert result.get(path) is not None
    assert result.get(path + ".t9") is None
    assert result.errors == [f"{path}: children deeper than {MAX_DEPTH} levels are not extracted"]


ADVERSARIAL = [
    "<think>" * 30000,
    "<" * MAX_INPUT_CHARS,
    "< think" * 30000,
    "<think " + "a" * MAX_INPUT_CHARS,
    '<think a="' + "b=' " * 50000,
    "<![CDATA[" * 25000,
    "<!--" * 50000,
    "</think>" * 30000,
    "<think><analysis><interactive>" * 8000,
    "```\n" * 50000,
    "&amp;" * 40000,
    "<stop_signal>" * 15000 + "true",
]


# Plain ids: mutmut re-runs tests by node id, and quotes or escapes in an id do not resolve.
@pytest.mark.parametrize(
    "text", ADVERSARIAL, ids=lambda t: "".join(c if c.isalnum() else "_" for c in t[:12])
)
def test_adversarial_inputs_complete(text):
    nested = (TagSpec("think", multiple=True, children=(TagSpec("think", multiple=True),)),)
    assert isinstance(extract(text, nested), Extraction)
    for mode in ("standard", "enhanced"):
        parse_structured(text, mode)
    find_stop_signal(text)


# --------------------------------------------------------------------------- types


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("true", True),
        ("TRUE", True),
        (" Yes ", True),
        ("1", True),
        ("false", False),
        ("No", False),
        ("0", False),
    ],
)
def test_boolean_spellings(raw, expected):
    result = extract(f'<flag type="boolean">{raw}</flag>', (TagSpec("flag"),))
    assert result.get("flag").value is expected
    assert result.errors == []


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("42", 42), ("-7", -7), ("0.95", 0.95), ("1e3", 1000.0), (" .5 ", 0.5)],
)
def test_numbers(raw, expected):
    value = extract(f'<n type="number">{raw}</n>', (TagSpec("n"),)).get("n").value
    assert value == expected
    assert type(value) is type(expected)


# The whole error an operator reads in the session's format errors: which tag, why, and a
# preview of what the model wrote (cut at 40 characters).
@pytest.mark.parametrize(
    ("tag", "error"),
    [
        (
            '<x type="boolean">maybe</x>',
            "x: cannot read 'maybe' as boolean (true/false/yes/no/1/0)",
        ),
        (
            '<x type="boolean">' + "y" * 40 + "</x>",
            f"x: cannot read '{'y' * 40}' as boolean (true/false/yes/no/1/0)",
        ),
        (
            '<x type="boolean">' + "y" * 41 + "</x>",
            f"x: cannot read '{'y' * 40}…' as boolean (true/false/yes/no/1/0)",
        ),
        ('<x type="number">12abc</x>', "x: cannot read '12abc' as a number"),
        ('<x type="number">1_000</x>', "x: cannot read '1_000' as a number"),
        ('<x type="number">nan</x>', "x: cannot read 'nan' as a number"),
        ('<x type="number">1e999</x>', "x: cannot read '1e999' as a number"),
        (
            '<x type="number">' + "9" * 5000 + "</x>",
            f"x: number '{'9' * 40}…' has too many digits",
        ),
        (
            '<x type="json">{"a": </x>',
            "x: invalid JSON '{\"a\":': JSONDecodeError: Expecting value: line 1 column 6 (char 5)",
        ),
        (
            '<x type="json">' + "[" * 100000 + "</x>",
            f"x: invalid JSON '{'[' * 40}…': RecursionError: ",  # then Python's own wording
        ),
        (
            '<x type="date">2024</x>',
            "x: unknown type 'date' (known: string, boolean, number, json)",
        ),
    ],
)
def test_conversion_failures_are_reported_not_raised(tag, error):
    result = extract(tag, (TagSpec("x"),))
    node = result.get("x")
    assert node.value is None
    assert len(result.errors) == 1
    if error.endswith(": "):
        assert result.errors[0].startswith(error)
    else:
        assert result.errors == [error]
    assert node.error == result.errors[0].removeprefix("x: ")


def test_type_not_in_supported_types():
    result = extract('<x type="json">{}</x>', (TagSpec("x", supported_types=("string",)),))
    assert result.get("x").value is None
    assert result.errors == ["x: type 'json' is not supported here"]


def test_default_type_is_the_only_supported_one():
    result = extract("<x>yes</x>", (TagSpec("x", supported_types=("boolean",)),))
    assert (result.get("x").type, result.get("x").value) == ("boolean", True)


def test_stop_signal_typed_as_string_still_read():
    reply = parse_structured('<interactive><response>r</response><stop_signal type="string">true')
    assert reply.stop_signal is True
    assert reply.errors == ["interactive.stop_signal: type 'string' is not supported here"]


def test_validator_failures_and_exceptions_are_reported():
    def boom(text: str) -> bool:
        raise RuntimeError("bad")

    spec = (TagSpec("a", validator=lambda t: t.isdigit()), TagSpec("b", validator=boom))
    result = extract("<a>12</a><b>x</b>", spec)
    assert result.errors == ["b: validator raised RuntimeError: bad"]
    result = extract("<a>twelve</a>", spec)
    assert result.errors == ["a: rejected by validator"]


def test_every_problem_of_one_tag_is_reported():
    spec = (TagSpec("x", supported_types=("string",), allow_empty=False),)
    result = extract('<x type="json"></x>', spec)
    assert result.errors == [
        "x: type 'json' is not supported here",
        "x: empty content is not allowed",
    ]
    assert (
        result.get("x").error == "type 'json' is not supported here; empty content is not allowed"
    )


def test_required_and_empty():
    spec = (TagSpec("a", optional=False), TagSpec("b", allow_empty=False))
    result = extract("<b>  </b>", spec)
    assert result.errors == ["a: required tag is missing", "b: empty content is not allowed"]


def test_tagspec_refuses_bad_names_and_types():
    with pytest.raises(ValueError, match="invalid tag name"):
        TagSpec("no spaces")
    with pytest.raises(ValueError, match="supported_types"):
        TagSpec("x", supported_types=("date",))
    assert TagSpec("x", children=[TagSpec("y")]).children == (TagSpec("y"),)
    # Type names are read case-insensitively, like the type attribute in a reply.
    flag = TagSpec("flag", supported_types=["Boolean"])
    result = extract("<flag>yes</flag>", (flag,))
    assert (result.get("flag").type, result.get("flag").value, result.errors) == (
        "boolean",
        True,
        [],
    )


# --------------------------------------------------------------------------- stop signal


def test_find_stop_signal_buried_in_prose():
    text = 'Blah blah. <stop_signal type="boolean">TRUE</stop_signal> more blah'
    assert find_stop_signal(text) is True


def test_find_stop_signal_inside_interactive():
    assert find_stop_signal(SEED_ENHANCED_MODE_EXAMPLE) is False


def test_find_stop_signal_last_decisive_one_wins():
    text = (
        "<think>I will set <stop_signal>true</stop_signal> once done.</think>"
        "<interactive><stop_signal>false</stop_signal><stop_signal>unsure</stop_signal>"
    )
    assert find_stop_signal(text) is False


def test_find_stop_signal_absent():
    assert find_stop_signal("nothing here") is None
    assert find_stop_signal("<stop_signal>perhaps</stop_signal>") is None


# --------------------------------------------------------------------------- modes


def test_unknown_mode_and_custom_without_spec():
    with pytest.raises(ValueError) as info:
        parse_structured("x", "fancy")
    assert (
        str(info.value)
        == "unknown thinking mode 'fancy' (expected one of standard, enhanced, custom)"
    )
    with pytest.raises(ValueError) as info:
        parse_structured("x", "custom")
    assert str(info.value) == "custom mode needs a spec (see spec_from_json)"


CUSTOM_JSON = json.dumps(
    [
        {
            "tag": "think",
            "children": [
                {"tag": "hypothesis", "multiple": True},
                {"tag": "critique", "children": [{"tag": "note"}]},
                {"tag": "note"},
            ],
        },
        {
            "tag": "answer",
            "optional": False,
            "children": [
                {"tag": "response", "allow_empty": False},
                {"tag": "stop_signal", "supported_types": ["boolean"]},
            ],
        },
    ]
)


def test_custom_mode():
    custom = spec_from_json(CUSTOM_JSON)
    text = (
        "<think><hypothesis>H1</hypothesis><hypothesis>H2</hypothesis>"
        "<critique><note>inner</note></critique><note>outer</note></think>"
        "<answer><response>R</response><stop_signal>yes</stop_signal></answer>"
    )
    reply = parse_structured(text, "custom", custom)
    assert reply.parts == {
        "hypothesis": "H1\n\nH2",
        "think.critique.note": "inner",
        "think.note": "outer",
    }
    assert (reply.response, reply.stop_signal, reply.errors, reply.found) == ("R", True, [], True)


def test_custom_mode_falls_back_to_stray_response_and_stop_signal():
    custom = spec_from_json([{"tag": "idea"}])
    reply = parse_structured(
        "<idea>I</idea><response>R</response><stop_signal>1</stop_signal>", "custom", custom
    )
    assert (reply.parts, reply.response, reply.stop_signal) == ({"idea": "I"}, "R", True)


@pytest.mark.parametrize("mode", ["standard", "enhanced", "custom"])
def test_format_instructions_skeleton_parses_back(mode):
    custom = spec_from_json(CUSTOM_JSON) if mode == "custom" else None
    instructions = render_format_instructions(mode, custom)
    assert "<interactive>" in instructions or mode == "custom"
    reply = parse_structured(instructions, mode, custom)
    assert reply.found is True
    assert reply.errors == []
    assert reply.response is not None
    assert reply.stop_signal is False
    if mode == "enhanced":
        assert set(reply.parts) == {"analysis", "plan", "reasoning"}
    if mode == "custom":
        assert "Tags that may appear more than once: hypothesis." in instructions


# What the model is told, word for word: the format instructions go into its prompt.
_CLOSING_RULE = (
    "Close every tag you open. Write a literal less-than sign inside text as &lt; and an"
    " ampersand as &amp;."
)
_STOP_RULE = "stop_signal: true when you are finished and need no further turn, otherwise false."


def test_format_instructions_standard():
    assert render_format_instructions("standard") == "\n".join(
        [
            "Format your whole reply with these XML tags, in this order:",
            "",
            "<think>Your private thinking, as much as you need</think>",
            "<interactive>",
            "<response>What the user should read</response>",
            '<stop_signal type="boolean">false</stop_signal>',
            "</interactive>",
            "",
            "Optional tags (leave out if there is nothing to say): think, stop_signal.",
            "Typed tags, write a plain value of that type: stop_signal (boolean).",
            _STOP_RULE,
            _CLOSING_RULE,
        ]
    )


def test_format_instructions_enhanced_is_the_default():
    expected = "\n".join(
        [
            "Format your whole reply with these XML tags, in this order:",
            "",
            "<think>",
            "<analysis>What is being asked, what you know, what is missing</analysis>",
            "<plan>The steps you will take next and why</plan>",
            "<reasoning>The chain of logic behind your conclusion</reasoning>",
            "</think>",
            "<interactive>",
            "<response>What the user should read</response>",
            '<stop_signal type="boolean">false</stop_signal>',
            "</interactive>",
            "",
            "Optional tags (leave out if there is nothing to say): think, analysis, plan,"
            " reasoning, stop_signal.",
            "Typed tags, write a plain value of that type: stop_signal (boolean).",
            _STOP_RULE,
            _CLOSING_RULE,
        ]
    )
    assert render_format_instructions("enhanced") == expected
    assert render_format_instructions() == expected


def test_format_instructions_custom_typed_optional_repeatable_nested():
    custom = spec_from_json(
        [
            {
                "tag": "think",
                "children": [
                    {"tag": "hypothesis", "multiple": True},
                    {"tag": "confidence", "supported_types": ["number"], "optional": False},
                    {"tag": "sources", "supported_types": ["json", "string"]},
                    {"tag": "data", "supported_types": ["json", "number"], "multiple": True},
                ],
            },
            {
                "tag": "answer",
                "optional": False,
                "children": [
                    {"tag": "response", "optional": False},
                    {"tag": "stop_signal", "supported_types": ["boolean"]},
                ],
            },
        ]
    )
    # A custom format has no built-in descriptions (not even for response): the model gets
    # a placeholder of each tag's type; "string" is the default and needs no attribute.
    assert render_format_instructions("custom", custom) == "\n".join(
        [
            "Format your whole reply with these XML tags, in this order:",
            "",
            "<think>",
            "<hypothesis>…</hypothesis>",
            '<confidence type="number">0</confidence>',
            "<sources>…</sources>",
            '<data type="json">{}</data>',
            "</think>",
            "<answer>",
            "<response>…</response>",
            '<stop_signal type="boolean">false</stop_signal>',
            "</answer>",
            "",
            "Optional tags (leave out if there is nothing to say): think, hypothesis, sources,"
            " data, stop_signal.",
            "Tags that may appear more than once: hypothesis, data.",
            "Typed tags, write a plain value of that type: confidence (number), data (json),"
            " stop_signal (boolean).",
            _STOP_RULE,
            _CLOSING_RULE,
        ]
    )


def test_format_instructions_custom_with_one_required_tag_says_only_what_applies():
    custom = spec_from_json([{"tag": "answer", "optional": False}])
    assert render_format_instructions("custom", custom) == "\n".join(
        [
            "Format your whole reply with these XML tags, in this order:",
            "",
            "<answer>…</answer>",
            "",
            _CLOSING_RULE,
        ]
    )


def test_format_instructions_name_a_stop_signal_spelt_in_capitals():
    custom = spec_from_json([{"tag": "Stop_Signal", "supported_types": ["boolean"]}])
    instructions = render_format_instructions("custom", custom)
    assert instructions.splitlines()[-2:] == [_STOP_RULE, _CLOSING_RULE]
    assert parse_structured("<STOP_SIGNAL>true</STOP_SIGNAL>", "custom", custom).stop_signal


def test_custom_spec_allow_empty_false_reports_an_empty_tag():
    custom = spec_from_json([{"tag": "answer", "allow_empty": False}])
    reply = parse_structured("<answer>  </answer>", "custom", custom)
    assert (reply.parts, reply.errors) == ({"answer": ""}, ["answer: empty content is not allowed"])
    for allowed in ({"allow_empty": True}, {}):  # allowed unless the operator says otherwise
        custom = spec_from_json([{"tag": "answer", **allowed}])
        assert parse_structured("<answer>  </answer>", "custom", custom).errors == []


def test_custom_spec_tags_are_optional_unless_marked_required():
    custom = spec_from_json([{"tag": "idea"}, {"tag": "answer", "optional": False}])
    reply = parse_structured("nothing tagged", "custom", custom)
    assert reply.errors == ["answer: required tag is missing"]


# --------------------------------------------------------------------------- spec_from_json


def test_spec_from_json_accepts_parsed_and_text():
    parsed = spec_from_json(json.loads(CUSTOM_JSON))
    assert parsed == spec_from_json(CUSTOM_JSON)
    answer = parsed[1]
    assert (answer.tag, answer.optional) == ("answer", False)
    assert answer.children[1].supported_types == ("boolean",)
    assert parsed[0].children[0].multiple is True


def _nested(depth: int) -> list[dict]:
    spec: dict = {"tag": "leaf"}
    for _ in range(depth - 1):
        spec = {"tag": "n", "children": [spec]}
    return [spec]


_TAG_NAME_RULE = "(a letter or _ then up to 63 letters, digits, _ . -)"


# The whole message the operator reads when the custom format they configured is refused:
# where the problem is, what was expected and what they wrote instead.
@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            "{not json",
            "spec: not valid JSON (Expecting property name enclosed in double quotes: line 1"
            " column 2 (char 1))",
        ),
        ({"tag": "x"}, "spec: expected an array of tag objects, got object"),
        ("null", "spec: expected an array of tag objects, got null"),
        ([], "spec: needs at least one tag"),
        (["think"], "[0]: expected an object, got string"),
        (
            [{"tag": "a", "colour": "red"}],
            "[0]: unknown key 'colour' (allowed: tag, optional, allow_empty, children,"
            " supported_types, multiple)",
        ),
        ([{"optional": True}], "[0].tag: required"),
        ([{"tag": 5}], "[0].tag: expected a string, got number"),
        ([{"tag": None}], "[0].tag: expected a string, got null"),
        ([{"tag": True}], "[0].tag: expected a string, got boolean"),
        ([{"tag": ["think"]}], "[0].tag: expected a string, got array"),
        ([{"tag": {"name": "think"}}], "[0].tag: expected a string, got object"),
        # A Python caller handing over something JSON cannot hold sees its Python type.
        ([{"tag": ("think",)}], "[0].tag: expected a string, got tuple"),
        ([{"tag": "has space"}], f"[0].tag: 'has space' is not a valid tag name {_TAG_NAME_RULE}"),
        ([{"tag": "1abc"}], f"[0].tag: '1abc' is not a valid tag name {_TAG_NAME_RULE}"),
        (
            [{"tag": "x" * 65}],
            f"[0].tag: '{'x' * 40}…' is not a valid tag name {_TAG_NAME_RULE}",
        ),
        (
            [{"tag": "t", "children": [{"tag": "a"}, {"tag": "A"}]}],
            "[0].children[1].tag: duplicate tag 'A' (also at [0].children[0])",
        ),
        ([{"tag": "a", "optional": "yes"}], "[0].optional: expected true or false, got string"),
        (
            [{"tag": "a", "allow_empty": "no"}],
            "[0].allow_empty: expected true or false, got string",
        ),
        ([{"tag": "a", "multiple": 1}], "[0].multiple: expected true or false, got number"),
        (
            [{"tag": "a", "supported_types": []}],
            "[0].supported_types: expected a non-empty array of type names",
        ),
        (
            [{"tag": "a", "supported_types": "json"}],
            "[0].supported_types: expected a non-empty array of type names",
        ),
        (
            [{"tag": "a", "supported_types": ["json", 5]}],
            "[0].supported_types[1]: expected a string, got number",
        ),
        (
            [{"tag": "a", "supported_types": ["date"]}],
            "[0].supported_types[0]: unknown type 'date' (known: string, boolean, number, json)",
        ),
        (
            [{"tag": "a", "supported_types": ["json", "json"]}],
            "[0].supported_types[1]: duplicate type 'json'",
        ),
        (
            [{"tag": "a", "children": {"tag": "b"}}],
            "[0].children: expected an array of tag objects, got object",
        ),
        (
            [{"tag": "a", "children": [{"tag": "b"}, {"tag": "c", "children": [{"tg": "d"}]}]}],
            "[0].children[1].children[0]: unknown key 'tg' (allowed: tag, optional, allow_empty,"
            " children, supported_types, multiple)",
        ),
        (
            _nested(MAX_DEPTH + 1),
            "[0]" + ".children[0]" * MAX_DEPTH + f": nested deeper than {MAX_DEPTH} levels",
        ),
        (
            [{"tag": f"t{n}"} for n in range(MAX_SPECS + 1)],
            f"[{MAX_SPECS}]: too many tags (at most {MAX_SPECS} in a spec)",
        ),
    ],
)
def test_spec_from_json_refusals(data, message):
    with pytest.raises(SpecError) as info:
        spec_from_json(data)
    assert str(info.value) == message
    assert isinstance(info.value, ValueError)


def test_spec_from_json_max_depth_is_allowed():
    (spec,) = spec_from_json(_nested(MAX_DEPTH))
    depth = 1
    while spec.children:
        spec, depth = spec.children[0], depth + 1
    assert depth == MAX_DEPTH


# --------------------------------------------------------------------------- properties

FRAGMENTS = [
    "<think>",
    "</think>",
    "<analysis>",
    "</analysis>",
    "<interactive>",
    "</interactive>",
    "<response>",
    "</response>",
    '<stop_signal type="boolean">',
    "<stop_signal type='json'>",
    "</stop_signal>",
    "< THINK >",
    "</ think",
    "<think/>",
    "<",
    ">",
    "/",
    "&amp;",
    "&lt;",
    "&#x110000;",
    "&",
    "```",
    "```xml\n",
    "<![CDATA[",
    "]]>",
    "<!--",
    "-->",
    'type="',
    "true",
    "{",
    "\n",
    " ",
]

fragment_text = st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=4), max_size=40).map("".join)
FUZZ_SPEC = (
    *ENHANCED_SPEC,
    TagSpec("response", multiple=True, validator=lambda t: 1 / len(t) > 0),
    TagSpec("x", supported_types=("json", "number"), allow_empty=False, optional=False),
)


def _never_raises(text: str) -> None:
    result = extract(text, FUZZ_SPEC)
    assert all(isinstance(e, str) for e in result.errors)
    for mode in ("standard", "enhanced"):
        reply = parse_structured(text, mode)
        assert reply.stop_signal in (True, False, None)
    find_stop_signal(text)


@settings(max_examples=150, deadline=None)
@given(st.text())
def test_any_text_never_raises(text):
    _never_raises(text)


@settings(max_examples=300, deadline=None)
@given(fragment_text)
def test_tag_soup_never_raises(text):
    _never_raises(text)


NAMES = ["a", "b", "think", "x.y", "n-1", "_q", "Resp"]
WS = st.sampled_from(["", " ", "\n", "\t", "  \n"])
PROSE = st.text(st.characters(exclude_characters="<"), max_size=12)


@st.composite
def spec_trees(draw, depth: int = 1) -> tuple[TagSpec, ...]:
    names = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=3, unique_by=str.lower))
    specs = []
    for name in names:
        children = draw(spec_trees(depth + 1)) if depth < 3 and draw(st.booleans()) else ()
        if children:
            # Parents keep "string" so their own text converts; leaves get any types.
            types = ("string", *draw(st.lists(st.sampled_from(KNOWN_TYPES[1:]), unique=True)))
        else:
            types = tuple(draw(st.lists(st.sampled_from(KNOWN_TYPES), min_size=1, unique=True)))
        specs.append(
            TagSpec(
                name,
                optional=draw(st.booleans()),
                children=children,
                supported_types=types,
                multiple=draw(st.booleans()),
            )
        )
    return tuple(specs)


@dataclass
class Expected:
    text: str
    value: object
    children: dict[str, list[Expected]] = field(default_factory=dict)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=6,
)


@st.composite
def leaf_content(draw, spec: TagSpec) -> tuple[str, str, str, object]:
    """(declared type or "", rendered content, expected text, expected value)."""
    kind = draw(st.sampled_from(spec.supported_types))
    declared = kind if kind != spec.default_type or draw(st.booleans()) else ""
    if kind == "string":
        raw = draw(PROSE)
        return declared, html.escape(raw, quote=False), raw.strip(), raw.strip()
    if kind == "boolean":
        flag = draw(st.booleans())
        word = draw(st.sampled_from(["true", "YES", "1"] if flag else ["False", "no", "0"]))
        padded = draw(WS) + word + draw(WS)
        return declared, padded, padded.strip(), flag
    if kind == "number":
        number = draw(
            st.integers(-(10**30), 10**30) | st.floats(allow_nan=False, allow_infinity=False)
        )
        return declared, repr(number), repr(number), number
    data = draw(json_values)
    dumped = json.dumps(data)
    return declared, html.escape(dumped, quote=False), dumped.strip(), data


@st.composite
def element(draw, spec: TagSpec) -> tuple[str, Expected]:
    name = "".join(c.upper() if draw(st.booleans()) else c for c in spec.tag)
    attrs = draw(st.sampled_from(["", ' id="7"', " data-x='y'"]))
    if spec.children:
        declared = ""
        pieces, children = _render_level(draw, spec.children)
        prose = [draw(PROSE) for _ in range(len(pieces) + 1)] if pieces else [draw(PROSE)]
        parts = [prose[0]]
        for piece, after in zip(pieces, prose[1:], strict=True):
            parts += [piece, after]
        content = draw(WS).join(
            html.escape(p, quote=False) if i % 2 == 0 else p for i, p in enumerate(parts)
        )
        own = "\n\n".join(p.strip() for p in prose if p.strip())
        expected = Expected(own, own, children)
    else:
        declared, content, text, value = draw(leaf_content(spec))
        expected = Expected(text, value)
    if declared:
        quote = draw(st.sampled_from(['"', "'"]))
        attrs += f" type={quote}{declared}{quote}"
    open_tag = f"<{draw(WS)}{name}{attrs}{draw(WS)}>"
    close_tag = f"<{draw(st.sampled_from(['/', '/ ', ' / ']))}{name}{draw(WS)}>"
    return open_tag + content + close_tag, expected


def _render_level(draw, specs) -> tuple[list[str], dict[str, list[Expected]]]:
    pieces: list[str] = []
    expected: dict[str, list[Expected]] = {}
    for spec in specs:
        low = 0 if spec.optional else 1
        count = draw(st.integers(low, 3 if spec.multiple else 1))
        expected[spec.tag] = []
        for _ in range(count):
            rendered, exp = draw(element(spec))
            pieces.append(rendered)
            expected[spec.tag].append(exp)
    return pieces, expected


@st.composite
def documents(draw):
    specs = draw(spec_trees())
    pieces, expected = _render_level(draw, specs)
    prose = [draw(PROSE) for _ in range(len(pieces) + 1)]
    text = prose[0] + "".join(p + after for p, after in zip(pieces, prose[1:], strict=True))
    return specs, text, expected


def _same_value(got: object, want: object) -> bool:
    if isinstance(want, bool) or isinstance(got, bool):
        return got is want
    return got == want


def _check(nodes: dict[str, Node | list[Node]], specs, expected) -> None:
    for spec in specs:
        want = expected[spec.tag]
        got = nodes.get(spec.tag)
        if not want:
            assert got is None
            continue
        assert isinstance(got, list) is spec.multiple
        got_list = got if isinstance(got, list) else [got]
        assert len(got_list) == len(want)
        for node, exp in zip(got_list, want, strict=True):
            assert node.closed
            assert node.text == exp.text
            assert _same_value(node.value, exp.value), (node.value, exp.value)
            _check(node.children, spec.children, exp.children)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents())
def test_well_formed_documents_round_trip(doc):
    specs, text, expected = doc
    result = extract(text, specs)
    assert result.errors == []
    _check(result.nodes, specs, expected)


@settings(max_examples=150, deadline=None)
@given(
    PROSE,
    PROSE,
    st.booleans(),
    st.sampled_from(['type="boolean"', "type='boolean' foo=\"x\"", ""]),
    st.sampled_from(["{}", "{}", " {} ", "\n{}\n"]),
)
def test_stop_signal_buried_in_prose_is_found(before, after, flag, attrs, layout):
    word = layout.format("true" if flag else "false")
    text = f"{before}<stop_signal {attrs}>{word}</stop_signal>{after}"
    assert find_stop_signal(text) is flag
    assert parse_structured(text).stop_signal is flag
    assert parse_structured(text, "standard").stop_signal is flag
