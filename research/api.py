"""Knowledge routes of the JSON API (mounted under /api/knowledge by thinking/api.py): upload
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
from .knowledge import add_item
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
    passages: list[PassageOut]


def _invalid(field: str, message: str) -> ValidationError:
    return ValidationError([{"loc": ["body", field], "msg": message, "type": "value_error"}])


def knowledge_row(item: KnowledgeItem) -> dict[str, Any]:
    return {
        "id": item.pk,
        "title": item.title,
        "source": item.source,
        "team": item.team_id,
        "passages": [
            {"position": p.position, "page": p.page, "heading": p.heading, "text": p.text}
            for p in item.passages.all()
        ],
    }


@router.post(
    "",
    response={201: KnowledgeOut, 401: ErrorOut, 403: ErrorOut, 422: ValidationErrorOut},
    url_name="knowledge-upload",
)
def upload_knowledge(
    request: ApiRequest, file: File[UploadedFile], team: Form[int | None] = None
) -> Status[dict[str, Any]]:
    """Add a document (PDF, HTML, Markdown or text) to your knowledge base, split into
    passages. `team` shares it with one of your teams. A file that cannot be read is a 422
    saying why; nothing is stored then."""
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
        item = add_item(
            owner=user,
            title=form.cleaned_data["title"],
            body=form.cleaned_data["body"],
            source=KnowledgeSource.UPLOAD,
            team=shared,
            sections=form.cleaned_data["sections"],
        )
    except DocumentError as error:  # pragma: no cover - the form read it already
        raise _invalid("file", str(error)) from None
    return Status(201, knowledge_row(item))
