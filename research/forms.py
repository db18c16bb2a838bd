from __future__ import annotations

from pathlib import Path
from typing import Any

from django import forms

from accounts.models import Team

from .documents import DESCRIPTION, DocumentError, clean_text
from .knowledge import TEXT_SUFFIXES, max_upload_bytes, read_upload
from .models import KnowledgeItem


class SearchForm(forms.Form):
    q = forms.CharField(
        label="Search your knowledge",
        required=False,
        max_length=500,
        strip=True,
        widget=forms.SearchInput(attrs={"placeholder": "Words to look for"}),
    )


class KnowledgeItemForm(forms.ModelForm):
    url = forms.URLField(
        label="Link (optional)", required=False, max_length=2000, assume_scheme="https"
    )

    class Meta:
        model = KnowledgeItem
        fields = ["title", "body", "url"]
        widgets = {
            "title": forms.TextInput(attrs={"placeholder": "A short title"}),
            "body": forms.Textarea(
                attrs={"rows": 5, "placeholder": "What should Deep Think know?"}
            ),
        }
        error_messages = {"body": {"required": "Write something to remember."}}

    def __init__(self, *args: Any, user: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        teams = Team.objects.of(user) if user is not None else Team.objects.none()
        if teams.exists():
            self.fields["team"] = forms.ModelChoiceField(
                queryset=teams,
                required=False,
                empty_label="Only me",
                label="Shared with",
                help_text="Team members' sessions can draw on it too.",
            )

    def clean_body(self) -> str:
        body = clean_text(self.cleaned_data.get("body", ""))
        if not body:
            raise forms.ValidationError("Write something to remember.")
        return body


class UploadForm(forms.Form):
    file = forms.FileField(
        label="Document",
        help_text=(
            "PDF, HTML (the main text is kept), Markdown or text. Long documents are split "
            "into passages, so sessions cite the page or section that says it."
        ),
        widget=forms.ClearableFileInput(attrs={"accept": ",".join(sorted(TEXT_SUFFIXES))}),
    )

    def clean_file(self) -> Any:
        upload = self.cleaned_data["file"]
        name = Path(upload.name or "upload.txt").name
        if Path(name).suffix.lower() not in TEXT_SUFFIXES:
            raise forms.ValidationError(f"“{name}” is not a {DESCRIPTION} file.")
        limit = max_upload_bytes()
        if upload.size > limit:
            raise forms.ValidationError(
                f"“{name}” is {upload.size:,} bytes; the limit is {limit:,} bytes."
            )
        try:
            # Read in a process of its own, within the time and memory limits: a hostile file
            # is refused with the reason, and never holds up the server.
            self.cleaned_data["reading"] = read_upload(upload.read(), name=name)
        except DocumentError as error:
            raise forms.ValidationError(str(error)) from None
        return upload
