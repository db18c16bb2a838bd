"""PDF files for tests, written byte by byte: well-formed ones (one page per text, optionally
encrypted) and the hostile kinds found in the wild (a decompression bomb, a fuzzed file, a
NUL in the title, glyph names instead of a character map, ligatures)."""

from __future__ import annotations

import io
import random
import zlib

HELVETICA = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>"
# Character codes 1 and 2 are the "fi" and "fl" ligatures, as a typeset paper's fonts have.
LIGATURES = (
    b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding << /Type /Encoding"
    b" /BaseEncoding /WinAnsiEncoding /Differences [1 /fi /fl] >> >>"
)
# A subset font whose glyphs have names but no Unicode meaning: text comes out as "/g18/g152".
GLYPH_NAMES = (
    b"<< /Type /Font /Subtype /Type1 /BaseFont /ABCDEF+Garbled /Encoding << /Type /Encoding"
    b" /Differences [1 /g18 /g152 /g3 /g87 /g75 /g81 /g76] >> >>"
)


def pdf_file(objects: list[bytes], *, info: int | None = None) -> bytes:
    """A PDF of `objects` (object n is objects[n - 1]; object 1 is the catalog), with a
    correct cross-reference table."""
    out = bytearray(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    for offset in offsets:
        out += b"%010d 00000 n \n" % offset
    trailer = b"/Size %d /Root 1 0 R" % (len(objects) + 1)
    if info is not None:
        trailer += b" /Info %d 0 R" % info
    out += b"trailer\n<< %s >>\nstartxref\n%d\n%%%%EOF\n" % (trailer, xref)
    return bytes(out)


def stream(data: bytes, extra: bytes = b"") -> bytes:
    return b"<< /Length %d%s >>\nstream\n%s\nendstream" % (len(data), extra, data)


def text_string(text: str) -> bytes:
    """A PDF text string for the document's information (any characters, NUL included)."""
    return b"<FEFF" + text.encode("utf-16-be").hex().upper().encode() + b">"


def show(text: str) -> bytes:
    """Content-stream operators that show `text`, one line per line (codes 0-255)."""
    lines = []
    for line in text.split("\n"):
        escaped = "".join(
            f"\\{ord(c):03o}" if c in "()\\" or not 32 <= ord(c) < 127 else c for c in line
        )
        lines.append(f"({escaped}) Tj T*".encode("latin-1"))
    return b"BT /F1 11 Tf 14 TL 50 740 Td " + b" ".join(lines) + b" ET"


def pdf_of_contents(
    contents: list[bytes], *, title: str = "", font: bytes = HELVETICA, filter_: bytes = b""
) -> bytes:
    """One page per content stream, all in `font`; `filter_` names the streams' filter (they
    are given already encoded)."""
    count = len(contents)
    kids = b" ".join(b"%d 0 R" % (4 + 2 * n) for n in range(count))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [%s] /Count %d >>" % (kids, count),
        font,
    ]
    for n, content in enumerate(contents):
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792]"
            b" /Resources << /Font << /F1 3 0 R >> >> /Contents %d 0 R >>" % (5 + 2 * n)
        )
        objects.append(stream(content, b" /Filter " + filter_ if filter_ else b""))
    info = None
    if title:
        objects.append(b"<< /Title %s /Producer (tests) >>" % text_string(title))
        info = len(objects)
    return pdf_file(objects, info=info)


def make_pdf(
    pages: list[str], *, title: str = "", password: str | None = None, font: bytes = HELVETICA
) -> bytes:
    """A PDF whose page n shows pages[n] (a line per line of it)."""
    data = pdf_of_contents([show(text) for text in pages], title=title, font=font)
    if password is None:
        return data
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(data)))
    writer.encrypt(user_password=password, owner_password="owner", algorithm="RC4-128")
    buffer = io.BytesIO()
    writer.write(buffer)
    return buffer.getvalue()


def bomb_pdf(expands_to: int = 100_000_000) -> bytes:
    """A PDF of about 100 KB whose one page's content stream inflates to `expands_to` bytes."""
    deflate = zlib.compressobj(9)
    block = b" " * 1_000_000
    compressed = b"".join(deflate.compress(block) for _ in range(expands_to // len(block)))
    return pdf_of_contents([compressed + deflate.flush()], filter_=b"/FlateDecode")


def pdf_with_a_damaged_page() -> bytes:
    """Three pages; the second's content stream is not what its filter says it is."""
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [4 0 R 6 0 R 8 0 R] /Count 3 >>",
        HELVETICA,
    ]
    for n in (1, 2, 3):
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792]"
            b" /Resources << /Font << /F1 3 0 R >> >> /Contents %d 0 R >>" % (3 + 2 * n)
        )
        # Page 2's stream is no LZW code stream, though its filter says so.
        content = stream(b"\xff" * 50, b" /Filter /LZWDecode") if n == 2 else None
        objects.append(content or stream(show(f"Text of page {n}.")))
    return pdf_file(objects)


def slow_pdf(operators: int = 400_000) -> bytes:
    """A PDF of a few KB that takes pypdf many seconds to read: one page of tiny text runs."""
    content = b"BT /F1 11 Tf 50 740 Td " + b"(ab) Tj " * operators + b"ET"
    return pdf_of_contents([zlib.compress(content)], filter_=b"/FlateDecode")


def repaired_pdf() -> bytes:
    """A PDF whose byte offsets are all wrong: pypdf repairs it, and warns while it does."""
    good = make_pdf(["Readable after repair."], title="Repaired report")
    return good.replace(b"%PDF-1.7\n", b"%PDF-1.7\n%" + b"x" * 40 + b"\n", 1)


def glyph_name_pdf(pages: int = 2) -> bytes:
    """Pages whose text comes out as glyph names ("/g18/g152/g3…"), not letters."""
    codes = "".join(chr(n) for n in (1, 2, 3, 4, 5, 6, 7)) * 12
    return make_pdf([codes] * pages, font=GLYPH_NAMES)


def fuzzed(data: bytes, seed: int) -> bytes:
    """`data` cut short or with a few bytes changed, as damaged files are."""
    rng = random.Random(seed)
    if seed % 3 == 0:
        return data[: rng.randrange(len(data))]
    damaged = bytearray(data)
    for _ in range(rng.randint(1, 12)):
        damaged[rng.randrange(len(damaged))] = rng.randrange(256)
    return bytes(damaged)
