"""Research planning: what to look up before thinking, and where.

The model is asked for a plan in a line format; if the call fails or the reply is unusable,
a heuristic plan is made from the question's key terms, and the page says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from thinking.state import PlanState

MAX_STEPS = 8
MAX_QUERIES = 4
MAX_TERMS = 8

# Common words that are never key terms. Words shorter than three letters need no entry:
# key_terms never takes them.
STOPWORDS = frozenset(
    [
        "about",
        "above",
        "after",
        "again",
        "against",
        "all",
        "and",
        "any",
        "are",
        "because",
        "been",
        "before",
        "being",
        "below",
        "between",
        "both",
        "but",
        "can",
        "could",
        "did",
        "does",
        "doing",
        "down",
        "during",
        "each",
        "few",
        "for",
        "from",
        "further",
        "had",
        "has",
        "have",
        "having",
        "her",
        "here",
        "hers",
        "herself",
        "him",
        "himself",
        "his",
        "how",
        "into",
        "its",
        "itself",
        "just",
        "more",
        "most",
        "myself",
        "nor",
        "not",
        "now",
        "off",
        "once",
        "only",
        "other",
        "our",
        "ours",
        "ourselves",
        "out",
        "over",
        "own",
        "same",
        "she",
        "should",
        "some",
        "such",
        "than",
        "that",
        "the",
        "their",
        "theirs",
        "them",
        "themselves",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "through",
        "too",
        "under",
        "until",
        "very",
        "was",
        "were",
        "what",
        "when",
        "where",
        "which",
        "while",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
        "yours",
        "yourself",
        "yourselves",
        "really",
        "much",
        "many",
        "way",
        "ways",
        "thing",
        "things",
    ]
)


@dataclass
class Plan:
    steps: list[str]
    terms: list[str] = field(default_factory=list)
    web_queries: list[str] = field(default_factory=list)
    memory_queries: list[str] = field(default_factory=list)
    source: str = "model"  # "model" or "heuristic"
    note: str = ""

    def to_json(self) -> PlanState:
        return PlanState(
            steps=list(self.steps),
            terms=list(self.terms),
            web_queries=list(self.web_queries),
            memory_queries=list(self.memory_queries),
            source=self.source,
            note=self.note,
            current=0,
        )


def plan_prompt(question: str, *, focus: str = "") -> tuple[str, str]:
    """(stable, variable) parts of the planning request."""
    stable = """Before thinking, plan the research. Search queries go to a web search engine and
to the team's own knowledge base (notes and earlier answers).

Format:
PLAN:
1. [step]
2. [step]
TERMS: [important term], [important term]
WEB QUERIES:
- [a web search query]
MEMORY QUERIES:
- [a knowledge-base search query]"""
    variable = f"Question: {question}"
    if focus:
        variable += f"\nFocus on this sub-question now: {focus}"
    return stable, variable


_SECTION = re.compile(
    # "**Terms:** a, b" as well as "TERMS: a, b": emphasis may close after the colon.
    r"^[ \t*#_]*(PLAN|TERMS|WEB[ _]QUERIES|MEMORY[ _]QUERIES)[ \t*_]*:[ \t*_]*(.*)$",
    re.IGNORECASE | re.MULTILINE,
)


def _items(block: str, limit: int, max_chars: int = 300) -> list[str]:
    items = []
    for line in block.splitlines():
        item = re.sub(r"^[ \t]*(?:[-*•]|\d+[.)])[ \t]*", "", line).strip().strip('"')
        if item and not item.startswith("[") and len(item) <= max_chars:
            items.append(item)
    return items[:limit]


def parse_plan(text: str) -> Plan | None:
    """The model's plan, or None when it is unusable (no steps, or nothing to search)."""
    text = text or ""
    sections: dict[str, str] = {}
    matches = list(_SECTION.finditer(text))
    for index, match in enumerate(matches):
        name = match.group(1).upper().replace(" ", "_")
        end = matches[index + 1].start() if index + 1 < len(matches) else len(text)
        sections.setdefault(name, match.group(2) + "\n" + text[match.end() : end])
    steps = _items(sections.get("PLAN", ""), MAX_STEPS)
    terms = [
        t.strip().strip("[]")
        for t in re.split(r"[,;\n]", sections.get("TERMS", ""))
        if t.strip().strip("[]")
    ][:MAX_TERMS]
    web = _items(sections.get("WEB_QUERIES", ""), MAX_QUERIES)
    memory = _items(sections.get("MEMORY_QUERIES", ""), MAX_QUERIES)
    if not steps or not (web or memory):
        return None
    return Plan(steps=steps, terms=terms, web_queries=web, memory_queries=memory)


def key_terms(text: str, limit: int = 6) -> list[str]:
    """Content words (three letters or more) in order of appearance, without repeats."""
    seen: list[str] = []
    for word in re.findall(r"[A-Za-z][A-Za-z0-9'-]{2,}", text):
        lower = word.lower().strip("'-")
        if len(lower) >= 3 and lower not in STOPWORDS and lower not in seen:
            seen.append(lower)
    return seen[:limit]


def heuristic_plan(question: str, *, reason: str = "") -> Plan:
    """A plan from the question's key terms, for when the model's plan is unusable."""
    terms = key_terms(question)
    trimmed = " ".join(question.split())[:200]
    web = [trimmed]
    if len(terms) >= 2:
        web.append(" ".join(terms[:4]))
    return Plan(
        steps=[
            "Understand the question and its key terms",
            "Search the knowledge base and the web",
            "Explore the most important sub-questions",
            "Weigh the evidence and synthesise an answer",
        ],
        terms=terms,
        web_queries=web,
        memory_queries=[" ".join(terms) or trimmed],
        source="heuristic",
        note=reason
        or "The model's plan was unusable, so a simple plan was made from the question's terms.",
    )
