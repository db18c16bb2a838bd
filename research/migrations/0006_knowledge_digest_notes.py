"""Items remember how their file was read (notes) and a hash of their text (digest), so the
same text is stored once per owner and team. Text already stored is cleaned as new text is
(research/documents.py's clean_text: NFKC, no control characters), so a search for "fi"
finds an old "ﬁ" too, and its digest is filled in.

On SQLite, adding a column with a default rebuilds the table, and the rebuild drops its
triggers: the ones that keep the full-text index of 0002 in step are made again here, before
any text is changed (and, going back, after the columns are gone). Any later migration that
rebuilds research_knowledgeitem must do the same."""

import hashlib
import re
import unicodedata

from django.conf import settings
from django.db import migrations, models

# A frozen copy of documents.clean_text as it is at this migration.
_DROPPED = [*range(0x00, 0x09), *range(0x0E, 0x20), 0x7F, *range(0x80, 0xA0), 0xAD, 0xFEFF]
_CLEAN = {code: None for code in _DROPPED} | {
    ord(c): "\n" for c in ("\r", "\x0b", "\x0c", "\x85", "\u2028", "\u2029")
}
_SURROGATES = re.compile("[\ud800-\udfff]")


def _clean(text):
    text = _SURROGATES.sub("", text.replace("\r\n", "\n").translate(_CLEAN))
    return unicodedata.normalize("NFKC", text).strip()


def _title(text):
    return " ".join(_clean(text).split())[:300]


SQLITE_TRIGGERS = [
    """
    CREATE TRIGGER IF NOT EXISTS research_knowledgeitem_fts_insert
    AFTER INSERT ON research_knowledgeitem
    BEGIN
        INSERT INTO research_knowledgeitem_fts(rowid, title, body)
        VALUES (new.id, new.title, new.body);
    END
    """,
    """
    CREATE TRIGGER IF NOT EXISTS research_knowledgeitem_fts_delete
    AFTER DELETE ON research_knowledgeitem
    BEGIN
        INSERT INTO research_knowledgeitem_fts(research_knowledgeitem_fts, rowid, title, body)
        VALUES ('delete', old.id, old.title, old.body);
    END
    """,
    """
    CREATE TRIGGER IF NOT EXISTS research_knowledgeitem_fts_update
    AFTER UPDATE OF title, body ON research_knowledgeitem
    BEGIN
        INSERT INTO research_knowledgeitem_fts(research_knowledgeitem_fts, rowid, title, body)
        VALUES ('delete', old.id, old.title, old.body);
        INSERT INTO research_knowledgeitem_fts(rowid, title, body)
        VALUES (new.id, new.title, new.body);
    END
    """,
]


def restore_triggers(apps, schema_editor):
    if schema_editor.connection.vendor == "sqlite":
        for sql in SQLITE_TRIGGERS:
            schema_editor.execute(sql)


def clean_and_hash(apps, schema_editor):
    KnowledgeItem = apps.get_model("research", "KnowledgeItem")
    Passage = apps.get_model("research", "Passage")
    # Only changed text is written: every write of a title or body re-indexes it.
    hashed, changed = [], []
    for item in KnowledgeItem.objects.only("id", "title", "body").iterator(chunk_size=200):
        title, body = _title(item.title) or item.title, _clean(item.body)
        item.digest = hashlib.sha256(" ".join(body.split()).encode()).hexdigest()
        if (title, body) != (item.title, item.body):
            item.title, item.body = title, body
            changed.append(item)
        else:
            hashed.append(item)
        if len(hashed) + len(changed) >= 200:
            KnowledgeItem.objects.bulk_update(changed, ["title", "body", "digest"])
            KnowledgeItem.objects.bulk_update(hashed, ["digest"])
            hashed, changed = [], []
    KnowledgeItem.objects.bulk_update(changed, ["title", "body", "digest"])
    KnowledgeItem.objects.bulk_update(hashed, ["digest"])
    changed = []
    for passage in Passage.objects.only("id", "heading", "text").iterator(chunk_size=500):
        heading, text = _title(passage.heading), _clean(passage.text)
        if (heading, text) != (passage.heading, passage.text):
            passage.heading, passage.text = heading, text
            changed.append(passage)
        if len(changed) == 500:
            Passage.objects.bulk_update(changed, ["heading", "text"])
            changed = []
    Passage.objects.bulk_update(changed, ["heading", "text"])


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0003_followup_notification_preference"),
        ("research", "0005_docs_passages"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        # Backwards, removing the columns rebuilds the table again: triggers last.
        migrations.RunPython(migrations.RunPython.noop, restore_triggers),
        migrations.AddField(
            model_name="knowledgeitem",
            name="digest",
            field=models.CharField(blank=True, editable=False, max_length=64),
        ),
        migrations.AddField(
            model_name="knowledgeitem",
            name="notes",
            field=models.JSONField(blank=True, default=list, editable=False),
        ),
        migrations.AddIndex(
            model_name="knowledgeitem",
            index=models.Index(fields=["owner", "digest"], name="knowledge_owner_digest"),
        ),
        migrations.RunPython(restore_triggers, migrations.RunPython.noop),
        migrations.RunPython(clean_and_hash, migrations.RunPython.noop),
    ]
