"""A session's web-search and language settings on the start form (and so the API and the
CLI, which go through it): the providers it searches, the domains its results must or must
not be on, how recent they must be, and the language it writes in."""

from __future__ import annotations

import re
from typing import Any

from django import forms

from research import providers
from thinking.models import SearchRecency

MAX_DOMAINS = 20
# A host name as people write one: labels of letters, digits and hyphens (IDNA-encoded
# first), at least one dot, a top-level label of letters or an IDNA label.
DOMAIN = re.compile(
    r"^(?=.{1,253}$)(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+(?:[a-z]{2,63}|xn--[a-z0-9-]{1,59})$"
)
# A language's name, in any script: words of letters joined by spaces, hyphens or apostrophes
# ("French", "português do Brasil", "Schwiizerdütsch").
LANGUAGE = re.compile(r"^[^\W\d_]+(?:[ '\-][^\W\d_]+)*$")
LANGUAGE_CHARS = 40


def parse_domains(text: str) -> list[str]:
    """The domains in `text` (one per line, or separated by commas or spaces), normalised:
    lower case, no scheme, path, port, "www." or "*."; each at most once. Raises
    ValidationError naming the first that is not a domain name."""
    found: list[str] = []
    for raw in re.split(r"[\s,]+", text.strip()):
        if not raw:
            continue
        domain = re.sub(r"^[a-z][a-z0-9+.-]*://", "", raw.lower())
        domain = domain.split("/", 1)[0].split(":", 1)[0].rstrip(".")
        domain = domain.removeprefix("*.").removeprefix("www.")
        try:
            domain = domain.encode("idna").decode("ascii")
        except UnicodeError:
            domain = ""
        if not DOMAIN.match(domain):
            raise forms.ValidationError(
                f"“{raw[:80]}” is not a domain name (like example.org).", code="invalid"
            )
        if domain not in found:
            found.append(domain)
    if len(found) > MAX_DOMAINS:
        raise forms.ValidationError(f"At most {MAX_DOMAINS} domains.", code="too_many")
    return found


class SearchSettingsForm(forms.Form):
    """The fields; StartSessionForm inherits them and calls `clean_search` from its clean."""

    SEARCH_FIELDS = ("web_search", "include_domains", "exclude_domains", "search_recency")

    web_search = forms.MultipleChoiceField(
        label="Web search providers",
        choices=[(name, providers.PROVIDERS[name].label) for name in providers.NAMES],
        required=False,
        widget=forms.CheckboxSelectMultiple,
        error_messages={
            "invalid_choice": "Unknown web search provider “%(value)s”: choose from "
            + ", ".join(providers.NAMES)
            + "."
        },
    )
    include_domains = forms.CharField(
        label="Only these sites",
        required=False,
        widget=forms.Textarea(attrs={"rows": 2, "placeholder": "nature.com, arxiv.org"}),
        help_text="Web results only from these domains (and their subdomains).",
    )
    exclude_domains = forms.CharField(
        label="Never these sites",
        required=False,
        widget=forms.Textarea(attrs={"rows": 2, "placeholder": "pinterest.com"}),
        help_text="Web results never from these domains (and their subdomains).",
    )
    search_recency = forms.ChoiceField(
        label="Web results from",
        choices=SearchRecency.choices,
        required=False,
        help_text="How recent web pages must be.",
    )
    language = forms.CharField(
        label="Language",
        required=False,
        max_length=LANGUAGE_CHARS,
        help_text="The language of its thoughts, syntheses and answer. Empty: the language of "
        "the question.",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        ready = providers.configured()
        default = providers.default_names()
        labels = [providers.PROVIDERS[name].label for name in ready]
        self.fields["web_search"].help_text = (
            f"Set up here: {', '.join(labels)}. Empty: "
            f"{', '.join(providers.PROVIDERS[name].label for name in default)}."
            if ready
            else "No web search is set up here."
        )

    def clean_include_domains(self) -> list[str]:
        return parse_domains(self.cleaned_data.get("include_domains") or "")

    def clean_exclude_domains(self) -> list[str]:
        return parse_domains(self.cleaned_data.get("exclude_domains") or "")

    def clean_language(self) -> str:
        language = " ".join((self.cleaned_data.get("language") or "").split())
        if language and not LANGUAGE.match(language):
            raise forms.ValidationError(
                "A language is its name in letters (e.g. French, Deutsch, 日本語).",
                code="invalid",
            )
        return language

    def clean_search(self, data: dict[str, Any]) -> None:
        """The providers must be set up here; the domain lists must not overlap; and none of
        it is taken (it would be dropped) while research or web search is off."""
        for name in data.get("web_search") or ():
            problem = providers.not_configured(name)
            if problem:
                self.add_error("web_search", problem)
        both = set(data.get("include_domains") or ()) & set(data.get("exclude_domains") or ())
        if both:
            self.add_error(
                "exclude_domains",
                f"{sorted(both)[0]} is both included and excluded: keep it in one list.",
            )
        given = [name for name in self.SEARCH_FIELDS if data.get(name)]
        off = data.get("research") == "off" or data.get("web") == "off"
        if given and off:
            self.add_error(
                given[0],
                "Web search settings apply only while research and web search are on.",
            )

    def search_fields(self) -> dict[str, Any]:
        """The session's fields, as stored. A follow-up given none of its own keeps its
        parent's (the page's follow-up form asks only for the question), as far as they
        still apply: providers still set up here, with research and web search on."""
        data = self.cleaned_data
        fields = {
            "web_search": list(dict.fromkeys(data.get("web_search") or ())),
            "include_domains": data.get("include_domains") or [],
            "exclude_domains": data.get("exclude_domains") or [],
            "search_recency": data.get("search_recency") or "",
            "language": data.get("language") or "",
        }
        parent = data.get("parent")
        if parent is None or any(fields.values()):
            return fields
        fields["language"] = parent.language
        if data.get("research") != "off" and data.get("web") != "off":
            ready = set(providers.configured())
            fields.update(
                web_search=[name for name in parent.web_search if name in ready],
                include_domains=list(parent.include_domains),
                exclude_domains=list(parent.exclude_domains),
                search_recency=parent.search_recency,
            )
        return fields
