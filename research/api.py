"""Knowledge routes of the JSON API (mounted under /api/knowledge by thinking/web/api.py): upload
a document, the same formats and rules as the upload form and `import_knowledge`."""

from __future__ import annotations

from typing import Any

from django.utils.datastructures import MultiValueDict
from ninja import Field, File, Form, Router, Schema, Status
from ninja.errors import ValidationError
from ninja.files import UploadedFile

from accounts.models import Team
from config.http import ApiRequest

from .documents import DocumentError
from .forms import UploadForm
from .knowledge import Change, store_reading
from .models import KnowledgeItem, KnowledgeSource

router = Router(tags=["knowledge"])


class PassageOut(Schema):
    position: int
    page: int | None = Field(description="The PDF page it is on, if any.")
    heading: str = Field(description="The heading it sits under, if any.")
    text: str


class ErrorOut(Schema):
    detail: str


class FieldError(Schema):
    loc: list[str | int]
    msg: str
    type: str


class ValidationErrorOut(Schema):
    detail: list[FieldError]


class KnowledgeOut(Schema):
    id: int
    title: str
    source: str
    team: int | None
    notes: list[str] = Field(
        description="How the file was read, for a person: a cut at the passage limit "
        "(“Truncated at 5,000 passages …”), pages left out, the reader's warnings."
    )
    duplicate: bool = Field(
        description="True when the same text was already in your knowledge (for this team, "
        "or private): nothing new was stored, and this is the item that holds it."
    )
    passages: list[PassageOut]


def _invalid(field: str, message: str) -> ValidationError:
    return ValidationError([{"loc": ["body", field], "msg": message, "type": "value_error"}])


def knowledge_row(item: KnowledgeItem, *, duplicate: bool = False) -> dict[str, Any]:
    return {
        "id": item.pk,
        "title": item.title,
        "source": item.source,
        "team": item.team_id,
        "notes": list(item.notes),
        "duplicate": duplicate,
        "passages": [
            {"position": p.position, "page": p.page, "heading": p.heading, "text": p.text}
            for p in item.passages.all()
        ],
    }


@router.post(
    "",
    response={
        200: KnowledgeOut,
        201: KnowledgeOut,
        401: ErrorOut,
        403: ErrorOut,
        422: ValidationErrorOut,
    },
    url_name="knowledge-upload",
)
def upload_knowledge(
    request: ApiRequest, file: File[UploadedFile], team: Form[int | None] = None
) -> Status[dict[str, Any]]:
    """Add a document (PDF, HTML, Markdown or text) to your knowledge base, split into
    passages. `team` shares it with one of your teams. A file that cannot be read (damaged,
    password-protected, too slow or too big to read, no readable text) is a 422 saying why;
    nothing is stored then. The same text again is a 200 with the item that already holds
    it (`duplicate`); a new item is a 201."""
    user = request.auth
    shared = None
    if team is not None:
        shared = Team.objects.of(user).filter(pk=team).first()
        if shared is None:  # not a member: the same answer as a team that does not exist
            raise _invalid("team", "You are not a member of that team.")
    form = UploadForm(files=MultiValueDict({"file": [file]}))
    if not form.is_valid():
        raise _invalid(
            "file", " ".join(map(str, form.errors.get("file", ["The file was refused."])))
        )
    try:
        saved = store_reading(
            form.cleaned_data["reading"], owner=user, source=KnowledgeSource.UPLOAD, team=shared
        )
    except DocumentError as error:  # the database refused its text
        raise _invalid("file", str(error)) from None
    if saved.change is Change.DUPLICATE:
        return Status(200, knowledge_row(saved.item, duplicate=True))
    return Status(201, knowledge_row(saved.item))
