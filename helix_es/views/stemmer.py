"""The Snowball English ("Porter2") stemmer, so keyword search meets "moved", "moving" and "move".

It is the stemmer PostgreSQL's `english` text search configuration runs, written out here so the
memory store's keywords and a `to_tsvector('english', ...)` column stem a word alike. It follows
the published algorithm (snowballstem.org/algorithms/english/stemmer.html) step by step.
"""

from __future__ import annotations

from functools import lru_cache

_VOWELS = frozenset("aeiouy")
_DOUBLES = ("bb", "dd", "ff", "gg", "mm", "nn", "pp", "rr", "tt")
_LI_ENDING = frozenset("cdeghkmnrt")

# Words the algorithm would stem wrongly, and words it must leave alone.
_EXCEPTIONS = {
    "skis": "ski",
    "skies": "sky",
    "dying": "die",
    "lying": "lie",
    "tying": "tie",
    "idly": "idl",
    "gently": "gentl",
    "ugly": "ugli",
    "early": "earli",
    "only": "onli",
    "singly": "singl",
    "sky": "sky",
    "news": "news",
    "howe": "howe",
    "atlas": "atlas",
    "cosmos": "cosmos",
    "bias": "bias",
    "andes": "andes",
}
_AFTER_1A = frozenset({"inning", "outing", "canning", "herring", "earring", "proceed", "exceed", "succeed"})

_STEP2 = (
    ("ization", "ize"),
    ("ational", "ate"),
    ("fulness", "ful"),
    ("ousness", "ous"),
    ("iveness", "ive"),
    ("tional", "tion"),
    ("biliti", "ble"),
    ("lessli", "less"),
    ("entli", "ent"),
    ("ation", "ate"),
    ("alism", "al"),
    ("aliti", "al"),
    ("ousli", "ous"),
    ("iviti", "ive"),
    ("fulli", "ful"),
    ("enci", "ence"),
    ("anci", "ance"),
    ("abli", "able"),
    ("izer", "ize"),
    ("ator", "ate"),
    ("alli", "al"),
    ("bli", "ble"),
    ("ogi", "og"),
    ("li", ""),
)
_STEP3 = (
    ("ational", "ate"),
    ("tional", "tion"),
    ("alize", "al"),
    ("icate", "ic"),
    ("iciti", "ic"),
    ("ative", ""),
    ("ical", "ic"),
    ("ness", ""),
    ("ful", ""),
)
_STEP4 = (
    "ement", "ance", "ence", "able", "ible", "ment", "ant", "ent", "ism", "ate", "iti", "ous", "ive",
    "ize", "ion", "al", "er", "ic",
)  # fmt: skip


def _is_vowel(word: str, i: int) -> bool:
    return word[i] in _VOWELS


def _regions(word: str) -> tuple[int, int]:
    """R1 and R2: where each region starts (len(word) when it is empty)."""

    def after_vc(start: int) -> int:
        for i in range(start + 1, len(word)):
            if not _is_vowel(word, i) and _is_vowel(word, i - 1):
                return i + 1
        return len(word)

    for prefix in ("gener", "commun", "arsen"):  # their R1 starts after them, not after "gen"
        if word.startswith(prefix):
            r1 = len(prefix)
            break
    else:
        r1 = after_vc(0)
    return r1, after_vc(r1) if r1 < len(word) else len(word)


def _short_syllable(word: str, end: int) -> bool:
    """Does word[:end] end in a short syllable?"""
    if end == 2:
        return _is_vowel(word, 0) and not _is_vowel(word, 1)
    if end >= 3:
        return (
            not _is_vowel(word, end - 3)
            and _is_vowel(word, end - 2)
            and not _is_vowel(word, end - 1)
            and word[end - 1] not in "wxY"
        )
    return False


def _has_vowel(part: str) -> bool:
    return any(c in _VOWELS for c in part)


def _step1a(w: str) -> str:
    if w.endswith("sses"):
        return w[:-2]
    if w.endswith(("ied", "ies")):
        return w[:-2] if len(w) > 4 else w[:-1]
    if w.endswith(("us", "ss")):
        return w
    if w.endswith("s") and _has_vowel(w[:-2]):
        return w[:-1]
    return w


def _step1b(w: str, r1: int) -> str:
    for suffix in ("eedly", "eed"):
        if w.endswith(suffix):
            return w[: -len(suffix)] + "ee" if len(w) - len(suffix) >= r1 else w
    for suffix in ("ingly", "edly", "ing", "ed"):
        if w.endswith(suffix):
            stem = w[: -len(suffix)]
            if not _has_vowel(stem):
                return w
            if stem.endswith(("at", "bl", "iz")):
                return stem + "e"
            if stem.endswith(_DOUBLES):
                return stem[:-1]
            if r1 >= len(stem) and _short_syllable(stem, len(stem)):  # a short word
                return stem + "e"
            return stem
    return w


def _replace(w: str, rules: tuple[tuple[str, str], ...], r1: int, r2: int) -> str:
    for suffix, repl in rules:
        if not w.endswith(suffix):
            continue
        start = len(w) - len(suffix)
        if start < r1:
            return w  # the longest matching suffix decides, even when it is not in R1
        if suffix == "ogi" and not w[:start].endswith("l"):
            return w
        if suffix == "li" and (start == 0 or w[start - 1] not in _LI_ENDING):
            return w
        if suffix == "ative" and start < r2:
            return w
        return w[:start] + repl
    return w


def _step4(w: str, r2: int) -> str:
    for suffix in _STEP4:
        if w.endswith(suffix):
            start = len(w) - len(suffix)
            if start < r2:
                return w
            if suffix == "ion" and not w[:start].endswith(("s", "t")):
                return w
            return w[:start]
    return w


def _step5(w: str, r1: int, r2: int) -> str:
    last = len(w) - 1
    if w.endswith("e") and (last >= r2 or (last >= r1 and not _short_syllable(w, last))):
        return w[:-1]
    if w.endswith("ll") and last >= r2:
        return w[:-1]
    return w


@lru_cache(maxsize=1 << 16)
def stem(word: str) -> str:
    """The Porter2 stem of one lower-case word."""
    if len(word) <= 2:
        return word
    if word in _EXCEPTIONS:
        return _EXCEPTIONS[word]
    w = word.lstrip("'")
    if w.startswith("y"):
        w = "Y" + w[1:]
    w = w[:1] + "".join("Y" if c == "y" and w[i] in _VOWELS else c for i, c in enumerate(w[1:]))
    r1, r2 = _regions(w)
    for suffix in ("'s'", "'s", "'"):
        if w.endswith(suffix):
            w = w[: -len(suffix)]
            break
    w = _step1a(w)
    if w in _AFTER_1A:
        return w
    w = _step1b(w, r1)
    if len(w) > 2 and w[-1] in "yY" and not _is_vowel(w, len(w) - 2):
        w = w[:-1] + "i"
    w = _replace(w, _STEP2, r1, r2)
    w = _replace(w, _STEP3, r1, r2)
    w = _step4(w, r2)
    w = _step5(w, r1, r2)
    return w.replace("Y", "y")
