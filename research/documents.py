"""Reading the documents people have: PDF, HTML, Markdown and plain text, into a title, the
full text and sections (with their page or heading), and splitting sections into passages.

The upload form, `import_knowledge` and the API all read files through `read_document`, run
in a process of its own with a time and a memory limit (research/read_process.py), so a file
is accepted, or refused with the same sentence, wherever it comes from, and no file can hold
up the server.

The text is stored as a reader sees it: NFKC-normalised (a PDF's "ﬁ" ligature is found by
"fi"), without NUL or control characters (PostgreSQL refuses NUL in text), and with a title
that means something (not "Untitled" or "Microsoft Word - Document1": then the file's name).
Markdown and HTML are stored as plain text, their markup taken out (research/markup.py),
each section under its heading; a PDF's sections are its pages, cut where its outline's
entries begin, under their titles. Passages keep a code block or a table whole when it fits.
Everything here takes time linear in the size of the text: headings are found with string
operations, not with patterns that can backtrack over a long line.
"""

from __future__ import annotations

import codecs
import io
import logging
import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import markup
from .markup import atx_heading
from .markup import fence as _fence

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
MAX_PASSAGES = 5000  # a longer document is cut here, and says so (Document.notes)
# Passages hold at most PASSAGE_CHARS each, so text past this many characters would only
# make passages past the limit: it is not read at all (a PDF's later pages are not parsed).
MAX_TEXT_CHARS = MAX_PASSAGES * PASSAGE_CHARS
TITLE_CHARS = 300
# A text file has no NUL bytes and few control characters; a binary one has plenty.
_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1f]")

# Stored text keeps tabs and newlines; other C0 and C1 controls and DEL go (NUL above all),
# as do byte-order marks and soft hyphens (a PDF's "hy\xadphen" is found by "hyphen");
# line, paragraph and page separators become newlines.
_DROPPED = [*range(0x00, 0x09), *range(0x0E, 0x20), 0x7F, *range(0x80, 0xA0), 0xAD, 0xFEFF]
_CLEAN = {code: None for code in _DROPPED} | {
    ord(c): "\n" for c in ("\r", "\x0b", "\x0c", "\x85", "\u2028", "\u2029")
}
# Lone surrogates (from a broken PDF string) cannot be encoded, so no database stores them.
_SURROGATES = re.compile("[\ud800-\udfff]")

# Glyph names where letters should be ("/g18/g152", "/uni0041", "(cid:12)"): what a PDF
# without a character map yields. With private-use characters, replacement characters and
# controls they are the noise that makes a text unreadable.
_GLYPH_NAMES = re.compile(r"/(?:[gGcC]|glyph|cid)\d+|/uni[0-9A-Fa-f]{4,6}|\(cid:\d+\)")
_NOISE = re.compile("[\ue000-\uf8ff\ufffd\U000f0000-\U0010ffff\x00-\x08\x0e-\x1f\x7f-\x9f]+")
_NOT_WORDS = re.compile(r"\W+")
_RUNS = re.compile(r"(\S)\1{3,}")
UNREADABLE_SHARE = 0.5  # more glyph names and noise than this share of the text: refused
SAMPLE_CHARS = 100_000  # of a longer text, 20 evenly spaced parts are judged
MIN_WORD_SHARE = 0.25  # and fewer letters and digits than this share (of 40 characters or more)

# Titles that say nothing about the document: what an editor fills in by itself.
_APP_PREFIX = re.compile(
    r"(?:microsoft\s+(?:word|powerpoint|excel|office\s+word)|word|powerpoint|excel)\s*-\s*",
    re.IGNORECASE,
)
_PLACEHOLDER = re.compile(
    r"(?:untitled|no\s+title|title|untitled\s+document|new\s+document|document|doc|"
    r"presentation|book|slide|draft|blank|none|null|unknown|anonymous|default|"
    r"microsoft\s+word|title\s+of\s+the\s+document)[\s_-]*\d*",
    re.IGNORECASE,
)
_EXTENSIONS = r"\.(?:docx?|rtf|odt|pdf|tex|dvi|ps|eps|indd|qxd|pptx?|xlsx?|txt|html?|md|pages)"
_FILE_NAME = re.compile(r"\S+" + _EXTENSIONS, re.IGNORECASE)
_EXTENSION = re.compile(_EXTENSIONS + r"\Z", re.IGNORECASE)


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
    title: str  # the document's own, else its first heading, else from the file name
    format: str
    sections: list[Section] = field(default_factory=list)
    # What a person should know about how it was read: a cut at the passage limit, pages
    # left out, warnings of the parser. Shown with the upload and the import, and stored.
    notes: list[str] = field(default_factory=list)
    # Its reader stopped early (past MAX_TEXT_CHARS): the passages kept say so in a note.
    truncated: bool = False

    @property
    def body(self) -> str:
        return "\n\n".join(s.text for s in self.sections if s.text.strip()).strip()


def format_of(name: str) -> str | None:
    return FORMATS.get(Path(name).suffix.lower())


def read_document(data: bytes, *, name: str) -> Document:
    """The document in `data`, read by its file name's suffix, in this process (see
    research/read_process.py for the bounded way). Raises DocumentError."""
    kind = format_of(name)
    if kind is None:
        raise DocumentError(f"“{name}” is not a {DESCRIPTION} file.", short="not a document format")
    notes: list[str] = []
    if kind == "pdf":
        document = _read_pdf(data, name=name, notes=notes)
    else:
        if kind == "html":
            document = _read_html(_decode_html(data, name=name, notes=notes), name=name)
        else:
            text = _decode(data, name=name)
            sections = markdown_sections(
                clean_text(text[:MAX_TEXT_CHARS]), markdown=kind == "markdown"
            )
            document = Document("", kind, sections)
            document.truncated = len(text) > MAX_TEXT_CHARS
        if unreadable(document.body):
            raise _unreadable_error(name)
    if not document.body:
        raise DocumentError(f"“{name}” is empty.", short="empty")
    document.notes = notes + document.notes
    document.title = (
        meaningful_title(document.title)
        or meaningful_title(_first_heading(document))
        or title_from_filename(name)
    )
    _keep_passage_limit(document)
    return document


def _first_heading(document: Document) -> str:
    """A Markdown or HTML document's first heading (its markup is gone from the text, so it
    is its first section's); a text file's first Markdown heading. A PDF's headings are its
    outline's: "Introduction" says less than the file's name."""
    if document.format in ("markdown", "html"):
        return next((s.heading for s in document.sections if s.heading), "")
    return first_heading(document.body) if document.format == "text" else ""


# --- cleaning -------------------------------------------------------------------------------


def clean_text(text: str) -> str:
    """`text` as it is stored and searched: NFKC-normalised, one kind of line break, no
    control characters but tabs and newlines, no surrogates."""
    text = text.replace("\r\n", "\n").translate(_CLEAN)
    try:
        text.encode()
    except UnicodeEncodeError:  # rare: only then look for the surrogates
        text = _SURROGATES.sub("", text)
    return unicodedata.normalize("NFKC", text).strip()


def meaningful_title(title: str) -> str:
    """`title` cleaned, or "" when it says nothing ("Untitled", "Document1", "Microsoft Word
    - Document1", a bare file name, no letters at all)."""
    title = " ".join(clean_text(title[:2000]).split())
    if not title or _FILE_NAME.fullmatch(title):
        return ""
    if prefix := _APP_PREFIX.match(title):  # "Microsoft Word - Budget 2024.docx"
        title = _EXTENSION.sub("", title[prefix.end() :]).strip()
    if _PLACEHOLDER.fullmatch(title) or not any(c.isalpha() for c in title):
        return ""
    return title


def title_from_filename(name: str) -> str:
    stem = Path(name).stem
    return " ".join(stem.replace("_", " ").replace("-", " ").split()) or stem or "Untitled"


def unreadable(text: str) -> bool:
    """Whether `text` is mostly glyph names, private-use or replacement characters and
    controls, or hardly has a letter or digit among its other characters: what a PDF without
    a character map, or a binary file, yields instead of words. A long text is judged by
    evenly spaced samples of it."""
    if len(text) > SAMPLE_CHARS:
        step = len(text) // 20
        text = "\n".join(
            text[start : start + SAMPLE_CHARS // 20] for start in range(0, len(text), step)
        )
    visible = len(text) - sum(text.count(c) for c in " \n\t")
    if visible == 0:
        return False
    noise = sum(len(m) for m in _GLYPH_NAMES.findall(text))
    noise += sum(len(m) for m in _NOISE.findall(text))
    if noise > UNREADABLE_SHARE * visible:
        return True
    # Runs of one character (dot leaders, rules of "-----") are layout, not noise.
    text = _RUNS.sub("", text)
    visible = len(text) - sum(text.count(c) for c in " \n\t")
    words = len(_NOT_WORDS.sub("", text))
    return visible >= 40 and words < MIN_WORD_SHARE * visible


def _unreadable_error(name: str) -> DocumentError:
    return DocumentError(
        f"“{name}” has no readable text: it holds glyph codes or binary noise, not words.",
        short="no readable text (glyph codes or noise)",
    )


# --- text files and HTML --------------------------------------------------------------------


def _refuse_binary(data: bytes, *, name: str) -> None:
    head = data[:8192]
    if b"\x00" in head or len(_CONTROL.findall(head.decode("latin-1"))) > 8:
        raise DocumentError(
            f"“{name}” looks like a binary file, not text; save it as {DESCRIPTION}.",
            short="binary, not text",
        )


def _decode(data: bytes, *, name: str) -> str:
    _refuse_binary(data, name=name)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise DocumentError(
            f"“{name}” is not UTF-8 text (byte 0x{data[error.start]:02x} at position "
            f"{error.start} cannot be read). Save it as UTF-8 and try again.",
            short="not UTF-8 text",
        ) from None


_BOMS = (
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
# <meta charset="..."> or <meta http-equiv="Content-Type" content="text/html; charset=...">,
# and an XML declaration's encoding, looked for in the first bytes as browsers do. The
# bounded gap keeps the search linear.
_DECLARED = re.compile(
    rb"""<meta[^>]{0,512}?charset\s{0,8}=\s{0,8}["']?\s{0,8}([A-Za-z0-9_:.+-]{1,40})"""
    rb"""|<\?xml[^>]{0,256}?encoding\s{0,8}=\s{0,8}["']([A-Za-z0-9_:.+-]{1,40})""",
    re.IGNORECASE,
)
# As browsers read them (the WHATWG Encoding standard): a page that says Latin-1 or ASCII is
# windows-1252, one that says UTF-16 without a byte-order mark is UTF-8.
_LABELS = {
    "iso-8859-1": "cp1252",
    "iso8859-1": "cp1252",
    "latin1": "cp1252",
    "latin-1": "cp1252",
    "l1": "cp1252",
    "ascii": "cp1252",
    "us-ascii": "cp1252",
    "windows-1252": "cp1252",
    "x-cp1252": "cp1252",
    "iso-8859-9": "cp1254",
    "iso-8859-11": "cp874",
    "tis-620": "cp874",
    "gb2312": "gb18030",
    "gbk": "gb18030",
    "utf-16": "utf-8",
    "utf-16le": "utf-8",
    "utf-16be": "utf-8",
}


def _declared_charset(data: bytes) -> str | None:
    match = _DECLARED.search(data[:4096])
    if not match:
        return None
    label = (match.group(1) or match.group(2)).decode("ascii").lower()
    label = _LABELS.get(label, label)
    try:
        return codecs.lookup(label).name
    except LookupError:
        return None


def _decode_html(data: bytes, *, name: str, notes: list[str]) -> str:
    """The page's text in the character set it declares (a byte-order mark, then a meta tag),
    else UTF-8, else the one its bytes suggest."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            return data[len(bom) :].decode(encoding, errors="replace")
    _refuse_binary(data, name=name)
    declared = _declared_charset(data)
    for encoding in dict.fromkeys(e for e in (declared, "utf-8") if e):
        try:
            return data.decode(encoding)
        except UnicodeDecodeError:
            continue
    import charset_normalizer

    # Browsers fall back to windows-1252; so does this, unless the bytes read clearly better
    # in another character set (a short page reads about as well in several).
    matches = charset_normalizer.from_bytes(data[:1_000_000])
    best = matches.best()
    western = next((m for m in matches if m.encoding == "cp1252"), None)
    if best is not None and western is not None and western.chaos <= best.chaos:
        best = western if western.coherence >= best.coherence - 0.1 else best
    if best is not None and best.encoding:
        notes.append(
            f"Read as {best.encoding} text (its bytes are not valid {declared or 'UTF-8'})."
        )
        return data.decode(best.encoding, errors="replace")
    if declared:
        return data.decode(declared, errors="replace")
    raise DocumentError(
        f"“{name}” is not UTF-8 and declares no character set that reads it; save it as UTF-8.",
        short="unknown character set",
    )


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
    except MemoryError:
        raise
    except Exception as error:  # a parser failure on hostile markup is this file's problem
        logger.info("Could not read HTML %s: %r", name, error)
        raise DocumentError(f"“{name}” is not readable HTML.", short="unreadable HTML") from None
    extracted = extracted or ""
    text = clean_text(extracted[:MAX_TEXT_CHARS])
    if not text:
        raise DocumentError(
            f"“{name}” has no main text (only navigation, scripts or markup).", short="no main text"
        )
    title = (getattr(metadata, "title", None) or "") if metadata else ""
    document = Document(title, "html", markdown_sections(text))
    document.truncated = len(extracted) > MAX_TEXT_CHARS
    return document


# --- Markdown headings, linear in the length of a line ---------------------------------------


def _setext_underline(line: str) -> bool:
    """A line of only "=" or only "-" (spaces around): it makes the line above a heading."""
    marks = line.strip(" \t")
    return bool(marks) and (marks == "=" * len(marks) or marks == "-" * len(marks))


def first_heading(text: str) -> str:
    """The first Markdown heading of `text` (ATX or setext, not inside a code block), or ""."""
    previous = ""
    fence = ""
    for line in text.splitlines():
        marker = _fence(line)
        if fence or marker:
            if not fence:
                fence = marker
            elif marker.startswith(fence) and line.strip() == marker:
                fence = ""
            previous = ""
            continue
        if title := atx_heading(line):
            return title
        if previous.strip() and _setext_underline(line):
            return " ".join(previous.split())
        previous = line
    return ""


def markdown_sections(text: str, *, markdown: bool = True) -> list[Section]:
    """Text split at its Markdown headings; each part keeps the heading it sits under. As
    `markdown` (the default) setext headings ("Title" over "=====") split it too, and the
    parts and headings are plain text, their markup taken out (research/markup.py); a text
    file's parts keep their text as written."""
    sections: list[Section] = []
    heading = ""
    lines: list[str] = []
    fence = ""

    def close() -> None:
        body = "\n".join(lines)
        body = (markup.plain(body) if markdown else body).strip()
        if body:
            sections.append(Section(body, heading))

    for line in text.splitlines():
        marker = _fence(line)
        if fence:
            if marker.startswith(fence) and line.strip() == marker:
                fence = ""
        elif marker:
            fence = marker
        elif (title := atx_heading(line)) or (markdown and _setext_heading(lines, line)):
            start = [line] if title else [lines.pop(), line]
            title = title or start[0]
            close()
            title = markup.inline(title[: TITLE_CHARS * 4]) if markdown else title
            heading, lines = " ".join(title.split())[:TITLE_CHARS], start
            continue
        lines.append(line)
    close()
    return sections


def _setext_heading(lines: list[str], line: str) -> bool:
    """Whether `line` underlines the last of `lines` as a setext heading."""
    if not lines or not _setext_underline(line):
        return False
    above = lines[-1]
    return bool(above.strip()) and not (
        _fence(above) or atx_heading(above) or _setext_underline(above) or above[:1] in " \t|>"
    )


# --- PDF ------------------------------------------------------------------------------------


def _read_pdf(data: bytes, *, name: str, notes: list[str]) -> Document:
    from pypdf import PdfReader
    from pypdf.errors import DependencyError, FileNotDecryptedError, LimitReachedError

    if b"%PDF" not in data[:1024]:
        raise DocumentError(
            f"“{name}” is not a PDF (it does not start like one).", short="not a PDF"
        )
    damaged = DocumentError(
        f"“{name}” is a damaged or unreadable PDF.", short="damaged or unreadable PDF"
    )
    locked = DocumentError(
        f"“{name}” is password-protected; save an unprotected copy.",
        short="password-protected PDF",
    )
    sections: list[Section] = []
    noisy: list[int] = []  # pages of glyph codes or noise
    broken: list[int] = []  # pages the parser failed on
    truncated = False
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            # Many PDFs are "encrypted" with an empty password only to restrict printing.
            try:
                opened = reader.decrypt("")
            except (FileNotDecryptedError, NotImplementedError):
                raise locked from None
            if not opened:
                raise locked
        chars = 0
        outline = _outline(reader, name=name)
        heading = ""  # the outline entry the text so far sits under
        for number, page in enumerate(reader.pages, start=1):
            if chars > MAX_TEXT_CHARS:  # the pages read make more passages than are kept
                truncated = True
                break
            try:
                text = clean_text(_join_hyphenated(page.extract_text() or ""))
            except (LimitReachedError, DependencyError, MemoryError):
                raise  # the whole file's problem
            except Exception as error:  # one damaged page: the others are still read
                logger.info("Unreadable page %s of PDF %s: %r", number, name, error)
                broken.append(number)
                text = ""
            entries = outline.get(number, [])
            if text and unreadable(text):
                noisy.append(number)
            elif text:
                parts, heading = _headed_sections(text, number, entries, heading)
                sections += parts
                chars += len(text)
                continue
            heading = entries[-1] if entries else heading
        title = _pdf_title(reader)
    except DocumentError:
        raise
    except LimitReachedError as error:
        logger.info("PDF %s over a reading limit: %s", name, error)
        raise DocumentError(
            f"“{name}” is too large to read: a part of it expands past the size limit when "
            "decompressed.",
            short="too large when decompressed",
        ) from None
    except FileNotDecryptedError:
        raise locked from None
    except DependencyError:
        raise DocumentError(
            f"“{name}” is encrypted or compressed in a way this server cannot read; save a "
            "plain copy.",
            short="encryption or compression not supported",
        ) from None
    except MemoryError:
        raise
    except Exception as error:  # any parser failure is this file's problem
        logger.info("Unreadable PDF %s: %r", name, error)
        raise damaged from None
    if broken and not sections and not noisy:
        raise damaged
    if noisy and not sections:
        raise _unreadable_error(name)
    if noisy:
        notes.append(
            f"{_pages(noisy)} held glyph codes or noise instead of words and "
            f"{'was' if len(noisy) == 1 else 'were'} left out."
        )
    if broken:
        notes.append(
            f"{_pages(broken)} could not be read (damaged) and "
            f"{'was' if len(broken) == 1 else 'were'} left out."
        )
    if not sections:
        raise DocumentError(
            f"“{name}” has no text layer (a scanned PDF?); nothing to search.",
            short="no text layer (scanned PDF?)",
        )
    return Document(title, "pdf", sections, truncated=truncated)


MAX_OUTLINE_ENTRIES = 2000  # a document's; the rest are not read
MAX_PAGE_ENTRIES = 50  # looked for in one page's text


def _outline(reader: Any, *, name: str) -> dict[int, list[str]]:
    """The titles of the PDF's outline (its bookmarks), by the page they point to (from 1),
    in the outline's order; {} when it has none or it is damaged."""
    found: dict[int, list[str]] = {}
    try:
        pending = [iter(reader.outline)]
        count = 0
        while pending and count < MAX_OUTLINE_ENTRIES:
            entry = next(pending[-1], None)
            if entry is None:
                pending.pop()
            elif isinstance(entry, list):  # the entries under the one before
                if len(pending) < 32:
                    pending.append(iter(entry))
            else:
                count += 1
                title = " ".join(clean_text(str(entry.title or "")[: TITLE_CHARS * 2]).split())
                page = reader.get_destination_page_number(entry)
                if title and page is not None and page >= 0:
                    found.setdefault(page + 1, []).append(title[:TITLE_CHARS])
    except MemoryError:
        raise
    except Exception as error:  # a damaged outline: the text is still read, without it
        logger.info("Unreadable outline of PDF %s: %r", name, error)
    return found


def _headed_sections(
    text: str, page: int, titles: list[str], heading: str
) -> tuple[list[Section], str]:
    """A page's text cut where the outline entries that point to the page begin (the line
    that starts with the entry's title; an entry not found begins where the one before it
    does, else at the top), each part under its entry; the text before the first keeps the
    `heading` carried from the pages before. Returns the parts and the heading carried on."""
    if not titles:
        return [Section(text, heading, page)], heading
    lines = text.split("\n")
    keys = [_heading_key(line) for line in lines]
    cuts: list[tuple[int, str]] = []
    search_from = cut_at = 0
    for title in titles[:MAX_PAGE_ENTRIES]:
        key = _heading_key(title)
        found = next((i for i in range(search_from, len(lines)) if _begins(keys[i], key)), None)
        if found is not None:
            cut_at, search_from = found, found + 1
        cuts.append((cut_at, title))
    parts: list[Section] = []
    bounds = [(0, heading), *cuts]
    for (begin, title), (end, _) in zip(bounds, [*cuts, (len(lines), "")], strict=True):
        if part := "\n".join(lines[begin:end]).strip():
            parts.append(Section(part, title, page))
    return parts, cuts[-1][1]


def _heading_key(text: str) -> str:
    return "".join(c for c in text.casefold() if c.isalnum())


def _begins(line: str, title: str) -> bool:
    """Whether a line (as `_heading_key` gives it) is the heading `title`: it starts with the
    title, perhaps after its number ("2.1 Methods"), or is the first part of a long title."""
    if not title or not line or len(line) > 2 * len(title) + 10:
        return False
    return (
        line.startswith(title)
        or line.lstrip("0123456789").startswith(title)
        or (len(line) >= 12 and title.startswith(line))
    )


def _pdf_title(reader: Any) -> str:
    """The title in the PDF's information, or "" (also when that part is damaged)."""
    try:
        info = reader.metadata
        return str(info.title or "") if info else ""
    except MemoryError:
        raise
    except Exception:  # a damaged information dictionary: the title comes from elsewhere
        return ""


def _pages(numbers: list[int]) -> str:
    if len(numbers) == 1:
        return f"Page {numbers[0]}"
    shown = ", ".join(str(n) for n in numbers[:10])
    more = f" and {len(numbers) - 10} more" if len(numbers) > 10 else ""
    return f"Pages {shown}{more}"


def _join_hyphenated(text: str) -> str:
    # Join words hyphenated across lines; keep paragraph breaks.
    text = re.sub(r"(\w)-\n(\w)", r"\1\2", text)
    return "\n".join(line.rstrip() for line in text.splitlines())


# --- passages -------------------------------------------------------------------------------


def _keep_passage_limit(document: Document) -> None:
    """A document over MAX_PASSAGES passages keeps the first ones, and a note that says so."""
    parts = passages(document.sections, limit=MAX_PASSAGES + 1)
    if len(parts) <= MAX_PASSAGES and not document.truncated:
        return
    document.sections = parts[:MAX_PASSAGES]
    document.notes.append(truncation_note(len(document.sections), document.sections[-1]))


def truncation_note(kept: int, last: Section) -> str:
    where = f" (after page {last.page})" if last.page else ""
    where = where or (f" (after “{last.heading}”)" if last.heading else "")
    return (
        f"Truncated at {kept:,} passages (the limit is {MAX_PASSAGES:,}): the text that "
        f"follows{where} was not stored. Split the document to keep all of it."
    )


def passages(
    sections: list[Section], *, size: int = PASSAGE_CHARS, limit: int = MAX_PASSAGES
) -> list[Section]:
    """Sections cut into at most `limit` passages of about `size` characters, at paragraph,
    then sentence, then word boundaries (a fenced code block or a table stays whole when it
    fits one passage; a longer one is cut between lines or rows, each part fenced again or
    under the table's header); each keeps its section's page and heading."""
    out: list[Section] = []
    for section in sections:
        for chunk in _chunks(section.text, size):
            out.append(Section(chunk, section.heading, section.page))
            if len(out) >= limit:
                return out
    return out


def _blocks(text: str) -> Iterator[tuple[str, str]]:
    """(block, kind): the paragraphs of `text` (split at blank lines, kind "prose"), its
    fenced code blocks, which blank lines do not split ("code"), and its tables, rows of
    cells between "|" ("table")."""
    lines: list[str] = []
    kind = "prose"
    fence = ""
    for line in text.split("\n"):
        if fence:
            lines.append(line)
            if markup.closes(fence, line):
                yield "\n".join(lines), "code"
                lines, fence, kind = [], "", "prose"
            continue
        marker = _fence(line)
        row = _is_row(line)
        if lines and (marker or (row != (kind == "table")) or not line.strip()):
            yield "\n".join(lines).strip(), kind
            lines, kind = [], "prose"
        if marker:
            lines, fence = [line], marker
        elif line.strip():
            lines.append(line)
            kind = "table" if row else "prose"
    if lines:
        yield "\n".join(lines).strip(), "code" if fence else kind


def _is_row(line: str) -> bool:
    stripped = line.strip()
    return len(stripped) > 1 and stripped[0] == "|" and stripped[-1] == "|"


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def _split_prose(paragraph: str, size: int) -> Iterator[str]:
    for sentence in _SENTENCE_END.split(paragraph):
        start = 0
        while len(sentence) - start > size:  # one enormous "sentence": cut at a space
            cut = sentence.rfind(" ", start, start + size)
            cut = cut if cut > start + size // 2 else start + size
            if piece := sentence[start:cut].strip():
                yield piece
            start = cut
        if rest := sentence[start:].strip():
            yield rest


def _split_code(block: str, size: int) -> Iterator[str]:
    """A code block too long for one passage, cut at line ends; each part is fenced again."""
    lines = block.split("\n")
    opening = lines[0].strip()[: size // 4]
    fence = _fence(opening)
    body = lines[1:-1] if len(lines) > 1 and _fence(lines[-1]).startswith(fence) else lines[1:]
    room = size - len(opening) - len(fence) - 2
    part: list[str] = []
    used = 0
    for whole in body:
        line = whole
        if len(whole) > room:  # one enormous line: cut it
            if part:
                yield "\n".join([opening, *part, fence])
                part, used = [], 0
            cuts = range(0, len(whole), room)
            for start in cuts[:-1]:
                yield "\n".join([opening, whole[start : start + room], fence])
            line = whole[cuts[-1] :]
        if part and used + len(line) + 1 > room:
            yield "\n".join([opening, *part, fence])
            part, used = [], 0
        part.append(line)
        used += len(line) + 1
    if part:
        yield "\n".join([opening, *part, fence])


def _split_table(block: str, size: int) -> Iterator[str]:
    """A table too long for one passage, cut between rows; each part starts with the
    table's first row (its header), so a row is never read without its columns' names."""
    header, *rows = block.split("\n")
    header = header[: size // 4]
    part: list[str] = []
    used = len(header)
    for row in rows:
        if len(header) + 1 + len(row) > size:  # one enormous row: it goes as prose
            if part:
                yield "\n".join([header, *part])
                part, used = [], len(header)
            yield from _split_prose(row, size)
            continue
        if part and used + 1 + len(row) > size:
            yield "\n".join([header, *part])
            part, used = [], len(header)
        part.append(row)
        used += 1 + len(row)
    if part or not rows:
        yield "\n".join([header, *part])


def _chunks(text: str, size: int) -> list[str]:
    pieces: list[str] = []
    for block, kind in _blocks(text):
        if len(block) <= size:
            pieces.append(block)
        elif kind == "code":
            pieces.extend(_split_code(block, size))
        elif kind == "table":
            pieces.extend(_split_table(block, size))
        else:
            pieces.extend(_split_prose(block, size))
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
