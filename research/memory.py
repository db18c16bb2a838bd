"""Ranked full-text search over the knowledge base: the only module that queries the
full-text structures made by migration 0007 (the vector kept in the row by 0008).

Search finds passages (research.models.Passage, each with its item's title and its
heading), not whole items, so a long document does not outrank the short page that says the
thing, and the passage shown for a source (to a person, to the model, to a citation check) is
the one that matched best. The query is read as a bag of words on both databases: words are
extracted from the text and matched with OR, ranked by relevance (bm25 on both: FTS5's on
SQLite, the same formula over ts_rank_cd's word counts on PostgreSQL) so that passages
matching more of them, rarer ones, and in the title or heading, come first. English stop
words are left out of the query on both (PostgreSQL drops them itself; on SQLite they would
match nearly every passage, each to be scored). Quotes, operators, column filters and
punctuation are never passed through, so text typed by a person or written by the model
cannot change what the query means, and every value reaches the database as a bound
parameter.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.db import connection, transaction

from config.hops import db_hop

if TYPE_CHECKING:
    from django.db.backends.utils import CursorWrapper

    from .models import Passage

# A word is a run of letters and digits (underscores separate, as in the FTS5 tokenizer).
WORD = re.compile(r"[^\W_]+")
MAX_TERMS = 32
MAX_TERM_CHARS = 64
MAX_LIMIT = 100
SNIPPET_CHARS = 300
# Operator words in one of the query languages; they are stop words anyway.
OPERATOR_WORDS = frozenset({"and", "or", "not", "near"})
# PostgreSQL's English stop words (tsearch_data/english.stop): the words its 'english'
# configuration drops from text and queries. Left out of queries on both databases.
_ENGLISH_STOP = """i me my myself we our ours ourselves you your yours yourself yourselves he him
    his himself she her hers herself it its itself they them their theirs themselves what which
    who whom this that these those am is are was were be been being have has had having do
    does did doing a an the and but if or because as until while of at by for with about
    against between into through during before after above below to from up down in out on
    off over under again further then once here there when where why how all any both each
    few more most other some such no nor not only own same so than too very s t can will
    just don should now"""
STOP_WORDS = frozenset(_ENGLISH_STOP.split())
# A search scores the best WINDOW_PER_RESULT x limit matching passages first, then leaves
# out copies and an item's passages past `per_item`; only when that leaves too few results
# does it look further (x 10, then every match).
WINDOW_PER_RESULT = 20
# PostgreSQL: a word's passages are counted up to this many for its weight (every word at
# least this common weighs the same, little).
IDF_COUNT_CAP = 300
# Max-score pruning (_search_postgresql): the first pass takes the passages with one word
# of at least this many times the rarest word's weight x (k1 + 1), or two of the others.
PRUNE_FACTOR = 2.0
# The planner's cost of reading a page out of order, for a search (PostgreSQL's default, 4,
# is for disks): the passages' pages are read by every search, so they are in memory, and
# fetching the few hundred that match through the GIN index costs far less than reading
# every passage, which the default has it prefer from a tenth of the table up.
PG_RANDOM_PAGE_COST = "1.1"

# ts_rank_cd weights for D, C, B, A: a title hit (A) counts as ten hits in the text (D), a
# heading hit (B) as four. ts_rank_cd of one word, over PG_TEXT_WEIGHT, is the word's count
# in a passage so weighted.
PG_WEIGHTS = "{0.1, 0.2, 0.4, 1.0}"
PG_TEXT_WEIGHT = 0.1
# bm25 as FTS5 computes it (k1, b): a word's count saturates (the tenth "the" adds little)
# and is normalised by the passage's length against an average one, in distinct words (the
# tsvector's length). Passages are cut at about 1,000 characters (documents.PASSAGE_CHARS);
# the average passage, short notes and document ends among them, holds about 65 distinct
# words (bench/ `search` corpus: 64).
BM25_K1 = 1.2
BM25_B = 0.75
PG_AVERAGE_WORDS = 65.0
# ts_headline drops anything that parses as an HTML tag ("<b>", "<script>"); excerpts must
# show the text as written (templates escape it), so "<" is hidden from it and restored.
PG_LT_STANDIN = "\u2039\u2039\u2039"
# bm25 column weights for (title, heading, text), the same proportions as on PostgreSQL.
SQLITE_WEIGHTS = (10.0, 4.0, 1.0)
# At most this many passages of one item in a search's results (a long document matches in
# many places; the results should still show the other documents that match).
PER_ITEM = 2
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
    *,
    owner_ids: Sequence[int],
    query: str,
    limit: int = 10,
    team_ids: Sequence[int] = (),
    per_item: int = PER_ITEM,
) -> list[MemoryResult]:
    """The passages of the knowledge items of these owners, or shared with these teams,
    that best match `query`, best first: at most `per_item` of one item, and a passage
    whose text another one found has already (a copy of a document) left out.

    Any text is a valid query: one without words (empty, punctuation, emoji) matches
    nothing and returns [].
    """
    owners = [int(owner_id) for owner_id in owner_ids]
    # -1 matches no team and keeps the SQL a plain IN (...) when there are none.
    teams = [int(team_id) for team_id in team_ids] or [-1]
    terms = [term for term in query_terms(query) if term not in STOP_WORDS]
    limit = max(0, min(int(limit), MAX_LIMIT))
    per_item = max(1, int(per_item))
    if not owners or not terms or limit == 0:
        return []
    searches = {"sqlite": _search_sqlite, "postgresql": _search_postgresql}
    if connection.vendor not in searches:  # no full-text index was made for this database
        return []
    window: int | None = max(limit, WINDOW_PER_RESULT * limit)
    while True:
        rows = searches[connection.vendor](Ask(owners, teams, terms, limit, per_item, window))
        if len(rows) >= limit or window is None:
            break
        window = window * 10 if window < 100 * limit else None
    passages = _passages([passage_id for passage_id, _, _ in rows])
    results = []
    for passage_id, score, snippet in rows:
        passage = passages.get(passage_id)
        if passage is None:  # deleted between the two queries
            continue
        item = passage.item
        results.append(
            MemoryResult(
                item_id=item.pk,
                title=item.title,
                snippet=_clean_snippet(snippet if snippet is not None else passage.text),
                url=item.url,
                source=item.source,
                score=max(float(score or 0.0), MIN_SCORE),
                passage=passage.text,
                passage_id=passage.pk,
                locator=passage.locator,
            )
        )
    return results


async def asearch_memory(
    *,
    owner_ids: Sequence[int],
    query: str,
    limit: int = 10,
    team_ids: Sequence[int] = (),
    per_item: int = PER_ITEM,
) -> list[MemoryResult]:
    """`search_memory` for async code (the deliberation loop)."""
    return await db_hop(search_memory)(
        owner_ids=owner_ids, query=query, limit=limit, team_ids=team_ids, per_item=per_item
    )


def _passages(ids: Sequence[int]) -> dict[int, Passage]:
    from .models import Passage

    found = (
        Passage.objects.filter(pk__in=list(ids))
        .select_related("item")
        .only("id", "heading", "page", "text", "item__title", "item__url", "item__source")
        .order_by()
    )
    return {passage.pk: passage for passage in found}


@dataclass(frozen=True)
class Ask:
    """One search as the database backends take it."""

    owners: list[int]
    teams: list[int]
    terms: list[str]  # the query's words, stop words left out
    limit: int
    per_item: int
    window: int | None  # how many of the best matches are grouped; None: all of them


def _placeholders(values: Sequence[object]) -> str:
    return ", ".join(["%s"] * len(values))


def _in_scope(owners: Sequence[int], teams: Sequence[int]) -> str:
    """The ids of the items searched, from the indexes on owner and team alone (an item's
    row holds its whole text: reading it for each matching passage would be slow)."""
    owned, shared = _placeholders(owners), _placeholders(teams)
    # Only placeholders are interpolated.
    return f"SELECT id FROM research_knowledgeitem WHERE owner_id IN ({owned}) OR team_id IN ({shared})"  # noqa: E501, S608


def _grouped(text: str) -> str:
    """The CTEs after `hits` (id, item_id, position, text, score: the best matches):
    `kept` holds each passage once per text (the best-scored copy; empty passages, which
    only carry a title, are never copies) numbered `nth` within its item, best first."""
    return f"""
        uniq AS (
            SELECT id, item_id, position, score,
                   row_number() OVER (
                       PARTITION BY CASE WHEN text = '' THEN id END, {text}
                       ORDER BY score DESC, item_id DESC, position
                   ) AS copy
            FROM hits
        ),
        kept AS (
            SELECT id, item_id, position, score,
                   row_number() OVER (
                       PARTITION BY item_id ORDER BY score DESC, position
                   ) AS nth
            FROM uniq
            WHERE copy = 1
        )
    """  # noqa: S608 - only a column expression of the callers' is interpolated


def _search_sqlite(ask: Ask) -> list[tuple[int, float, str | None]]:
    """(passage id, score, excerpt or None when the passage is short enough to be its own)
    for the best passages. bm25() is lower-is-better and negative for matches: negated for
    "higher is better"; it weighs a word by its rarity and a passage by its length."""
    sql = f"""
        WITH best AS (
            SELECT p.id, p.item_id, p.position,
                   -bm25(research_passage_fts, %s, %s, %s) AS score
            FROM research_passage_fts
            JOIN research_passage AS p ON p.id = research_passage_fts.rowid
            WHERE research_passage_fts MATCH %s
              AND p.item_id IN ({_in_scope(ask.owners, ask.teams)})
            ORDER BY score DESC
            LIMIT %s
        ),
        -- The texts of the best only (they are long: read for the copies' test).
        hits AS (
            SELECT best.*, p.text FROM best JOIN research_passage AS p ON p.id = best.id
        ),
        {_grouped("text")}
        SELECT kept.id, kept.score, length(p.text)
        FROM kept JOIN research_passage AS p ON p.id = kept.id
        WHERE kept.nth <= %s
        ORDER BY kept.score DESC, kept.item_id DESC, kept.position
        LIMIT %s
    """  # noqa: S608 - only placeholders and constants are interpolated
    match = fts5_query(ask.terms)
    params: list[str | int | float] = [
        *SQLITE_WEIGHTS,
        match,
        *ask.owners,
        *ask.teams,
        -1 if ask.window is None else ask.window,  # -1: no limit
        ask.per_item,
        ask.limit,
    ]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
        long = [row[0] for row in rows if row[2] > SNIPPET_CHARS]
        excerpts: dict[int, str] = {}
        if long:
            # The excerpt of a long passage is its best-matching window of up to 24 tokens.
            cursor.execute(
                f"""
                SELECT rowid, snippet(research_passage_fts, 2, '', '', '…', 24)
                FROM research_passage_fts
                WHERE research_passage_fts MATCH %s AND rowid IN ({_placeholders(long)})
                """,  # noqa: S608 - only placeholders are interpolated
                [match, *long],
            )
            excerpts = dict(cursor.fetchall())
    return [(row[0], row[1], excerpts.get(row[0])) for row in rows]


def _term_weights(cursor: CursorWrapper, terms: list[str]) -> list[float]:
    """Each word's inverse document frequency as bm25 weighs it (FTS5 does the same on
    SQLite): a word in few passages counts for much more than one in most. Frequencies
    are across every passage (a weight says nothing of any one's text): from the column's
    statistics (ANALYZE, run by autovacuum, lists the commonest words and how common; a
    word not listed is rarer than all of them), else counted on the GIN index, each count
    stopping at IDF_COUNT_CAP."""
    cursor.execute(
        """
        -- The statistics' word list (up to ~1,000 words) is read once, not once per word.
        WITH s AS MATERIALIZED (
            SELECT most_common_elems::text::text[] AS words,
                   most_common_elem_freqs AS shares
            FROM pg_stats
            WHERE schemaname = current_schema() AND tablename = 'research_passage'
              AND attname = 'search' AND most_common_elems IS NOT NULL
        )
        SELECT (SELECT reltuples FROM pg_class WHERE oid = 'research_passage'::regclass),
               (SELECT coalesce(s.shares[array_position(s.words, w.word)],
                                s.shares[cardinality(s.words) + 1] / 2)
                FROM s)
        FROM unnest(%s::text[]) WITH ORDINALITY AS t(term, n),
             LATERAL (
                 SELECT (tsvector_to_array(to_tsvector('english', t.term)))[1] AS word
             ) AS w
        ORDER BY t.n
        """,
        [terms],
    )
    rows = cursor.fetchall()
    total = max(float(rows[0][0]), 1.0) if rows else 1.0
    shares = [row[1] for row in rows]
    if any(share is None for share in shares):  # never analysed: count
        cursor.execute(
            """
            SELECT (
                SELECT count(*) FROM (
                    SELECT 1 FROM research_passage AS p
                    WHERE p.search @@ plainto_tsquery('english', t.term)
                    LIMIT %s
                ) AS found
            ), (SELECT count(*) FROM research_passage)
            FROM unnest(%s::text[]) WITH ORDINALITY AS t(term, n)
            ORDER BY t.n
            """,
            [IDF_COUNT_CAP, terms],
        )
        counted = cursor.fetchall()
        total = max(float(counted[0][1]), 1.0)
        shares = [count / total for count, _ in counted]
    return [math.log(1 + (1 - share + 0.5 / total) / (share + 0.5 / total)) for share in shares]


def _search_postgresql(ask: Ask) -> list[tuple[int, float, str | None]]:
    """The same on PostgreSQL, over the stored `search` vectors (GIN index, migration 0007):
    a passage's score is bm25's, as FTS5 computes it on SQLite: for each query word it holds,
    the word's weight (_term_weights) times its count (ts_rank_cd of the word alone, a title
    or heading hit counting more), saturating and normalised by the passage's length.
    Excerpts only for the passages shown (ts_headline re-parses the text), a short passage
    being its own.

    Scoring every passage with a common word is most of a search's time, so it first scores
    only the passages with one of the rarest words or two of the others (max-score
    pruning): a word adds at most its weight x (k1 + 1) to a score, so a passage left out,
    with at most one of the others, scores at most the largest of theirs. When the last
    result found scores more than that, no passage left out could have been among the
    results. Otherwise it scores every passage with a word that could take it past the last
    result found (all but the commonest words whose bounds, together, fall short of it)."""
    # One transaction, so that the planner's page cost is set for these queries only (a
    # caller's open transaction gets its own back).
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT current_setting('random_page_cost'), set_config('random_page_cost', %s, true)",
            [PG_RANDOM_PAGE_COST],
        )
        [(page_cost, _)] = cursor.fetchall()
        weights = _term_weights(cursor, ask.terms)
        bounds = [weight * (BM25_K1 + 1) for weight in weights]
        enough = PRUNE_FACTOR * max(weights)
        rarest = [term for term, bound in zip(ask.terms, bounds, strict=True) if bound >= enough]
        other = [term for term, bound in zip(ask.terms, bounds, strict=True) if bound < enough]
        rows = _rank_postgresql(cursor, ask, weights, rarest, other)
        last = rows[-1][1] if len(rows) == ask.limit else 0.0
        if other and last <= max(bound for bound in bounds if bound < enough):
            rows = _rank_postgresql(cursor, ask, weights, _needed(ask.terms, weights, last))
        cursor.execute("SELECT set_config('random_page_cost', %s, true)", [page_cost])
    return [
        (row[0], row[1], None if row[2] is None else row[2].replace(PG_LT_STANDIN, "<"))
        for row in rows
    ]


def _needed(terms: list[str], weights: list[float], score: float) -> list[str]:
    """The words a passage must hold one of to score `score` or more: all but the commonest
    ones whose weights x (k1 + 1), together, fall short of it."""
    bound = 0.0
    needed = []
    for weight, term in sorted(zip(weights, terms, strict=True)):
        bound += weight * (BM25_K1 + 1)
        if bound >= score:
            needed.append(term)
    return needed


def _rank_postgresql(
    cursor: CursorWrapper,
    ask: Ask,
    weights: list[float],
    any_of: list[str],
    two_of: Sequence[str] = (),
) -> list[tuple[int, float, str | None]]:
    """The best passages with one of the words `any_of`, or two of `two_of`, scored on
    every word of `terms` (see _search_postgresql)."""
    match = ["websearch_to_tsquery('english'::regconfig, %s)"] if any_of else []
    match_params = [websearch_query(any_of)] if any_of else []
    for n, term in enumerate(two_of[:-1]):
        match.append(
            "(websearch_to_tsquery('english'::regconfig, %s) "
            "&& websearch_to_tsquery('english'::regconfig, %s))"
        )
        match_params += [term, websearch_query(two_of[n + 1 :])]
    # Each word's count, once per passage (a fenced subquery, so no expression is
    # evaluated twice), then bm25's sum over the words. A passage holds few of a long
    # query's words: `@@` (a lookup in the stored vector) skips ts_rank_cd, which costs
    # several times as much, for the others.
    counts = ", ".join(
        f"CASE WHEN p.search @@ plainto_tsquery('english'::regconfig, %s) "
        f"THEN ts_rank_cd('{PG_WEIGHTS}'::float4[], p.search, "
        f"plainto_tsquery('english'::regconfig, %s), 0) / {PG_TEXT_WEIGHT} ELSE 0 END AS c{n}"
        for n in range(len(ask.terms))
    )
    score = " + ".join(
        f"%s * c{n} * {BM25_K1 + 1} / (c{n} + r.norm)" for n in range(len(ask.terms))
    )
    sql = f"""
        WITH q AS MATERIALIZED (
            SELECT websearch_to_tsquery('english'::regconfig, %s) AS query
        ),
        hits AS (
            SELECT r.id, r.item_id, r.position, r.text, ({score}) AS score
            FROM (
                SELECT p.id, p.item_id, p.position, p.text, {counts},
                       {BM25_K1} * (1 - {BM25_B} + {BM25_B} * length(p.search)
                                    / {PG_AVERAGE_WORDS}) AS norm
                FROM research_passage AS p
                WHERE p.search @@ ({" || ".join(match)})
                  AND p.item_id IN ({_in_scope(ask.owners, ask.teams)})
                OFFSET 0
            ) AS r
            ORDER BY score DESC
            LIMIT %s
        ),
        {_grouped('text COLLATE "C"')},
        top AS (
            SELECT id, item_id, position, score FROM kept
            WHERE nth <= %s
            ORDER BY score DESC, item_id DESC, position
            LIMIT %s
        )
        SELECT top.id, top.score,
               CASE WHEN length(p.text) <= %s THEN NULL
                    ELSE ts_headline('english', replace(p.text, '<', %s), q.query,
                                     'StartSel="", StopSel="", MinWords=12, MaxWords=30, '
                                     'MaxFragments=1, FragmentDelimiter=" … "') END
        FROM top JOIN research_passage AS p ON p.id = top.id, q
        ORDER BY top.score DESC, top.item_id DESC, top.position
    """  # noqa: S608 - only placeholders and constants are interpolated
    params: list[str | int | float | None] = [
        websearch_query(ask.terms),
        *weights,
        *(term for term in ask.terms for _ in range(2)),
        *match_params,
        *ask.owners,
        *ask.teams,
        ask.window,  # None: LIMIT NULL, no limit
        ask.per_item,
        ask.limit,
        SNIPPET_CHARS,
        PG_LT_STANDIN,
    ]
    cursor.execute(sql, params)
    return list(cursor.fetchall())


def _clean_snippet(text: str | None) -> str:
    snippet = " ".join((text or "").split())
    if len(snippet) > SNIPPET_CHARS:
        snippet = snippet[: SNIPPET_CHARS - 1].rstrip() + "…"
    return snippet
