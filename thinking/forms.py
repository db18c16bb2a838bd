from __future__ import annotations

import json
from decimal import Decimal
from typing import Any, cast

from django import forms
from django.conf import settings

from accounts.models import Team

from . import budget, followups, limits, llm, notify, tags, webhooks
from .capabilities import (
    ThinkingSettings,
    best_mode,
    builtin_capabilities,
    manual_budget,
    validate,
)
from .models import Effort, FormatMode, ThinkingMode, ThinkingSession


def default_synthesis_interval(budget_seconds: float) -> float:
    """The seed synthesises every 5 minutes; short sessions need a few syntheses too."""
    return min(300.0, max(15.0, budget_seconds / 4))


class MailSelect(forms.NullBooleanSelect):
    """Empty means the person's default (their settings, else by the session's length)."""

    def __init__(self, attrs: dict[str, Any] | None = None) -> None:
        super().__init__(attrs)
        self.choices = [
            ("unknown", "As in my settings (by default: for 10 minutes or more)"),
            ("true", "Yes"),
            ("false", "No"),
        ]


class StartSessionForm(forms.Form):
    # Fields in the collapsed "advanced" section: it opens when one of them has an error.
    ADVANCED = (
        "model",
        "max_cost_usd",
        "thinking_mode",
        "thinking_budget",
        "effort",
        "max_tokens",
        "token_ceiling",
        "format_mode",
        "format_spec",
        "tools",
        "team",
        "webhook_url",
    )
    TOOLS = (
        ("all", "Search and scratchpad"),
        ("search", "Search only"),
        ("none", "None: no search or scratchpad tools while thinking"),
    )
    # Seed 003's switches; empty (an API call or the CLI that leaves them out) means on.
    RESEARCH = (
        ("on", "On: plan, then search the knowledge base (and the web, if on) and cite sources"),
        ("off", "Off: no plan, no searches, no evidence, no search tools; own knowledge only"),
    )
    WEB = (
        ("on", "On: research may search the web (when a web search key is configured)"),
        ("off", "Off: never search the web; only the knowledge base"),
    )

    question = forms.CharField(
        widget=forms.Textarea(
            attrs={"rows": 3, "placeholder": "What should Deep Think deliberate over?"}
        ),
        strip=True,
    )
    minutes = forms.FloatField(
        initial=5,
        help_text="Active thinking time. Pauses do not count.",
        widget=forms.NumberInput(attrs={"step": "any"}),
    )
    synthesis_minutes = forms.FloatField(
        required=False,
        label="Synthesis every (minutes)",
        help_text="Leave empty for a quarter of the budget, at most 5 minutes.",
        widget=forms.NumberInput(attrs={"step": "any"}),
    )

    format_mode = forms.ChoiceField(
        label="Thought format",
        choices=FormatMode.choices,
        required=False,
        help_text="How each thinking cycle is structured; enhanced splits analysis, plan and "
        "reasoning.",
    )
    format_spec = forms.CharField(
        label="Custom tag spec (JSON)",
        required=False,
        widget=forms.Textarea(
            attrs={
                "rows": 4,
                "placeholder": '[{"tag": "think", "children": [{"tag": "doubts"}]}, '
                '{"tag": "interactive", "children": [{"tag": "response"}, '
                '{"tag": "stop_signal", "supported_types": ["boolean"]}]}]',
            }
        ),
        help_text="Only for the custom format: a list of tags, each with optional children.",
    )

    model = forms.CharField(
        label="Model",
        required=False,
        max_length=100,
        widget=forms.Select,
        help_text="The model that thinks (cycles, syntheses, the final answer).",
    )
    max_cost_usd = forms.DecimalField(
        label="Cost ceiling (US$)",
        required=False,
        min_value=Decimal("0.01"),
        max_digits=10,
        decimal_places=4,
        help_text="At this estimated cost (list prices) the session writes its final answer.",
    )

    thinking_mode = forms.ChoiceField(
        label="Model thinking",
        choices=ThinkingMode.choices,
        required=False,
        help_text="Adaptive lets the model decide how much to think; its reasoning streams live.",
    )
    thinking_budget = forms.IntegerField(
        label="Thinking tokens (manual mode)",
        required=False,
        max_value=1_000_000,
        help_text="For manual thinking: at least 1024 and less than max tokens.",
    )
    effort = forms.ChoiceField(
        label="Effort",
        choices=Effort.choices,
        required=False,
        help_text="How much effort the model spends on every reply.",
    )
    max_tokens = forms.IntegerField(
        label="Max tokens per reply",
        required=False,
        min_value=256,
        max_value=1_000_000,
        help_text="Thinking counts toward it.",
    )
    token_ceiling = forms.IntegerField(
        label="Token ceiling",
        required=False,
        min_value=1000,
        max_value=10**12,
        help_text="After this many tokens in all, the session writes its final answer.",
    )

    tools = forms.ChoiceField(
        label="Tools while thinking",
        choices=TOOLS,
        required=False,
        help_text="Web and knowledge-base search, and a scratchpad the model writes to itself.",
    )

    research = forms.ChoiceField(
        label="Research",
        choices=RESEARCH,
        required=False,
        initial="on",
        widget=forms.RadioSelect,
    )
    web = forms.ChoiceField(
        label="Web search",
        choices=WEB,
        required=False,
        initial="on",
        widget=forms.RadioSelect,
        help_text="Only matters while research is on.",
    )

    team = forms.ModelChoiceField(
        label="Shared with",
        queryset=Team.objects.none(),
        required=False,
        empty_label="Only me",
        help_text="Team members can watch, pause, steer and export it; it counts against the "
        "team's monthly token budget.",
    )

    # Hearing when it ends, and following up (#19).
    notify = forms.NullBooleanField(
        label="Mail me when it ends",
        required=False,
        widget=MailSelect,
    )
    webhook_url = forms.URLField(
        label="Webhook URL",
        required=False,
        max_length=2000,
        assume_scheme="https",
        help_text="When it ends, a signed POST of its summary goes here.",
    )
    parent = forms.UUIDField(required=False, widget=forms.HiddenInput)

    def __init__(self, *args: Any, user: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The person starting the session: the teams they may share with, and their limits.
        self.user = user
        # Fields declared above: their classes are known.
        cast(forms.ModelChoiceField, self.fields["team"]).queryset = Team.objects.of(user)
        self.fields["format_mode"].initial = settings.DEEPTHINK_FORMAT
        self.fields["thinking_mode"].initial = settings.DEEPTHINK_THINKING
        self.fields["thinking_budget"].initial = settings.DEEPTHINK_THINKING_BUDGET
        self.fields["effort"].initial = settings.DEEPTHINK_EFFORT
        self.fields["max_tokens"].initial = settings.DEEPTHINK_MAX_TOKENS
        self.fields["token_ceiling"].initial = settings.DEEPTHINK_TOKEN_CEILING or None
        self.fields["max_cost_usd"].initial = settings.DEEPTHINK_MAX_COST_USD or None
        self.fields["model"].initial = settings.DEEPTHINK_MODEL
        self.fields["model"].widget.choices = [(m, m) for m in llm.available_models().ids]
        limit = settings.DEEPTHINK_MAX_QUESTION_CHARS
        cast(forms.CharField, self.fields["question"]).max_length = limit
        self.fields["question"].validators.append(forms.CharField(max_length=limit).validators[0])
        self.fields["question"].widget.attrs["maxlength"] = str(limit)
        self.fields["tools"].initial = self.default_tools()
        for name, default in self.defaults().items():
            field = self.fields[name]
            field.help_text = f"{field.help_text} Default: {default}."

    @staticmethod
    def default_thinking_mode() -> str:
        """DEEPTHINK_THINKING, or when unset the best the default model takes."""
        if settings.DEEPTHINK_THINKING != ThinkingMode.AUTO:
            return settings.DEEPTHINK_THINKING
        caps = builtin_capabilities(settings.DEEPTHINK_MODEL)
        return best_mode(caps, max_tokens=settings.DEEPTHINK_MAX_TOKENS)

    @staticmethod
    def default_tools() -> str:
        if not settings.DEEPTHINK_TOOLS:
            return "none"
        return "all" if settings.DEEPTHINK_THINK_TOOL else "search"

    def defaults(self) -> dict[str, str]:
        """What an empty advanced field means on this deployment, in words for the form."""

        def label(name: str, value: object) -> str:
            choices = dict(self.fields[name].choices)  # type: ignore[attr-defined]
            return str(choices.get(value, value)).split(" (")[0].split(":")[0].lower()

        ceiling = settings.DEEPTHINK_TOKEN_CEILING
        default_budget = settings.DEEPTHINK_THINKING_BUDGET
        return {
            "model": settings.DEEPTHINK_MODEL,
            "max_cost_usd": f"${settings.DEEPTHINK_MAX_COST_USD:g}"
            if settings.DEEPTHINK_MAX_COST_USD
            else "none",
            "thinking_mode": label("thinking_mode", self.default_thinking_mode()),
            "thinking_budget": f"{default_budget} tokens"
            if default_budget
            else "fitted to max tokens",
            "effort": label("effort", settings.DEEPTHINK_EFFORT)
            if settings.DEEPTHINK_EFFORT
            else "the model's own",
            "max_tokens": str(settings.DEEPTHINK_MAX_TOKENS),
            "token_ceiling": f"{ceiling} tokens" if ceiling else "none",
            "format_mode": label("format_mode", settings.DEEPTHINK_FORMAT),
            "tools": label("tools", self.default_tools()),
        }

    def clean_minutes(self) -> float:
        minutes = self.cleaned_data["minutes"]
        maximum = settings.DEEPTHINK_MAX_MINUTES
        if minutes < 0.05:
            raise forms.ValidationError("Give it at least 0.05 minutes (3 seconds).")
        if minutes > maximum:
            raise forms.ValidationError(f"The longest budget here is {maximum:g} minutes.")
        return minutes

    def clean_model(self) -> str:
        model = (self.cleaned_data.get("model") or "").strip() or settings.DEEPTHINK_MODEL
        if model != settings.DEEPTHINK_MODEL or llm.available_models().source == "api":
            reason = llm.refuse_model(model)
            if reason:
                raise forms.ValidationError(reason)
        return model

    def clean_synthesis_minutes(self) -> float | None:
        value = self.cleaned_data.get("synthesis_minutes")
        if value is not None and value <= 0:
            raise forms.ValidationError("The interval must be more than zero.")
        if value is not None and value > settings.DEEPTHINK_MAX_MINUTES:
            raise forms.ValidationError(
                f"The longest interval here is {settings.DEEPTHINK_MAX_MINUTES:g} minutes."
            )
        return value

    def clean_parent(self) -> ThinkingSession | None:
        """A follow-up's parent: one this person may see (else as if it did not exist)."""
        pk = self.cleaned_data.get("parent")
        if pk is None:
            return None
        parent = ThinkingSession.objects.visible_to(self.user).filter(pk=pk).first()
        if parent is None:
            raise forms.ValidationError("No such session.", code="not_found")
        problem = followups.refuse_parent(parent)
        if problem:
            raise forms.ValidationError(problem, code="not_finished")
        return parent

    def clean_webhook_url(self) -> str:
        url = self.cleaned_data.get("webhook_url") or ""
        problem = webhooks.refusal(url, owner=self.user) if url else ""
        if problem:
            raise forms.ValidationError(problem, code="refused")
        return url

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data  # what Form.clean returns
        self._clean_thinking(data)
        if self.user is not None and data.get("minutes") is not None:
            reason = limits.refuse_start(self.user, minutes=data["minutes"], team=data.get("team"))
            if reason:
                self.add_error(None, reason)
        mode = data.get("format_mode") or settings.DEEPTHINK_FORMAT
        data["format_mode"] = mode
        raw = (data.get("format_spec") or "").strip()
        data["format_spec"] = None
        if mode == FormatMode.CUSTOM:
            if not raw:
                self.add_error("format_spec", "The custom format needs a tag spec.")
                return data
            try:
                parsed = json.loads(raw)
                tags.spec_from_json(parsed)
            except json.JSONDecodeError as error:
                self.add_error("format_spec", f"Not valid JSON: {error.msg} (line {error.lineno}).")
            except tags.SpecError as error:
                self.add_error("format_spec", f"Not a valid tag spec: {error}")
            else:
                data["format_spec"] = parsed
        elif raw:
            self.add_error("format_spec", "A tag spec is only used with the custom format.")
        return data

    def _clean_thinking(self, data: dict[str, Any]) -> None:
        """Empty fields take the deployment's defaults; the result must suit the model."""
        mode = data.get("thinking_mode") or settings.DEEPTHINK_THINKING
        wanted = ThinkingSettings(
            mode=mode,
            # Only an empty field takes the default (0 is a value, and validation refuses
            # it); with no default either, a budget is fitted under max tokens.
            budget_tokens=(
                _or_default(data.get("thinking_budget"), settings.DEEPTHINK_THINKING_BUDGET)
                if data.get("thinking_budget") is not None or settings.DEEPTHINK_THINKING_BUDGET
                else manual_budget(
                    None, _or_default(data.get("max_tokens"), settings.DEEPTHINK_MAX_TOKENS)
                )
                or None
            )
            if mode == ThinkingMode.MANUAL
            else None,
            effort=data.get("effort") or "",
            max_tokens=_or_default(data.get("max_tokens"), settings.DEEPTHINK_MAX_TOKENS),
        )
        capabilities = builtin_capabilities(data.get("model") or settings.DEEPTHINK_MODEL)
        known = capabilities if capabilities.source != "default" else None
        fields = {
            "mode": "thinking_mode",
            "budget_tokens": "thinking_budget",
            "effort": "effort",
            "max_tokens": "max_tokens",
        }
        for field, message in validate(wanted, known).items():
            if fields[field] not in self.errors:
                self.add_error(fields[field], message)
        data["thinking"] = wanted
        if data.get("token_ceiling") is None and settings.DEEPTHINK_TOKEN_CEILING:
            data["token_ceiling"] = settings.DEEPTHINK_TOKEN_CEILING
        if data.get("max_cost_usd") is None and settings.DEEPTHINK_MAX_COST_USD:
            data["max_cost_usd"] = Decimal(str(settings.DEEPTHINK_MAX_COST_USD))

    def create_session(self, *, owner: Any) -> ThinkingSession:
        """Call inside a transaction: a team session reserves its share of the team's
        budget with the team row locked (raises budget.BudgetExhausted when none is left)."""
        thinking: ThinkingSettings = self.cleaned_data["thinking"]
        team = self.cleaned_data.get("team")
        # The atomic limit decision, in the caller's transaction (clean() only warned early).
        # It locks the owner's row, then the team's: the budget below locks the team's too,
        # always in that order.
        refused = limits.reserve_start(owner, minutes=self.cleaned_data["minutes"], team=team)
        if refused:
            raise limits.LimitRefused(refused)
        token_ceiling, max_cost = budget.reserve(
            team,
            tokens=self.cleaned_data.get("token_ceiling"),
            dollars=self.cleaned_data.get("max_cost_usd"),
        )
        seconds = self.cleaned_data["minutes"] * 60
        interval = self.cleaned_data.get("synthesis_minutes")
        session = ThinkingSession.objects.create(
            owner=owner,
            question=self.cleaned_data["question"],
            budget_seconds=seconds,
            synthesis_interval_seconds=(
                interval * 60 if interval else default_synthesis_interval(seconds)
            ),
            model_id=self.cleaned_data.get("model") or settings.DEEPTHINK_MODEL,
            format_mode=self.cleaned_data["format_mode"],
            format_spec=self.cleaned_data["format_spec"],
            thinking_mode=thinking.mode,
            thinking_budget=thinking.budget_tokens,
            effort=thinking.effort,
            max_tokens=thinking.max_tokens,
            team=team,
            token_ceiling=token_ceiling,
            max_cost_usd=max_cost,
            research_enabled=self.cleaned_data.get("research") != "off",
            web_enabled=self.cleaned_data.get("web") != "off",
            notify_email=notify.mail_default(owner, seconds / 60)
            if self.cleaned_data.get("notify") is None
            else self.cleaned_data["notify"],
            webhook_url=self.cleaned_data.get("webhook_url") or "",
            **self._tool_fields(),
        )
        if self.cleaned_data.get("parent") is not None:
            followups.link_follow_up(session, self.cleaned_data["parent"])
        return session

    def _tool_fields(self) -> dict[str, bool]:
        """An empty choice keeps the model's defaults (the deployment's settings decide)."""
        tools = self.cleaned_data.get("tools")
        if not tools:
            return {}
        return {"tools_enabled": tools != "none", "think_tool": tools == "all"}


def _or_default[T](value: T | None, default: T) -> T:
    return default if value is None else value


class SteerForm(forms.Form):
    """A person steering a running session: a hint, or a sub-question to explore next."""

    kind = forms.ChoiceField(
        choices=[("hint", "Hint"), ("question", "Sub-question")],
        initial="hint",
        widget=forms.RadioSelect,
    )
    text = forms.CharField(
        max_length=1000,
        strip=True,
        widget=forms.Textarea(
            attrs={"rows": 2, "placeholder": "Steer the thinking: a hint or a question"}
        ),
    )


class ExtendForm(forms.Form):
    """Think longer: more minutes for a completed session (#19)."""

    minutes = forms.FloatField(
        initial=5,
        label="More minutes",
        widget=forms.NumberInput(attrs={"step": "any", "min": "0.05"}),
    )

    def clean_minutes(self) -> float:
        minutes = self.cleaned_data["minutes"]
        problem = followups.minutes_problem(minutes)
        if problem:
            raise forms.ValidationError(problem)
        return minutes
