"""PostgreSQL keeps each passage's `search` vector in the passage's row (issue 69).

A search reads the vector of every passage it scores, once for each query word
(research/memory.py). With the default storage, a row over ~2 KB (a long passage with its
title) had its largest value, often the vector, moved out of line (TOAST), so each of those
reads fetched it again from the TOAST table: most of a search's time on a corpus of long
passages. STORAGE MAIN keeps the vector in the row (compressed, or moved out, only when the
row would not fit in a page); the passage's text, read only for the results, goes out of
line instead. The rows stored before are written again so their vectors move in too.

SQLite: nothing to do (FTS5 keeps its own index).
"""

from django.db import migrations

POSTGRESQL_FORWARD = [
    "ALTER TABLE research_passage ALTER COLUMN search SET STORAGE MAIN",
    # Each row's vector made again (from its title), so stored under the new storage.
    "UPDATE research_passage SET title = title",
]

POSTGRESQL_BACKWARD = [
    "ALTER TABLE research_passage ALTER COLUMN search SET STORAGE EXTENDED",
]


def _execute(schema_editor, statements):
    if schema_editor.connection.vendor == "postgresql":
        for sql in statements:
            schema_editor.execute(sql)


def forward(apps, schema_editor):
    _execute(schema_editor, POSTGRESQL_FORWARD)


def backward(apps, schema_editor):
    _execute(schema_editor, POSTGRESQL_BACKWARD)


class Migration(migrations.Migration):
    dependencies = [
        ("research", "0007_passage_search"),
    ]

    operations = [
        migrations.RunPython(forward, backward),
    ]
