from __future__ import annotations

import json
from typing import Any

from django import forms
from django.conf import settings

from . import tags
from .models import FormatMode, ThinkingSession


def default_synthesis_interval(budget_seconds: float) -> float:
    """The seed synthesises every 5 minutes; short sessions need a few syntheses too."""
    return min(300.0, max(15.0, budget_seconds / 4))


class StartSessionForm(forms.Form):
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

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["format_mode"].initial = settings.DEEPTHINK_FORMAT
        limit = settings.DEEPTHINK_MAX_QUESTION_CHARS
        self.fields["question"].max_length = limit
        self.fields["question"].validators.append(forms.CharField(max_length=limit).validators[0])
        self.fields["question"].widget.attrs["maxlength"] = str(limit)

    def clean_minutes(self) -> float:
        minutes = self.cleaned_data["minutes"]
        maximum = settings.DEEPTHINK_MAX_MINUTES
        if minutes < 0.05:
            raise forms.ValidationError("Give it at least 0.05 minutes (3 seconds).")
        if minutes > maximum:
            raise forms.ValidationError(f"The longest budget here is {maximum:g} minutes.")
        return minutes

    def clean_synthesis_minutes(self) -> float | None:
        value = self.cleaned_data.get("synthesis_minutes")
        if value is not None and value <= 0:
            raise forms.ValidationError("The interval must be more than zero.")
        return value

    def clean(self) -> dict[str, Any]:
        data = super().clean()
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

    def create_session(self, *, owner: Any) -> ThinkingSession:
        budget = self.cleaned_data["minutes"] * 60
        interval = self.cleaned_data.get("synthesis_minutes")
        return ThinkingSession.objects.create(
            owner=owner,
            question=self.cleaned_data["question"],
            budget_seconds=budget,
            synthesis_interval_seconds=(
                interval * 60 if interval else default_synthesis_interval(budget)
            ),
            model_id=settings.DEEPTHINK_MODEL,
            format_mode=self.cleaned_data["format_mode"],
            format_spec=self.cleaned_data["format_spec"],
        )
