from __future__ import annotations

import json
import os
import subprocess
import sys
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from fakes.anthropic_server import HttpError, Reply
from tests.helpers import prompt_of
from thinking.models import Delivery, ThinkingSession

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]


def think(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("think", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_json_output_carries_the_whole_session(fake_claude: Any, alice: Any):
    out, _ = think(
        "Why is the sky blue?", "--minutes", "0.05", "--synthesis-minutes", "0.01",
        "--owner", "alice", "--json",
    )  # fmt: skip
    doc = json.loads(out)

    session = ThinkingSession.objects.get()
    assert doc["id"] == str(session.pk) and session.owner == alice
    assert doc["status"] == "completed" and doc["completion_reason"] == "budget"
    assert doc["question"] == "Why is the sky blue?"
    assert [t["sequence"] for t in doc["thoughts"]] == list(range(len(doc["thoughts"])))
    assert set(doc["thoughts"][0]) >= {"sequence", "type", "text", "confidence"}
    assert doc["sub_questions"] and set(doc["sub_questions"][0]) >= {
        "text", "priority", "why", "explored",
    }  # fmt: skip
    assert doc["syntheses"][-1]["is_final"] and len(doc["syntheses"]) >= 2
    assert set(doc["syntheses"][0]) >= {
        "sequence", "text", "key_insights", "confidence", "remaining_questions", "is_final",
    }  # fmt: skip
    assert doc["final_answer"] == session.final_answer
    assert doc["final_confidence"] == session.final_confidence
    assert doc["confidence_evolution"] == [s["confidence"] for s in doc["syntheses"]]
    assert doc["usage"]["input_tokens"] > 0 and "cache_read_tokens" in doc["usage"]
    assert "worker_id" not in out


def test_live_output_shows_thoughts_and_the_answer(fake_claude: Any, alice: Any):
    out, _ = think("What is a mind?", "--minutes", "0.05", "--synthesis-minutes", "0.02")
    assert "Thinking about: What is a mind?" in out
    assert "[exploration" in out or "[connection" in out
    assert "== Final answer (confidence 0.78)" in out and "Done." in out


def test_a_terminal_run_holds_its_session_under_a_cli_lease_and_sends_only_its_own_mail(
    fake_claude: Any, alice: Any, make_session: Any, mailoutbox: list[Any]
):
    # The admin's lease column tells a session run in someone's terminal from a worker's;
    # the run mails its owner before it exits, but another session's pending webhook is the
    # workers' to send.
    alice.email = "alice@example.com"
    alice.save()
    pending = Delivery.objects.create(
        session=make_session(), kind="webhook", target="https://hooks.example/x", body="{}"
    )
    holders: list[str] = []

    def noting_the_lease(body: dict) -> Any:
        from django.db import connection

        try:
            holders.append(ThinkingSession.objects.get(question="Why?").worker_id)
        finally:
            connection.close()  # this is the fake server's thread
        return fake_claude.scripted_mind(body)

    fake_claude.responder = noting_the_lease
    think("Why?", "--minutes", "0.05", "--owner", "alice", "--notify", "--json")
    assert [message.to for message in mailoutbox] == [[alice.email]]
    assert holders and all(holder.startswith("cli-") for holder in holders), holders
    assert ThinkingSession.objects.get(question="Why?").worker_id == ""  # released at the end
    untouched = Delivery.objects.get(pk=pending.pk)
    assert (untouched.attempts, untouched.next_at) == (0, pending.next_at)


def test_first_superuser_owns_cli_sessions_and_is_created_if_missing(fake_claude: Any):
    _, err = think("Q?", "--minutes", "0.05", "--json")
    assert "Created superuser 'deepthink'" in err
    assert ThinkingSession.objects.get().owner.is_superuser


def test_unknown_owner_is_refused(fake_claude: Any):
    with pytest.raises(CommandError, match="No user named 'nobody'"):
        think("Q?", "--owner", "nobody")


def test_bad_budget_is_refused(fake_claude: Any, alice: Any):
    with pytest.raises(CommandError, match=r"minutes: Give it at least 0\.05 minutes"):
        think("Q?", "--minutes", "0")


def test_a_failed_session_exits_non_zero_with_its_reason(fake_claude: Any, alice: Any):
    answered: list[str] = []

    def plan_then_one_cycle_then_a_bad_key(body: dict) -> Reply | HttpError:
        if "WEB QUERIES:" in prompt_of({"body": body}):
            return fake_claude.scripted_mind(body)
        if not answered:
            answered.append("thoughts")
            return Reply(text="THOUGHT: kept\nTYPE: insight")
        return HttpError(status=401, type="authentication_error")

    fake_claude.responder = plan_then_one_cycle_then_a_bad_key
    with pytest.raises(SystemExit) as exit_info:
        think("Q?", "--minutes", "1", "--owner", "alice")
    assert exit_info.value.code == 1
    assert ThinkingSession.objects.get().thoughts.get().text == "kept"


def test_without_a_provider_the_cli_exits_non_zero_with_a_message(tmp_path: Path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "DATABASE_"))}
    env["SQLITE_PATH"] = str(tmp_path / "cli.sqlite3")
    result = subprocess.run(
        [sys.executable, "manage.py", "think", "Why?", "--minutes", "0.1"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "No model provider is configured" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_binary_format_spec_is_a_clear_error(fake_claude: Any, alice: Any, tmp_path: Path):
    spec = tmp_path / "spec.bin"
    spec.write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff\xfe")
    with pytest.raises(CommandError, match="not a text file"):
        think("Why?", "--format", "custom", "--format-spec", str(spec), "--owner", "alice")
    assert not ThinkingSession.objects.exists()


@pytest.mark.parametrize(
    ("option", "field"),
    [
        ("--synthesis-minutes", "synthesis_minutes"),
        ("--max-tokens", "max_tokens"),
        ("--thinking-budget", "thinking_budget"),
    ],
)
def test_zero_is_refused_like_the_form_does(fake_claude: Any, alice: Any, option: str, field: str):
    extra = ["--thinking", "manual"] if option == "--thinking-budget" else []
    with pytest.raises(CommandError, match=field):
        think("Why?", "--minutes", "0.05", option, "0", *extra, "--owner", "alice")
    assert not ThinkingSession.objects.exists()


@pytest.mark.parametrize(
    ("tools", "offered"),
    [("none", None), ("think", ["think"]), ("search,progress", ["memory_search", "progress"])],
)
def test_the_tools_are_chosen_on_the_command_line(
    fake_claude: Any, alice: Any, tools: str, offered: list[str] | None
):
    fake_claude.responder = lambda body: fake_claude.scripted_mind({**body, "tools": []})
    out, _ = think("Why?", "--minutes", "0.05", "--tools", tools, "--owner", "alice")
    thought_calls = [r for r in fake_claude.requests if "THOUGHT:" in prompt_of(r)]
    assert thought_calls
    for request in thought_calls:
        names = [tool["name"] for tool in request["body"].get("tools", [])] or None
        assert names == offered
    assert "Estimated cost:" in out, "the expected cost is printed before it starts"


def test_an_unknown_tool_is_refused(fake_claude: Any, alice: Any):
    with pytest.raises(CommandError, match="browse is not a tool this deployment offers"):
        think("Why?", "--minutes", "0.05", "--tools", "search,browse", "--owner", "alice")
    assert not ThinkingSession.objects.exists()


def test_a_thinking_budget_with_auto_thinking_is_sent_as_manual(
    fake_claude: Any, alice: Any, settings: Any
):
    """A model that takes only manual thinking (one the tables do not know, like a local
    server's), thinking left on auto: the budget given is the one sent, not a fitted one."""
    settings.DEEPTHINK_MODEL = "local-llm"
    think("Why?", "--minutes", "0.05", "--thinking-budget", "3000", "--owner", "alice")
    session = ThinkingSession.objects.get()
    assert (session.thinking_mode, session.thinking_budget) == ("manual", 3000)
    sent = [r["body"].get("thinking") for r in fake_claude.requests if "THOUGHT:" in prompt_of(r)]
    assert sent and all(t == {"type": "enabled", "budget_tokens": 3000} for t in sent)


def test_json_and_plain_output_end_with_the_source_list(fake_claude: Any, alice: Any):
    from thinking.models import Source

    out, _ = think("Why do we dream?", "--minutes", "0.05", "--owner", "alice", "--json")
    doc = json.loads(out)
    assert list(doc)[-1] == "sources"
    session = ThinkingSession.objects.get()
    Source.objects.create(
        session=session, number=1, kind="web", title="Sleep and memory",
        url="https://example.org/sleep", key="https://example.org/sleep",
    )  # fmt: skip
    out, _ = think("--extend", str(session.pk), "--minutes", "0.05", "--owner", "alice")
    heading, _, listed = out.rpartition("\nSources (")
    assert "Done." in heading
    rows = listed.rstrip().splitlines()[1:]
    assert rows[0] == "  [1] Sleep and memory <https://example.org/sleep>"
    assert rows and all(row.startswith("  [") for row in rows), listed


def test_with_the_provider_down_it_says_why_shows_the_wait_and_ctrl_c_pauses(tmp_path: Path):
    import signal
    import socket
    import sqlite3
    import time

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "DATABASE_"))}
    env.update(
        SQLITE_PATH=str(tmp_path / "cli.sqlite3"),
        ANTHROPIC_API_KEY="sk-ant-test",
        ANTHROPIC_BASE_URL=f"http://127.0.0.1:{port}",
        DEEPTHINK_PROVIDER_BACKOFF_SECONDS="1",
        PYTHONUNBUFFERED="1",
    )
    manage = [sys.executable, "manage.py"]
    subprocess.run([*manage, "migrate", "-v0"], cwd=ROOT, env=env, check=True, timeout=180)
    process = subprocess.Popen(
        [*manage, "think", "Why?", "--minutes", "5", "--no-research"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    assert process.stdout is not None
    lines: list[str] = []
    began = time.monotonic()
    try:
        while not any("Waiting" in line for line in lines):
            line = process.stdout.readline()
            assert line, "".join(lines)
            lines.append(line)
        waited = time.monotonic() - began
        process.send_signal(signal.SIGINT)
        rest, _ = process.communicate(timeout=60)
    finally:
        process.kill()
    out = "".join(lines) + rest
    print(f"the reason was printed {waited:.1f}s after the command started")
    assert "The model provider is unavailable:" in out and "Ctrl-C pauses" in out
    assert "Traceback" not in out and process.returncode == 0, out
    assert "pausing the session" in out and "Paused session" in out
    with sqlite3.connect(tmp_path / "cli.sqlite3") as db:
        assert db.execute("select status from thinking_thinkingsession").fetchall() == [("paused",)]
