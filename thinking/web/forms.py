from __future__ import annotations

import json
from decimal import Decimal
from typing import Any, cast

from django import forms
from django.conf import settings

from accounts.models import Team
from thinking.deliberation import tools
from thinking.formatting import counted
from thinking.models import Effort, FormatMode, ThinkingMode, ThinkingSession
from thinking.people import budget, estimates, followups, limits, notify, webhooks
from thinking.provider import llm, pricing, tags
from thinking.provider.capabilities import (
    ThinkingSettings,
    best_mode,
    builtin_capabilities,
    manual_budget,
    validate,
)
from thinking.web.search_settings import SearchSettingsForm


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


class StartSessionForm(SearchSettingsForm):
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
        "webhook_url",
        *SearchSettingsForm.SEARCH_FIELDS,
        "language",
    )
    TOOLS = (
        ("search", "Search: the web and the knowledge base (only while research is on)"),
        ("think", "Think: a scratchpad the model writes to itself"),
        ("progress", "Progress: a status line the model shows you"),
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
        help_text="It writes its final answer while it is still within this estimated cost "
        "(list prices; each call priced by its own model).",
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
        help_text="Manual thinking (with auto, on a model that takes it, this means manual): "
        "at least 1024 and less than max tokens.",
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
        help_text="It writes its final answer while it is still within this many tokens.",
    )

    tools = forms.MultipleChoiceField(
        label="Tools while thinking",
        choices=TOOLS,
        required=False,
        widget=forms.CheckboxSelectMultiple,
        error_messages={"invalid_choice": "%(value)s is not a tool this deployment offers."},
    )
    # Sent by the page with its checkboxes, so none ticked means no tools; left out (an API
    # call or the CLI without tools), the deployment's defaults.
    tools_chosen = forms.BooleanField(required=False, initial=True, widget=forms.HiddenInput)

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
        available = tools.available()
        tool_field = cast(forms.MultipleChoiceField, self.fields["tools"])
        tool_field.choices = [(name, label) for name, label in self.TOOLS if name in available]
        tool_field.initial = list(available)
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
            "thinking_budget": counted(default_budget, "token")
            if default_budget
            else "fitted to max tokens",
            "effort": label("effort", settings.DEEPTHINK_EFFORT)
            if settings.DEEPTHINK_EFFORT
            else "the model's own",
            "max_tokens": str(settings.DEEPTHINK_MAX_TOKENS),
            "token_ceiling": counted(ceiling, "token") if ceiling else "none",
            "format_mode": label("format_mode", settings.DEEPTHINK_FORMAT),
            "tools": ", ".join(tools.available()) or "none",
        }

    def clean_minutes(self) -> float:
        return clean_budget_minutes(self.cleaned_data["minutes"])

    def clean_model(self) -> str:
        return clean_model_id(self.cleaned_data.get("model"))

    def clean_synthesis_minutes(self) -> float | None:
        value = self.cleaned_data.get("synthesis_minutes")
        if value is not None and value <= 0:
            raise forms.ValidationError("The interval must be more than zero.")
        if value is not None and value > settings.DEEPTHINK_MAX_MINUTES:
            raise forms.ValidationError(
                f"The longest interval here is {counted(settings.DEEPTHINK_MAX_MINUTES, 'minute')}."
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
        self._clean_ceiling(data)
        self.clean_search(data)
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
        """Empty fields take the deployment's defaults; the result must suit the model. A
        thinking budget given is never dropped: under auto thinking it means manual thinking
        on a model that takes it, and is refused (with the reason) where it cannot apply."""
        mode = data.get("thinking_mode") or settings.DEEPTHINK_THINKING
        capabilities = builtin_capabilities(data.get("model") or settings.DEEPTHINK_MODEL)
        known = capabilities if capabilities.source != "default" else None
        given = data.get("thinking_budget")
        if given is not None and mode != ThinkingMode.MANUAL:
            if mode == ThinkingMode.AUTO and "enabled" in capabilities.thinking_types:
                mode = ThinkingMode.MANUAL
            elif mode == ThinkingMode.AUTO:
                self.add_error(
                    "thinking_budget",
                    "This model decides how much to think (adaptive thinking) and takes no "
                    "thinking budget; leave it empty.",
                )
            elif "thinking_budget" not in self.errors:
                self.add_error(
                    "thinking_budget",
                    f"A thinking budget is only used with manual thinking, not "
                    f"{mode} thinking; leave it empty or choose manual.",
                )
        max_tokens = _or_default(data.get("max_tokens"), settings.DEEPTHINK_MAX_TOKENS)
        if mode == ThinkingMode.MANUAL:
            # Only an empty field takes the default (0 is a value, and validation refuses
            # it); with no default either, a budget is fitted under max tokens.
            if given is not None or settings.DEEPTHINK_THINKING_BUDGET:
                budget = _or_default(given, settings.DEEPTHINK_THINKING_BUDGET)
            else:
                budget = manual_budget(None, max_tokens) or None
        else:
            # Auto thinking that resolves to manual uses the deployment's default budget.
            budget = settings.DEEPTHINK_THINKING_BUDGET if mode == ThinkingMode.AUTO else None
        wanted = ThinkingSettings(
            mode=mode,
            budget_tokens=budget,
            effort=data.get("effort") or "",
            max_tokens=max_tokens,
        )
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

    def _clean_ceiling(self, data: dict[str, Any]) -> None:
        """A dollar ceiling (the session's, the deployment's default, or the share of a
        team's dollar budget it would reserve) needs a price for every model the session
        calls: without one it could never be held."""
        model = data.get("model") or settings.DEEPTHINK_MODEL
        team = data.get("team")
        team_dollars = team is not None and team.monthly_cost_budget_usd is not None
        if data.get("max_cost_usd") is None and not team_dollars:
            return
        missing = pricing.unpriced([model, settings.DEEPTHINK_FAST_MODEL or model])
        if missing:
            why = (
                f"the team {team.name}'s dollar budget cannot be held"
                if team is not None and data.get("max_cost_usd") is None
                else "a dollar ceiling cannot be held"
            )
            self.add_error(
                "max_cost_usd",
                f"{pricing.how_to_price(missing[0])} Without a price {why}: price it, "
                "or leave the cost ceiling empty.",
            )

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
            **self.search_fields(),
        )
        if self.cleaned_data.get("parent") is not None:
            followups.link_follow_up(session, self.cleaned_data["parent"])
        return session

    def _tool_fields(self) -> dict[str, bool]:
        """The tools chosen; when none were sent, the model's defaults (every tool the
        deployment offers)."""
        if not self.cleaned_data.get("tools_chosen"):
            return {}
        chosen = set(self.cleaned_data.get("tools") or ())
        return {
            "tools_enabled": bool(chosen),
            "search_tool": "search" in chosen,
            "think_tool": "think" in chosen,
            "progress_tool": "progress" in chosen,
        }


def _or_default[T](value: T | None, default: T) -> T:
    return default if value is None else value


def clean_budget_minutes(minutes: float) -> float:
    maximum = settings.DEEPTHINK_MAX_MINUTES
    if minutes < 0.05:
        raise forms.ValidationError("Give it at least 0.05 minutes (3 seconds).")
    if minutes > maximum:
        raise forms.ValidationError(f"The longest budget here is {counted(maximum, 'minute')}.")
    return minutes


def clean_model_id(value: str | None) -> str:
    """The model asked for (empty: DEEPTHINK_MODEL), if this deployment may run it."""
    model = (value or "").strip() or settings.DEEPTHINK_MODEL
    if model != settings.DEEPTHINK_MODEL or llm.available_models().source == "api":
        reason = llm.refuse_model(model)
        if reason:
            raise forms.ValidationError(reason)
    return model


class EstimateForm(forms.Form):
    """What a session would cost (the start form's estimate, the API's and the CLI's): the
    start form's fields that decide it, validated like the start form's."""

    minutes = forms.FloatField()
    model = forms.CharField(required=False, max_length=100)
    research = forms.ChoiceField(choices=StartSessionForm.RESEARCH, required=False)
    max_cost_usd = forms.DecimalField(
        required=False, min_value=Decimal("0.01"), max_digits=10, decimal_places=4
    )
    token_ceiling = forms.IntegerField(required=False, min_value=1000, max_value=10**12)

    def clean_minutes(self) -> float:
        return clean_budget_minutes(self.cleaned_data["minutes"])

    def clean_model(self) -> str:
        return clean_model_id(self.cleaned_data.get("model"))

    def estimate(self) -> estimates.Estimate | None:
        """The estimate, or None when the fields are not valid (the errors are on the form).
        Empty ceilings take the deployment's defaults, as a start does."""
        if not self.is_valid():
            return None
        data = self.cleaned_data
        default_cost = settings.DEEPTHINK_MAX_COST_USD
        return estimates.estimate(
            model=data["model"],
            minutes=data["minutes"],
            research=data.get("research") != "off",
            max_cost_usd=_or_default(
                data.get("max_cost_usd"), Decimal(str(default_cost)) if default_cost else None
            ),
            token_ceiling=data.get("token_ceiling") or settings.DEEPTHINK_TOKEN_CEILING or None,
        )


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
    """Think longer: more minutes for a completed session (#19). It thinks that many more
    minutes; the time it left unused is added only when the person asks for it."""

    minutes = forms.FloatField(
        initial=5,
        label="More minutes",
        widget=forms.NumberInput(attrs={"step": "any", "min": "0.05"}),
    )
    add_remainder = forms.BooleanField(required=False, label="Also add the unused time")

    def __init__(self, *args: Any, unused_seconds: float = 0.0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.unused_seconds = unused_seconds
        if unused_seconds >= 1:
            self.fields[
                "add_remainder"
            ].label = (
                f"Also add the {counted(round(unused_seconds / 60, 1), 'minute')} it left unused"
            )

    def clean_minutes(self) -> float:
        minutes = self.cleaned_data["minutes"]
        problem = followups.minutes_problem(minutes)
        if problem:
            raise forms.ValidationError(problem)
        return minutes
