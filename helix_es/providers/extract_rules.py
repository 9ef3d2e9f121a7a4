"""The `rules` extractor: a few English patterns, free, offline and deterministic (model "rules/v1").

For the embedded demo and the tests, not for recall: it finds what a person says of themself in
these words, in user turns and in the turns of any named speaker (not system or tool turns, not an
unnamed assistant). The subject is the turn's `name`, else "user". Case does not matter, "I've" is
"I have", and a few adverbs may stand before the verb ("I now live in", "I've finally moved to").

| predicate | patterns | value |
| --- | --- | --- |
| name | my name is X, my name's X, I'm called X | capitalised words |
| lives_in | I/we live in X, I've been living in X, I/we (have) moved/relocated to X | starts with a capital |
| works_at | I work at/for X, I joined X, I started (working) at X; I'm a Y at/for X | up to a comma |
| job_title | I'm a/an X, I work as a/an X | up to at/for/in/with, a comma |
| likes | I like/love/enjoy/adore X | each of a list: X, Y and Z |
| dislikes | I don't/no longer/never like X, I hate/dislike/detest X, I can't stand X, I'm not into X | each of a list |
| speaks | I speak X, I can speak X | each capitalised one of a list |
| has_pet | I have/I've got/we adopted a KIND named/called X | "KIND named X": "dog named Biscuit" |

valid_from: a date in the same sentence, "since March 2024" / "in March 2024" (2024-03-01),
"in 2021" / "since 2021" (2021-01-01), "as of 2025-09-01" / "since 2025-09-01" (that day),
midnight UTC; else the turn's own time (when it was said). A value ends at the end of its clause: a comma for the
single-valued predicates, `;`, `:`, "but", "because", "so", "which", "and I", a date or a time
("last month", "two years ago"), and loses trailing punctuation and filler ("now", "these days",
"anymore", "again", "too", "at the moment"). Not a value: a pronoun or question word ("I like
it", "I love how..."), "a bit"/"a little"/"a fan of" after "I'm", or more than eight words.
Known misses, kept on purpose to stay small: "I like rock and roll" is two likes; a sentence
splits at ". " unless after St, Dr, Mr, Mrs, Ms, Jr, Sr, Inc, Ltd, Co, vs, etc.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime

from helix_es.model.fact_events import ExtractedFact
from helix_es.providers.extract_types import Extraction, Turn

VERSION = "rules/v1"

_ADV = r"(?:(?:now|currently|also|really|still|recently|just|actually|finally|officially|totally|absolutely|truly)\s+)*"
_AUX = r"(?:'m|'re|'ve|\s+am|\s+are|\s+have)?"  # I'm, we're, I've, I have ...
_BEEN = rf"\s+{_ADV}(?:been\s+{_ADV})?"  # ... (been) ...
_I = rf"\bI{_AUX}{_BEEN}"
_I_OR_WE = rf"\b(?:I|we){_AUX}{_BEEN}"
_IM = rf"\bI(?:'m|\s+am)\s+{_ADV}"
_NAME = r"(?-i:[A-Z][\w'-]*(?:\s+[A-Z][\w'-]*){0,2})"

PATTERNS: tuple[tuple[str, str], ...] = (
    ("name", r"\bmy\s+name(?:'s|\s+is)\s+"),
    ("name", rf"{_IM}called\s+"),
    ("lives_in", rf"{_I_OR_WE}(?:live|living)\s+in\s+"),
    ("lives_in", rf"{_I_OR_WE}(?:moved|relocated)\s+(?:back\s+)?to\s+"),
    ("works_at", rf"{_I}(?:work|working)\s+(?:at|for)\s+"),
    ("works_at", rf"{_I}(?:joined|started\s+(?:working\s+)?(?:at|for))\s+"),
    ("job_title", rf"{_IM}an?\s+"),
    ("job_title", rf"{_I}(?:work|working)\s+as\s+(?:an?\s+)?"),
    ("dislikes", rf"\bI\s+{_ADV}(?:don't|do\s+not|no\s+longer|never)\s+{_ADV}(?:like|love|enjoy)\s+"),
    ("dislikes", rf"{_I}(?:hate|dislike|detest|can't\s+stand|cannot\s+stand)\s+"),
    ("dislikes", rf"{_IM}(?:not|no\s+longer)\s+(?:really\s+)?(?:into|a\s+fan\s+of)\s+"),
    ("likes", rf"{_I}(?:like|love|loving|enjoy|enjoying|adore)\s+"),
    ("speaks", rf"{_I}(?:can\s+)?speak\s+"),
)
"""(predicate, the words before the value); the value is what follows, up to the end of its clause."""

_PET = re.compile(
    rf"\b(?:I|we)(?:'ve|\s+have)?\s+{_ADV}(?:have|got|adopted)\s+(?:an?\s+)?(?:new\s+)?"
    rf"(?P<kind>[a-z]+(?:\s+[a-z]+)?)\s+(?:named|called)\s+(?P<name>{_NAME})",
    re.I,
)
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_MONTH = (
    r"jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|sep(?:t|tember)?"
    r"|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?"
)
_DATE = re.compile(
    r"\b(?:since|as\s+of|in|from|starting(?:\s+in)?)\s+(?:(?P<iso>\d{4}-\d{2}-\d{2})|"
    rf"(?P<month>{_MONTH})\.?\s+(?:of\s+)?(?P<year>\d{{4}})|(?P<only>\d{{4}}))\b",
    re.I,
)
_SEASONS = "week|month|year|weekend|spring|summer|autumn|fall|winter|monday|tuesday|wednesday|thursday|friday|saturday"
_WHEN = (
    rf"\b(?:last|this|next)\s+(?:{_SEASONS}|sunday|{_MONTH})\b|\b(?:in|on|since)\s+(?:the\s+)?(?:{_MONTH}|{_SEASONS})\b"
    r"|\b(?:a\s+few|a|an|one|two|three|four|five|six|\d+)\s+(?:days?|weeks?|months?|years?)\s+ago\b"
    r"|\b(?:recently|yesterday|today)\b"
)
_CUT = re.compile(
    rf"[;:()]|\s-\s|{_WHEN}|\b(?:but|because|though|although|when|while|which|who|where|so|and\s+then)\b"
    r"|\band\s+(?:I|I'm|I've|we|we're|my|our|she|he|they|it)\b|,\s*(?:I|we|my|but|and|so|because|which|who)\b",
    re.I,
)
_APART = re.compile(r"[;:]|\b(?:but|because|though|although|and|so|while|when|whereas)\b", re.I)
_COMMA = re.compile(r",")
_AT = re.compile(r"\s+(?:at|for)\s+", re.I)  # "a nurse at St. Mary's": a job title, then a works_at
_JOB_END = re.compile(r",|\s+(?:at|for|in|with|on)\s+", re.I)
_LIST = re.compile(r"\s*,\s*(?:and\s+|or\s+)?|\s+(?:and|or|&)\s+", re.I)
_FILLER = re.compile(
    r"\s+(?:now|these\s+days|nowadays|currently|at\s+the\s+moment|anymore|any\s+more|again|too|as\s+well"
    r"|right\s+now|lately|for\s+now|a\s+lot|so\s+much|very\s+much|really)$",
    re.I,
)
_PUNCTUATION = " \t.,!?;:…\"')"
_LEAD = {
    "likes": re.compile(r"^(?:to|going|doing)\s+", re.I),
    "dislikes": re.compile(r"^(?:to|going|doing)\s+", re.I),
    "speaks": re.compile(r"^(?:a\s+little|a\s+bit\s+of|some|fluent|basic|decent)\s+", re.I),
}
_NOT_A_VALUE = frozenset(
    {"it", "that", "this", "them", "you", "him", "her", "those", "these", "how", "what", "when", "where", "why"}
    | {"whether", "if", "bit", "little", "lot", "fan", "big", "huge", "few", "couple", "one"}
    | {"something", "anything", "nothing", "everything"}
)
_CAPITAL = frozenset({"name", "lives_in", "speaks"})  # their values are proper names
_SINGLE = frozenset({"name", "lives_in", "works_at", "job_title"})
_ABBREVIATION = re.compile(r"\b(?:St|Dr|Mr|Mrs|Ms|Jr|Sr|Inc|Ltd|Co|vs|etc)\.$")
_SENTENCE = re.compile(r"(?<=[.!?;])\s+|\n+")

RULES_TEXT = "\n".join(
    [VERSION, *(f"{p}\t{rx}" for p, rx in PATTERNS), _PET.pattern, _DATE.pattern, _CUT.pattern, _FILLER.pattern]
)
"""What the rules are, as text: its SHA-256 is the `prompt_sha256` of every extraction they make."""
RULES_SHA256 = hashlib.sha256(RULES_TEXT.encode()).hexdigest()
_COMPILED = tuple((predicate, re.compile(rx, re.I)) for predicate, rx in PATTERNS)


def _sentences(text: str) -> list[str]:
    out: list[str] = []
    for piece in _SENTENCE.split(text.replace("\u2019", "'")):
        if out and _ABBREVIATION.search(out[-1]):
            out[-1] += " " + piece
        elif piece.strip():
            out.append(piece)
    return out


def _date(match: re.Match[str]) -> datetime | None:
    """Midnight UTC of the day a date phrase names (a month's or a year's first); None for no such day."""
    try:
        if match.group("iso"):
            return datetime.fromisoformat(match.group("iso")).replace(tzinfo=UTC)
        year = int(match.group("year") or match.group("only"))
        named = (match.group("month") or "january").lower()[:3]
        return datetime(year, _MONTHS.index(named) + 1, 1, tzinfo=UTC)
    except ValueError:  # 2025-13-45, year 0
        return None


def _trim(value: str) -> str:
    """Without trailing punctuation and filler words, however many."""
    value = value.strip(_PUNCTUATION)
    while True:
        shorter = _FILLER.sub("", value).rstrip(_PUNCTUATION)
        if shorter == value:
            return value
        value = shorter


def _ok(predicate: str, value: str) -> bool:
    words = value.split()
    if not words or len(words) > 8:
        return False
    first = words[1] if words[0].lower() in ("a", "an", "the") and len(words) > 1 else words[0]
    if first.lower() in _NOT_A_VALUE:
        return False
    if predicate in _CAPITAL:
        proper = words[1] if words[0] == "the" and len(words) > 1 else words[0]
        return proper[:1].isupper()
    return True


def _values(predicate: str, region: str) -> list[tuple[str, str]]:
    """(predicate, value) pairs from the words after a pattern, already cut at the end of its clause."""
    if predicate == "job_title":
        end = _JOB_END.search(region)
        found = [(predicate, _trim(region[: end.start()] if end else region))]
        at = _AT.match(region, end.start()) if end else None
        if at:
            found.append(("works_at", _trim(_COMMA.split(region[at.end() :], maxsplit=1)[0])))
        return found
    if predicate in _SINGLE:
        return [(predicate, _trim(_COMMA.split(region, maxsplit=1)[0]))]
    lead = _LEAD.get(predicate)
    return [(predicate, lead.sub("", _trim(v)) if lead else _trim(v)) for v in _LIST.split(region)]


def rule_facts(text: str, subject: str) -> tuple[ExtractedFact, ...]:
    """The facts the rules find in `text` said by `subject`, in the order they are said, each once."""
    found: list[ExtractedFact] = []
    for sentence in _sentences(text):
        dates = list(_DATE.finditer(sentence))
        hits: list[tuple[int, int, str]] = []  # (where the pattern starts, where its value starts, predicate)
        for predicate, pattern in _COMPILED:
            hits += [(m.start(), m.end(), predicate) for m in pattern.finditer(sentence)]
        pets = {m.start(): m for m in _PET.finditer(sentence)}
        hits += [(start, m.end(), "has_pet") for start, m in pets.items()]
        for start, begin, predicate in sorted(hits, key=lambda h: h[0]):
            rest = sentence[begin:]
            cut = _CUT.search(rest)
            end = cut.start() if cut else len(rest)
            # The date of its clause: after the value, or before the pattern with no "but", "and"... between.
            later = [d for d in dates if begin <= d.start() <= begin + end]
            earlier = [d for d in dates if d.end() <= start and not _APART.search(sentence, d.end(), start)]
            when = later[0] if later else (earlier[-1] if earlier else None)
            if later:
                end = min(end, later[0].start() - begin)
            valid_from = _date(when) if when else None
            if predicate == "has_pet":
                pet = pets[start]
                pairs = [(predicate, f"{pet.group('kind').lower()} named {pet.group('name')}")]
            elif predicate == "name":
                name = re.match(_NAME, rest[:end].strip())
                pairs = [(predicate, name.group(0))] if name else []
            else:
                pairs = _values(predicate, rest[:end])
            for pred, value in pairs:
                fact = ExtractedFact(subject, pred, value, valid_from)
                if _ok(pred, value) and fact not in found:
                    found.append(fact)
    return tuple(found)


def speaks_for_itself(turn: Turn) -> bool:
    """The rules read user turns and any named speaker's, never system, tool or unnamed assistant turns."""
    return turn.role == "user" or (turn.name is not None and turn.role not in ("system", "tool"))


class RulesExtractor:
    """The `rules` provider: `rule_facts` over each turn that speaks for itself; free, so no tokens."""

    model = VERSION

    def prompt_tokens(self, session_id: str, turns: Sequence[Turn]) -> int:
        return 0

    async def extract(self, session_id: str, turns: Sequence[Turn]) -> Extraction:
        # A fact with no date of its own holds since its turn (a batch's facts come from several turns).
        facts = [
            f if f.valid_from is not None else replace(f, valid_from=t.said_at)
            for t in turns
            if speaks_for_itself(t)
            for f in rule_facts(t.content, t.name or "user")
        ]
        return Extraction(tuple(facts), self.model, RULES_SHA256)
