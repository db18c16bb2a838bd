"""Ranked full-text search over the knowledge base: the only module that queries the
full-text structures made by migration 0002.

The query is read as a bag of words on both databases: words are extracted from the text
and matched with OR, ranked so that items matching more of them, and matching in the title,
come first. Quotes, operators, column filters and punctuation are never passed through, so
text typed by a person or written by the model cannot change what the query means, and
every value reaches the database as a bound parameter.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.db import connection

from config.hops import db_hop

if TYPE_CHECKING:
    from .models import Passage

# A word is a run of letters and digits (underscores separate, as in the FTS5 tokenizer).
WORD = re.compile(r"[^\W_]+")
MAX_TERMS = 32
MAX_TERM_CHARS = 64
MAX_LIMIT = 100
SNIPPET_CHARS = 300
# Operator words in one of the query languages; they are stop words anyway.
OPERATOR_WORDS = frozenset({"and", "or", "not", "near"})

# Must stay identical to the index expression in migration 0002.
PG_DOCUMENT = (
    "setweight(to_tsvector('english'::regconfig, k.title), 'A')"
    " || setweight(to_tsvector('english'::regconfig, k.body), 'D')"
)
# ts_rank_cd weights for D, C, B, A: a title hit counts ten times a body hit.
PG_WEIGHTS = "{0.1, 0.2, 0.4, 1.0}"
# ts_headline drops anything that parses as an HTML tag ("<b>", "<script>"); excerpts must
# show the text as written (templates escape it), so "<" is hidden from it and restored.
PG_LT_STANDIN = "\u2039\u2039\u2039"
# bm25 column weights for (title, body), the same proportion as on PostgreSQL.
SQLITE_WEIGHTS = (10.0, 1.0)
# The smallest score reported: a match is always worth more than nothing.
MIN_SCORE = 1e-9


@dataclass(frozen=True)
class MemoryResult:
    item_id: int
    title: str
    snippet: str
    url: str
    source: str
    score: float  # higher is better; comparable only within one search
    # The passage of the item that best matches the query (what the model is shown and
    # citations point to), with where it sits ("p. 3 · § Results").
    passage: str = ""
    passage_id: int | None = None
    locator: str = ""


def query_terms(text: str) -> list[str]:
    """The distinct words of `text`, NFKC-normalised as stored text is ("ﬁ" is "fi") and
    lower-cased, at most MAX_TERMS of them."""
    terms: list[str] = []
    for match in WORD.finditer(unicodedata.normalize("NFKC", text or "")):
        term = match.group().lower()[:MAX_TERM_CHARS]
        if term not in OPERATOR_WORDS and term not in terms:
            terms.append(term)
            if len(terms) == MAX_TERMS:
                break
    return terms


def fts5_query(terms: Sequence[str]) -> str:
    # Each term is a quoted FTS5 string (a doubled quote is how FTS5 escapes one), so no
    # term can be read as an operator, a column filter or a prefix.
    return " OR ".join('"{}"'.format(term.replace('"', '""')) for term in terms)


def websearch_query(terms: Sequence[str]) -> str:
    # Terms hold only letters and digits, and the operator words are gone, so
    # websearch_to_tsquery sees nothing but words joined by "or".
    return " or ".join(terms)


def search_memory(
    *, owner_ids: Sequence[int], query: str, limit: int = 10, team_ids: Sequence[int] = ()
) -> list[MemoryResult]:
    """The knowledge items of these owners, or shared with these teams, that best match
    `query`, best first.

    Any text is a valid query: one without words (empty, punctuation, emoji) matches
    nothing and returns [].
    """
    owners = [int(owner_id) for owner_id in owner_ids]
    # -1 matches no team and keeps the SQL a plain IN (...) when there are none.
    teams = [int(team_id) for team_id in team_ids] or [-1]
    terms = query_terms(query)
    limit = max(0, min(int(limit), MAX_LIMIT))
    if not owners or not terms or limit == 0:
        return []
    if connection.vendor == "sqlite":
        rows = _search_sqlite(owners, teams, terms, limit)
    elif connection.vendor == "postgresql":
        rows = _search_postgresql(owners, teams, terms, limit)
    else:  # no full-text index was made for this database
        return []
    passages = best_passages([row[0] for row in rows], terms)
    results = []
    for item_id, title, url, source, snippet, score in rows:
        best = passages.get(item_id)
        results.append(
            MemoryResult(
                item_id=item_id,
                title=title,
                snippet=_clean_snippet(snippet),
                url=url,
                source=source,
                score=max(float(score or 0.0), MIN_SCORE),
                passage=best.text if best else "",
                passage_id=best.pk if best else None,
                locator=best.locator if best else "",
            )
        )
    return results


def best_passages(item_ids: Sequence[int], terms: Sequence[str]) -> dict[int, Passage]:
    """For each item, the passage where the query's words occur most (a heading hit counts
    double); ties go to the earlier passage."""
    from .models import Passage

    wanted = set(terms)
    best: dict[int, tuple[int, Passage]] = {}
    for passage in Passage.objects.filter(item_id__in=list(item_ids)).order_by("item", "position"):
        words = [w.lower() for w in WORD.findall(passage.text)]
        score = sum(1 for w in words if w in wanted)
        score += 2 * sum(1 for w in WORD.findall(passage.heading.lower()) if w in wanted)
        if passage.item_id not in best or score > best[passage.item_id][0]:
            best[passage.item_id] = (score, passage)
    return {item_id: passage for item_id, (_, passage) in best.items()}


async def asearch_memory(
    *, owner_ids: Sequence[int], query: str, limit: int = 10, team_ids: Sequence[int] = ()
) -> list[MemoryResult]:
    """`search_memory` for async code (the deliberation loop)."""
    return await db_hop(search_memory)(
        owner_ids=owner_ids, query=query, limit=limit, team_ids=team_ids
    )


def _placeholders(values: Sequence[object]) -> str:
    return ", ".join(["%s"] * len(values))


def _search_sqlite(
    owners: list[int], teams: list[int], terms: list[str], limit: int
) -> list[tuple]:
    # bm25() is lower-is-better and negative for matches; negate it for "higher is better".
    # The excerpt is a short body whole, else its best-matching window of up to 24 tokens.
    sql = f"""
        SELECT k.id, k.title, k.url, k.source,
               CASE WHEN length(k.body) <= %s THEN k.body
                    ELSE snippet(research_knowledgeitem_fts, 1, '', '', '…', 24) END,
               -bm25(research_knowledgeitem_fts, %s, %s) AS score
        FROM research_knowledgeitem_fts
        JOIN research_knowledgeitem AS k ON k.id = research_knowledgeitem_fts.rowid
        WHERE research_knowledgeitem_fts MATCH %s
          AND (k.owner_id IN ({_placeholders(owners)}) OR k.team_id IN ({_placeholders(teams)}))
        ORDER BY score DESC, k.id DESC
        LIMIT %s
    """  # noqa: S608 - only placeholders are interpolated
    params: list[str | int | float] = [
        SNIPPET_CHARS,
        *SQLITE_WEIGHTS,
        fts5_query(terms),
        *owners,
        *teams,
        limit,
    ]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return list(cursor.fetchall())


def _search_postgresql(
    owners: list[int], teams: list[int], terms: list[str], limit: int
) -> list[tuple]:
    # Rank first, then build excerpts only for the rows that will be shown (ts_headline
    # re-parses the whole body); a short body is its own excerpt. Normalisation 1 divides
    # by 1 + log(length), so a long body that repeats a word does not bury a short item
    # with the word in its title.
    sql = f"""
        WITH q AS (SELECT websearch_to_tsquery('english', %s) AS query),
        ranked AS (
            SELECT k.id, k.title, k.body, k.url, k.source,
                   ts_rank_cd(%s::float4[], {PG_DOCUMENT}, q.query, 1) AS score
            FROM research_knowledgeitem AS k, q
            WHERE (k.owner_id IN ({_placeholders(owners)})
                   OR k.team_id IN ({_placeholders(teams)}))
              AND ({PG_DOCUMENT}) @@ q.query
            ORDER BY score DESC, k.id DESC
            LIMIT %s
        )
        SELECT ranked.id, ranked.title, ranked.url, ranked.source,
               CASE WHEN length(ranked.body) <= %s THEN ranked.body
                    ELSE ts_headline('english', replace(ranked.body, '<', %s), q.query,
                                     'StartSel="", StopSel="", MinWords=12, MaxWords=30, '
                                     'MaxFragments=1, FragmentDelimiter=" … "') END,
               ranked.score
        FROM ranked, q
        ORDER BY ranked.score DESC, ranked.id DESC
    """  # noqa: S608 - only placeholders and constants are interpolated
    params: list[str | int | float] = [
        websearch_query(terms),
        PG_WEIGHTS,
        *owners,
        *teams,
        limit,
        SNIPPET_CHARS,
        PG_LT_STANDIN,
    ]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    return [(*row[:4], (row[4] or "").replace(PG_LT_STANDIN, "<"), row[5]) for row in rows]


def _clean_snippet(text: str | None) -> str:
    snippet = " ".join((text or "").split())
    if len(snippet) > SNIPPET_CHARS:
        snippet = snippet[: SNIPPET_CHARS - 1].rstrip() + "…"
    return snippet
