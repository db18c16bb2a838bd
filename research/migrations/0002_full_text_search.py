"""Full-text search for knowledge items, in the form each database does best.

SQLite: an FTS5 table over (title, body) with external content, kept in sync by triggers
(the porter tokenizer stems English; remove_diacritics makes "cafe" find "café").
PostgreSQL: a GIN index on the weighted tsvector that research/memory.py queries. The
expression must stay identical to memory.PG_DOCUMENT or the planner will not use the index.
Other databases get neither, and memory search there returns nothing.
"""

from django.db import migrations

SQLITE_FORWARD = [
    """
    CREATE VIRTUAL TABLE research_knowledgeitem_fts USING fts5(
        title, body,
        content='research_knowledgeitem', content_rowid='id',
        tokenize='porter unicode61 remove_diacritics 2'
    )
    """,
    """
    CREATE TRIGGER research_knowledgeitem_fts_insert AFTER INSERT ON research_knowledgeitem
    BEGIN
        INSERT INTO research_knowledgeitem_fts(rowid, title, body)
        VALUES (new.id, new.title, new.body);
    END
    """,
    """
    CREATE TRIGGER research_knowledgeitem_fts_delete AFTER DELETE ON research_knowledgeitem
    BEGIN
        INSERT INTO research_knowledgeitem_fts(research_knowledgeitem_fts, rowid, title, body)
        VALUES ('delete', old.id, old.title, old.body);
    END
    """,
    """
    CREATE TRIGGER research_knowledgeitem_fts_update AFTER UPDATE OF title, body
    ON research_knowledgeitem
    BEGIN
        INSERT INTO research_knowledgeitem_fts(research_knowledgeitem_fts, rowid, title, body)
        VALUES ('delete', old.id, old.title, old.body);
        INSERT INTO research_knowledgeitem_fts(rowid, title, body)
        VALUES (new.id, new.title, new.body);
    END
    """,
    # Index whatever rows already exist.
    "INSERT INTO research_knowledgeitem_fts(research_knowledgeitem_fts) VALUES ('rebuild')",
]

SQLITE_BACKWARD = [
    "DROP TRIGGER IF EXISTS research_knowledgeitem_fts_update",
    "DROP TRIGGER IF EXISTS research_knowledgeitem_fts_delete",
    "DROP TRIGGER IF EXISTS research_knowledgeitem_fts_insert",
    "DROP TABLE IF EXISTS research_knowledgeitem_fts",
]

POSTGRESQL_FORWARD = [
    """
    CREATE INDEX research_knowledgeitem_fts_gin ON research_knowledgeitem USING GIN ((
        setweight(to_tsvector('english'::regconfig, title), 'A')
        || setweight(to_tsvector('english'::regconfig, body), 'D')
    ))
    """,
]

POSTGRESQL_BACKWARD = ["DROP INDEX IF EXISTS research_knowledgeitem_fts_gin"]


def forward(apps, schema_editor):
    statements = {"sqlite": SQLITE_FORWARD, "postgresql": POSTGRESQL_FORWARD}
    for sql in statements.get(schema_editor.connection.vendor, []):
        schema_editor.execute(sql)


def backward(apps, schema_editor):
    statements = {"sqlite": SQLITE_BACKWARD, "postgresql": POSTGRESQL_BACKWARD}
    for sql in statements.get(schema_editor.connection.vendor, []):
        schema_editor.execute(sql)


class Migration(migrations.Migration):
    dependencies = [
        ("research", "0001_initial"),
    ]

    operations = [
        migrations.RunPython(forward, backward),
    ]
