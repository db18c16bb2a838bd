"""A generated knowledge base for the search benchmark: documents shaped like real ones.

Words follow a Zipf distribution (as in real text) over English's commonest words followed
by a made-up vocabulary of 20,000; sentences of 6 to 24 words make paragraphs of 3 to 7
sentences under Markdown headings. Document lengths are varied as in a real collection:
many short notes, documents of a few pages, a few very long ones (a book, long papers), one
long paper stored 13 times over (copies as notes, each its own item), and short notes stored
three times. One short page holds a word found nowhere else. The same seed gives the same corpus.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field

# The commonest words of English text, most of them stop words: the first ranks of the Zipf
# distribution, as in real text (so the commonest made-up words are about as common as
# English's commonest content words).
FUNCTION_WORDS = [
    "the",
    "of",
    "and",
    "to",
    "a",
    "in",
    "is",
    "that",
    "for",
    "it",
    "as",
    "was",
    "with",
    "be",
    "by",
    "on",
    "not",
    "he",
    "this",
    "are",
    "or",
    "his",
    "from",
    "at",
    "which",
    "but",
    "have",
    "an",
    "they",
    "you",
    "were",
    "her",
    "she",
    "there",
    "their",
    "one",
    "all",
    "we",
    "can",
    "has",
    "more",
    "also",
    "its",
    "other",
    "these",
    "than",
    "into",
    "between",
    "used",
    "may",
    "two",
    "first",
    "new",
    "time",
    "some",
    "only",
    "such",
    "over",
    "each",
]
SYLLABLES = [
    "ba",
    "be",
    "bi",
    "bo",
    "bu",
    "da",
    "de",
    "di",
    "do",
    "du",
    "fa",
    "fe",
    "fi",
    "fo",
    "ka",
    "ke",
    "ki",
    "ko",
    "la",
    "le",
    "li",
    "lo",
    "lu",
    "ma",
    "me",
    "mi",
    "mo",
    "mu",
    "na",
    "ne",
    "ni",
    "no",
    "nu",
    "pa",
    "pe",
    "pi",
    "po",
    "ra",
    "re",
    "ri",
    "ro",
    "ru",
    "sa",
    "se",
    "si",
    "so",
    "su",
    "ta",
    "te",
    "ti",
    "to",
    "tu",
    "va",
    "ve",
    "vi",
    "vo",
    "za",
    "zo",
    "tran",
    "stel",
    "mor",
    "quen",
    "plas",
    "dral",
    "vin",
    "thor",
    "gren",
    "sult",
]
VOCABULARY = 20_000
RARE_WORD = "zorblaxite"


@dataclass
class Corpus:
    documents: list[tuple[str, str]] = field(default_factory=list)  # (title, body)
    sentences: list[str] = field(default_factory=list)  # exact-sentence queries
    rare_query: str = ""  # the rare word and three words of the copied paper
    rare_title: str = ""  # the only page with the rare word

    @property
    def characters(self) -> int:
        return sum(len(body) for _, body in self.documents)


class _Writer:
    def __init__(self, seed: int) -> None:
        self.random = random.Random(seed)
        words: list[str] = list(FUNCTION_WORDS)
        seen: set[str] = set(words)
        while len(words) < VOCABULARY:
            word = "".join(self.random.choices(SYLLABLES, k=self.random.choice((2, 3, 3, 4))))
            if word not in seen:
                seen.add(word)
                words.append(word)
        self.words = words
        self.content = words[len(FUNCTION_WORDS) :]
        self.weights = list(itertools.accumulate(1 / rank for rank in range(1, VOCABULARY + 1)))

    def sentence(self) -> str:
        count = self.random.randint(6, 24)
        words = self.random.choices(self.words, cum_weights=self.weights, k=count)
        return " ".join(words).capitalize() + "."

    def paragraph(self) -> list[str]:
        return [self.sentence() for _ in range(self.random.randint(3, 7))]

    def title(self) -> str:
        return " ".join(
            self.random.choices(self.content[:5000], k=self.random.randint(2, 5))
        ).title()

    def document(self, paragraphs: int) -> tuple[str, str, list[str]]:
        """(title, Markdown body, its sentences)."""
        title = self.title()
        lines, sentences = [f"# {title}"], []
        for index in range(paragraphs):
            if index and index % self.random.randint(3, 8) == 0:
                lines.append(f"## {self.title()}")
            paragraph = self.paragraph()
            sentences.extend(paragraph)
            lines.append(" ".join(paragraph))
        return title, "\n\n".join(lines), sentences


def build(*, quick: bool, seed: int = 69) -> Corpus:
    """About 6,000 passages (700 in the quick run) and the queries to ask of them."""
    writer = _Writer(seed)
    scale = 8 if quick else 1
    corpus = Corpus()
    pool: list[str] = []

    def add(paragraphs: int, copies: int = 1) -> str:
        title, body, sentences = writer.document(paragraphs)
        corpus.documents.extend([(title, body)] * copies)
        pool.extend(sentences)
        return body

    paper = add(170 // scale, copies=13)  # ~80,000 characters, 13 times over
    for paragraphs in (900, 600, 400, 300, 200):  # a book and long reports
        add(paragraphs // scale)
    for _ in range(300 // scale):  # a few pages each
        add(writer.random.randint(4, 30))
    for _ in range(900 // scale):  # short notes
        add(1)
    for _ in range(30 // scale):  # short notes stored three times
        add(1, copies=3)
    frequent = [w for w in writer.content[:40] if w in paper][:3]
    corpus.rare_title = "Field note on a rare mineral"
    rare_body = " ".join(writer.paragraph()).replace(".", f" near {RARE_WORD}.", 1)
    corpus.documents.append((corpus.rare_title, rare_body))
    corpus.rare_query = " ".join([RARE_WORD, *frequent])
    writer.random.shuffle(corpus.documents)
    long_enough = [s for s in pool if len(s.split()) >= 8]
    corpus.sentences = writer.random.sample(long_enough, 40 if quick else 300)
    return corpus
