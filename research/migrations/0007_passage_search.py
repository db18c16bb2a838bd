"""Search finds passages, not whole items (issue 69): a long document no longer outranks the
one short page with the word, and the passage shown is the one that matches.

Each passage keeps its item's title (so a title hit still counts), and gets its full-text
index, in the form each database does best:
- SQLite: an FTS5 table over (title, heading, text) with external content, kept in step by
  triggers on research_passage (porter stemming, diacritics removed, as 0002's).
- PostgreSQL: a stored generated `tsvector` column, `search` (title weight A, heading B, text
  D), and a GIN index on it, so a search reads the stored vectors instead of re-parsing the
  text of every matching row. research/memory.py queries it by name.
The whole-item indexes of 0002 are dropped: nothing searches them any more.

Items stored before passages existed (0005) get theirs here, cut at paragraphs into about
1,000 characters (a frozen, simpler form of documents.passages); an item without text gets
one empty passage, so its title is still found.

On SQLite, a migration that rebuilds research_passage (most column changes) drops its
triggers: it must make them again (SQLITE_TRIGGERS below), as 0006 does for 0002's.
"""

import importlib

from django.db import migrations, models
from django.db.models import OuterRef, Subquery

PASSAGE_CHARS = 1000

SQLITE_TRIGGERS = [
    """
    CREATE TRIGGER IF NOT EXISTS research_passage_fts_insert AFTER INSERT ON research_passage
    BEGIN
        INSERT INTO research_passage_fts(rowid, title, heading, text)
        VALUES (new.id, new.title, new.heading, new.text);
    END
    """,
    """
    CREATE TRIGGER IF NOT EXISTS research_passage_fts_delete AFTER DELETE ON research_passage
    BEGIN
        INSERT INTO research_passage_fts(research_passage_fts, rowid, title, heading, text)
        VALUES ('delete', old.id, old.title, old.heading, old.text);
    END
    """,
    """
    CREATE TRIGGER IF NOT EXISTS research_passage_fts_update
    AFTER UPDATE OF title, heading, text ON research_passage
    BEGIN
        INSERT INTO research_passage_fts(research_passage_fts, rowid, title, heading, text)
        VALUES ('delete', old.id, old.title, old.heading, old.text);
        INSERT INTO research_passage_fts(rowid, title, heading, text)
        VALUES (new.id, new.title, new.heading, new.text);
    END
    """,
]

SQLITE_FORWARD = [
    """
    CREATE VIRTUAL TABLE research_passage_fts USING fts5(
        title, heading, text,
        content='research_passage', content_rowid='id',
        tokenize='porter unicode61 remove_diacritics 2'
    )
    """,
    *SQLITE_TRIGGERS,
    "INSERT INTO research_passage_fts(research_passage_fts) VALUES ('rebuild')",
]

SQLITE_BACKWARD = [
    "DROP TRIGGER IF EXISTS research_passage_fts_update",
    "DROP TRIGGER IF EXISTS research_passage_fts_delete",
    "DROP TRIGGER IF EXISTS research_passage_fts_insert",
    "DROP TABLE IF EXISTS research_passage_fts",
]

POSTGRESQL_FORWARD = [
    """
    ALTER TABLE research_passage ADD COLUMN search tsvector GENERATED ALWAYS AS (
        setweight(to_tsvector('english'::regconfig, title), 'A')
        || setweight(to_tsvector('english'::regconfig, heading), 'B')
        || setweight(to_tsvector('english'::regconfig, text), 'D')
    ) STORED
    """,
    "CREATE INDEX research_passage_search_gin ON research_passage USING GIN (search)",
]

POSTGRESQL_BACKWARD = [
    "DROP INDEX IF EXISTS research_passage_search_gin",
    "ALTER TABLE research_passage DROP COLUMN IF EXISTS search",
]


def _whole_item_search():
    return importlib.import_module("research.migrations.0002_full_text_search")


def _chunks(body):
    """The body cut at blank lines into parts of about PASSAGE_CHARS (a longer paragraph
    at spaces)."""
    parts, current = [], ""
    for paragraph in (p.strip() for p in body.split("\n\n")):
        while len(paragraph) > PASSAGE_CHARS:
            cut = paragraph.rfind(" ", 0, PASSAGE_CHARS)
            cut = cut if cut > 0 else PASSAGE_CHARS
            if current:
                parts.append(current)
                current = ""
            parts.append(paragraph[:cut].strip())
            paragraph = paragraph[cut:].strip()
        if not paragraph:
            continue
        if current and len(current) + 2 + len(paragraph) > PASSAGE_CHARS:
            parts.append(current)
            current = ""
        current = f"{current}\n\n{paragraph}" if current else paragraph
    if current:
        parts.append(current)
    return parts or [""]


def passages_for_every_item(apps, schema_editor):
    KnowledgeItem = apps.get_model("research", "KnowledgeItem")
    Passage = apps.get_model("research", "Passage")
    Passage.objects.update(
        title=Subquery(KnowledgeItem.objects.filter(pk=OuterRef("item_id")).values("title")[:1])
    )
    bare = KnowledgeItem.objects.filter(passages__isnull=True).only("id", "title", "body")
    rows = []
    for item in bare.iterator(chunk_size=200):
        for position, text in enumerate(_chunks(item.body)[:5000]):
            rows.append(Passage(item_id=item.pk, title=item.title, position=position, text=text))
        if len(rows) >= 1000:
            Passage.objects.bulk_create(rows)
            rows = []
    Passage.objects.bulk_create(rows)
    if schema_editor.connection.vendor == "postgresql":
        # The new rows' foreign keys are checked at the commit (deferred); PostgreSQL will
        # not ALTER a table with such checks pending, and the next operation does.
        schema_editor.execute("SET CONSTRAINTS ALL IMMEDIATE")


def _execute(schema_editor, statements):
    for sql in statements.get(schema_editor.connection.vendor, []):
        schema_editor.execute(sql)


def forward(apps, schema_editor):
    _execute(schema_editor, {"sqlite": SQLITE_FORWARD, "postgresql": POSTGRESQL_FORWARD})
    _whole_item_search().backward(apps, schema_editor)


def backward(apps, schema_editor):
    _whole_item_search().forward(apps, schema_editor)
    _execute(schema_editor, {"sqlite": SQLITE_BACKWARD, "postgresql": POSTGRESQL_BACKWARD})


class Migration(migrations.Migration):
    dependencies = [
        ("research", "0006_knowledge_digest_notes"),
    ]

    operations = [
        migrations.AddField(
            model_name="passage",
            name="title",
            field=models.CharField(blank=True, default="", editable=False, max_length=300),
        ),
        migrations.RunPython(passages_for_every_item, migrations.RunPython.noop),
        migrations.RunPython(forward, backward),
    ]
