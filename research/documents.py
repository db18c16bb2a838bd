"""Reading the documents people have: PDF, HTML, Markdown and plain text, into a title, the
full text and sections (with their page or heading), and splitting sections into passages.

The upload form, `import_knowledge` and the API all read files through `read_document`, so
a file is accepted, or refused with the same sentence, wherever it comes from.
"""

from __future__ import annotations

import io
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path

logger = logging.getLogger(__name__)

# Suffix -> format. Upload forms use the keys for their `accept` list.
FORMATS = {
    ".pdf": "pdf",
    ".html": "html",
    ".htm": "html",
    ".md": "markdown",
    ".markdown": "markdown",
    ".txt": "text",
}
SUFFIXES = frozenset(FORMATS)
DESCRIPTION = "PDF, HTML, Markdown or text"
PASSAGE_CHARS = 1000  # about what a search result shows the model; fits a citation check
MAX_PASSAGES = 5000
# A text file has no NUL bytes and few control characters; a binary one has plenty.
_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1f]")
_HEADING = re.compile(r"^\s{0,3}(#{1,6})[ \t]+(?P<title>.+?)(?:[ \t]+#+)?[ \t]*$")


class DocumentError(ValueError):
    """A file that cannot be read as a document; `str(error)` says which and why, `short`
    says why in a few words (for a list of skipped files)."""

    def __init__(self, message: str, *, short: str = "") -> None:
        super().__init__(message)
        self.short = short or message


@dataclass(frozen=True)
class Section:
    text: str
    heading: str = ""
    page: int | None = None


@dataclass
class Document:
    title: str  # from the document itself ("" when it has none)
    format: str
    sections: list[Section] = field(default_factory=list)

    @property
    def body(self) -> str:
        return "\n\n".join(s.text for s in self.sections if s.text.strip()).strip()


def format_of(name: str) -> str | None:
    return FORMATS.get(Path(name).suffix.lower())


def read_document(data: bytes, *, name: str) -> Document:
    """The document in `data`, read by its file name's suffix. Raises DocumentError."""
    kind = format_of(name)
    if kind is None:
        raise DocumentError(f"“{name}” is not a {DESCRIPTION} file.", short="not a document format")
    if kind == "pdf":
        document = _read_pdf(data, name=name)
    else:
        text = _decode(data, name=name)
        if kind == "html":
            document = _read_html(text, name=name)
        else:
            document = Document(_first_heading(text), kind, markdown_sections(text))
    if not document.body:
        raise DocumentError(f"“{name}” is empty.", short="empty")
    return document


def _decode(data: bytes, *, name: str) -> str:
    if b"\x00" in data[:8192] or len(_CONTROL.findall(data[:8192].decode("latin-1"))) > 8:
        raise DocumentError(
            f"“{name}” looks like a binary file, not text; save it as {DESCRIPTION}.",
            short="binary, not text",
        )
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise DocumentError(
            f"“{name}” is not UTF-8 text (byte 0x{data[error.start]:02x} at position "
            f"{error.start} cannot be read). Save it as UTF-8 and try again.",
            short="not UTF-8 text",
        ) from None
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _first_heading(text: str) -> str:
    for line in text.splitlines():
        if match := _HEADING.match(line):
            return match.group("title").strip()
    return ""


def markdown_sections(text: str) -> list[Section]:
    """Text split at its Markdown headings; each part keeps the heading it sits under."""
    sections: list[Section] = []
    heading = ""
    lines: list[str] = []
    in_fence = False
    for line in text.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            in_fence = not in_fence
        match = None if in_fence else _HEADING.match(line)
        if match:
            if "\n".join(lines).strip():
                sections.append(Section("\n".join(lines).strip(), heading))
            heading, lines = match.group("title").strip()[:300], [line]
        else:
            lines.append(line)
    if "\n".join(lines).strip():
        sections.append(Section("\n".join(lines).strip(), heading))
    return sections


def _read_html(text: str, *, name: str) -> Document:
    # trafilatura keeps the main content only: no scripts, styles, navigation or footers.
    import trafilatura

    try:
        extracted = trafilatura.extract(
            text,
            output_format="markdown",
            include_comments=False,
            include_tables=True,
            include_images=False,
            include_links=False,
            favor_recall=True,
        )
        metadata = trafilatura.extract_metadata(text)
    except Exception as error:  # a parser failure on hostile markup is this file's problem
        logger.warning("Could not read HTML %s: %r", name, error)
        raise DocumentError(f"“{name}” is not readable HTML.", short="unreadable HTML") from None
    if not extracted or not extracted.strip():
        raise DocumentError(
            f"“{name}” has no main text (only navigation, scripts or markup).", short="no main text"
        )
    title = (getattr(metadata, "title", None) or "").strip() if metadata else ""
    return Document(title or _first_heading(extracted), "html", markdown_sections(extracted))


def _read_pdf(data: bytes, *, name: str) -> Document:
    from pypdf import PdfReader
    from pypdf.errors import DependencyError, FileNotDecryptedError, PdfReadError, PyPdfError

    if not data.lstrip()[:5].startswith(b"%PDF"):
        raise DocumentError(
            f"“{name}” is not a PDF (it does not start like one).", short="not a PDF"
        )
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            # Many PDFs are "encrypted" with an empty password only to restrict printing.
            try:
                if not reader.decrypt(""):
                    raise DocumentError(
                        f"“{name}” is password-protected; save an unprotected copy.",
                        short="password-protected PDF",
                    )
            except (FileNotDecryptedError, NotImplementedError, DependencyError):
                raise DocumentError(
                    f"“{name}” is password-protected; save an unprotected copy.",
                    short="password-protected PDF",
                ) from None
        sections = []
        for number, page in enumerate(reader.pages, start=1):
            text = _clean_pdf_text(page.extract_text() or "")
            if text:
                sections.append(Section(text, page=number))
        info = reader.metadata
        title = str(info.title or "").strip() if info else ""
    except DocumentError:
        raise
    except (PdfReadError, PyPdfError, ValueError, KeyError, TypeError, OSError) as error:
        logger.info("Unreadable PDF %s: %r", name, error)
        raise DocumentError(
            f"“{name}” is a damaged or unreadable PDF.", short="damaged or unreadable PDF"
        ) from None
    except RecursionError:
        raise DocumentError(
            f"“{name}” is a damaged or unreadable PDF.", short="damaged or unreadable PDF"
        ) from None
    if not sections:
        raise DocumentError(
            f"“{name}” has no text layer (a scanned PDF?); nothing to search.",
            short="no text layer (scanned PDF?)",
        )
    return Document(title, "pdf", sections)


def _clean_pdf_text(text: str) -> str:
    text = text.replace("\x00", "")
    # Join words hyphenated across lines; keep paragraph breaks.
    text = re.sub(r"(\w)-\n(\w)", r"\1\2", text)
    return "\n".join(line.rstrip() for line in text.splitlines()).strip()


def passages(sections: list[Section], *, size: int = PASSAGE_CHARS) -> list[Section]:
    """Sections cut into passages of about `size` characters, at paragraph, then sentence,
    then word boundaries; each keeps its section's page and heading."""
    out: list[Section] = []
    for section in sections:
        for chunk in _chunks(section.text, size):
            out.append(Section(chunk, section.heading, section.page))
            if len(out) >= MAX_PASSAGES:
                return out
    return out


def _chunks(text: str, size: int) -> list[str]:
    pieces: list[str] = []
    for paragraph in re.split(r"\n\s*\n", text):
        paragraph = paragraph.strip()
        if not paragraph:
            continue
        if len(paragraph) <= size:
            pieces.append(paragraph)
            continue
        sentences = re.split(r"(?<=[.!?])\s+", paragraph)
        for sentence in sentences:
            while len(sentence) > size:  # one enormous "sentence": cut at a space
                cut = sentence.rfind(" ", 0, size)
                cut = cut if cut > size // 2 else size
                pieces.append(sentence[:cut].strip())
                sentence = sentence[cut:].strip()
            if sentence:
                pieces.append(sentence)
    chunks: list[str] = []
    current = ""
    for piece in pieces:
        if current and len(current) + 2 + len(piece) > size:
            chunks.append(current)
            current = piece
        else:
            current = f"{current}\n\n{piece}" if current else piece
    if current:
        chunks.append(current)
    return chunks
