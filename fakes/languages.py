"""The languages the fake model writes in, and how it tells which one a request asks for.

Like a model, the fake follows the instruction in its prompt: "Write in French: …" means
French; "Write in the language of the question: …" means the language it recognises the
question to be in (English or French: a short list of common words and the accents of each
decides, as a real model would see at a glance). Anything else, or no instruction, is
English. Format labels (THOUGHT:, ANSWER:, …) stay in English whatever the language, as the
prompts ask.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

__all__ = ["ENGLISH_NAMES", "FRENCH", "Phrasebook", "asked_language", "detect"]

_WRITE_IN = re.compile(r"Write in ([^\n:]{1,60}):")
ENGLISH_NAMES = ("english", "anglais")
FRENCH_NAMES = ("french", "français", "francais")
_FRENCH_WORDS = {
    "le", "la", "les", "des", "du", "de", "un", "une", "est", "sont", "que", "qui", "quoi",
    "pourquoi", "comment", "quel", "quelle", "quels", "quelles", "nous", "vous", "ils", "et",
    "ou", "dans", "sur", "pour", "avec", "au", "aux", "ce", "cette", "ces", "il", "elle", "on",
    "est-ce", "rêvons", "faut-il",
}  # fmt: skip
_ENGLISH_WORDS = {
    "the", "a", "an", "is", "are", "what", "why", "how", "which", "who", "do", "does", "we",
    "you", "they", "and", "or", "in", "on", "for", "with", "of", "to", "this", "that", "it",
    "should", "can",
}  # fmt: skip


def detect(text: str) -> str:
    """ "fr" or "en": the language `text` reads as."""
    words = re.findall(r"[^\W\d_]+(?:-[^\W\d_]+)?", text.lower())
    french = sum(word in _FRENCH_WORDS for word in words)
    accents = len(re.findall(r"[éèêàùçôîâ]", text.lower()))
    english = sum(word in _ENGLISH_WORDS for word in words)
    # An accent alone ("Café?") is not French: a French word has to be there too.
    return "fr" if french and french + accents > english else "en"


def asked_language(instructions: str, question: str) -> str:
    """The language ("fr" or "en") the request's instruction asks for."""
    match = _WRITE_IN.search(instructions)
    if match is None:
        return "en"
    asked = match.group(1).strip().casefold()
    if asked == "the language of the question":
        return detect(question)
    return "fr" if asked in FRENCH_NAMES else "en"


@dataclass(frozen=True)
class Phrasebook:
    """What the scripted mind says, in one language."""

    thoughts: Mapping[str, str]  # by thought type; {focus}, {n}
    questions: Sequence[str]  # {focus}
    reasons: Sequence[str]
    line_of_inquiry: str  # {k}
    final: Callable[[str, str, int, float, str], str]  # label, quoted subject, n, conf, cites
    plan_steps: Sequence[str]  # {topic}
    plain: str  # {topic}, {n}
    progress: str  # {subject}: the status line it reports while searching
    scratch: str  # {subject}: what it writes on its scratchpad


def _final_fr(label: str, quoted: str, n: int, confidence: float, cite: str) -> str:
    return (
        f"{label}: Sur la question {quoted}, les éléments réunis jusqu'ici dessinent un "
        f"tableau cohérent : le résultat dépend surtout du contexte et de l'échelle{cite} "
        f"(passe {n}).\n"
        "\n"
        f"En bref, la position la plus défendable sur {quoted} est nuancée : les principales "
        "affirmations tiennent dans les cas typiques, avec des exceptions nettes aux extrêmes.\n"
        "INSIGHTS:\n"
        f"- Le facteur décisif derrière {quoted} est le contexte plutôt qu'une cause unique.\n"
        f"- Les sources s'accordent sur le sens de l'effet mais pas sur son ampleur (passe {n}).\n"
        f"CONFIDENCE: {confidence:.2f}\n"
        "REMAINING:\n"
        f"- La conclusion sur {quoted} tient-elle hors des cas typiques ?"
    )


FRENCH = Phrasebook(
    thoughts={
        "exploration": "J'explore {focus} sous un nouvel angle (étape {n}) : le mécanisme de "
        "fond compte davantage que les affirmations en vue.",
        "connection": "Je relie les fils sur {focus} (étape {n}) : deux constats distincts "
        "renvoient à la même cause profonde.",
        "critique": "Je critique le raisonnement sur {focus} (étape {n}) : l'affirmation la "
        "plus forte repose sur une seule source.",
        "insight": "Idée sur {focus} (étape {n}) : le compromis dépend surtout de l'échelle et "
        "du contexte, pas de l'approche elle-même.",
    },
    questions=(
        "Quels éléments portent le plus directement sur {focus} ?",
        "Quelles hypothèses derrière {focus} sont les plus fragiles, et comment les tester ?",
        "Sur quoi les experts divergent-ils à propos de {focus}, et pourquoi ?",
        "Qu'est-ce qui changerait la conclusion sur {focus} ?",
        "Quels exemples concrets illustrent le mieux {focus} ?",
        "Quels sont les effets de second ordre de {focus} ?",
        "Où les sources actuelles sur {focus} se contredisent-elles ?",
    ),
    reasons=(
        "Elle vise la plus grande lacune restante dans les éléments réunis.",
        "Tester l'hypothèse la plus fragile évite une réponse assurée mais fausse.",
        "Comprendre le désaccord montre où se situe vraiment l'incertitude.",
        "Savoir ce qui renverserait la conclusion montre sa solidité.",
        "Des cas concrets gardent le raisonnement ancré.",
        "Les conséquences indirectes passent facilement inaperçues.",
        "Des sources contradictoires doivent être conciliées avant la synthèse.",
    ),
    line_of_inquiry="piste {k}",
    final=_final_fr,
    plan_steps=(
        "Préciser ce que demande {topic}",
        "Réunir des éléments dans les notes et sur le web",
        "Confronter l'explication la plus solide aux contre-exemples",
        "Faire la synthèse",
    ),
    plain="C'est noté. Une brève réflexion sur {topic} : mieux vaut l'aborder pas à pas (n° {n}).",
    progress="Je cherche des éléments sur {subject}",
    scratch="Lesquelles des sources trouvées portent directement sur {subject} ? Voir [1].",
)
