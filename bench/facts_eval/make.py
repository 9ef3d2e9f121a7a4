"""The facts eval: scripted dialogues, what a model extracts from each turn, people's corrections,
and the facts that hold, by valid time, once all of it is folded.

    python bench/facts_eval/make.py [--seed 7] [--out bench/facts_eval]

Writes `dialogues.json`. Standard library only; deterministic for a seed (the committed file is
seed 7's, and tests/test_facts_eval_data.py checks it is what this script makes). README.md
describes the data; `fold` below is the reference for the expected answers:

- A model fact holds from its `valid_from`, else from when its turn was said. A person's
  assertion holds from its `valid_from`, else from when it was made (`at`).
- Single-valued predicates (all but likes, dislikes, speaks, has_pet): a new value supersedes
  the old; the old one's valid_to is the new one's valid_from. Saying the same value again
  continues it. Of two values from the same moment, the one known later wins.
- Multi-valued predicates accumulate; `dislikes X` closes an open `likes X` and vice versa.
- A standing (not retracted) assertion outranks the model facts of turns said before it: those
  that would replace it (a single-valued predicate's other values, or the opposite of likes/
  dislikes for the same value) from its valid_from on are dropped.
- A retraction removes its subject/predicate/value as said in turns (and assertions) before it;
  the model saying it again in a turn said after it brings it back.
"""

from __future__ import annotations

import argparse
import json
import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

CITIES = [
    "Lisbon", "Porto", "Kyoto", "Toronto", "Valencia", "Edinburgh", "Austin", "Melbourne", "Ljubljana",
    "Montreal", "Tallinn", "Denver", "Bologna", "Wellington", "Krakow", "Bergen", "Oaxaca", "Seville",
]  # fmt: skip
EMPLOYERS = [
    "Acme Robotics", "Northwind Traders", "Globex", "Initech", "Blue Harbor Clinic", "Westbrook High",
    "Tidewater Logistics", "Juniper Games", "Copperleaf Bank", "Sunfield Bakery", "Helios Solar", "Orbit Books",
]  # fmt: skip
JOBS = [
    "nurse", "data analyst", "chemistry teacher", "pastry chef", "civil engineer", "UX designer", "paramedic",
    "librarian", "software tester", "translator", "carpenter", "accountant", "architect", "pharmacist",
]  # fmt: skip
HOBBIES = [
    "running", "rock climbing", "pottery", "chess", "birdwatching", "salsa dancing", "sailing", "knitting",
    "trail cycling", "board games", "karaoke", "gardening",
]  # fmt: skip
FOODS = ["olives", "sushi", "spicy ramen", "blue cheese", "oysters", "licorice", "cilantro", "durian", "kimchi"]
LANGUAGES = ["Spanish", "Japanese", "German", "Portuguese", "Italian", "Polish", "Korean", "Dutch", "French"]
PETS = [
    ("dog", "Biscuit"),
    ("cat", "Miso"),
    ("dog", "Pepper"),
    ("cat", "Juniper"),
    ("parrot", "Rocket"),
    ("dog", "Olive"),
]
NAMES = ["Caroline", "Melanie", "Jonas", "Priya", "Tomasz", "Aiko", "Rafael", "Ingrid", "Kwame", "Lucia", "Sam", "Mei"]
MULTI_VALUED = frozenset({"likes", "dislikes", "speaks", "has_pet"})
OPPOSITE = {"likes": "dislikes", "dislikes": "likes"}


def iso(at: datetime) -> str:
    return at.astimezone(UTC).isoformat()


def month_start(year: int, month: int) -> str:
    return iso(datetime(year, month, 1, tzinfo=UTC))


def article(noun: str) -> str:
    return ("an " if noun[0] in "aeiouAEIOU" else "a ") + noun


def fact(subject: str, predicate: str, value: str, valid_from: str | None = None) -> dict[str, Any]:
    return {"subject": subject, "predicate": predicate, "value": value, "valid_from": valid_from}


@dataclass
class Script:
    """One dialogue as it is written: turns on a clock, and corrections between them."""

    dialogue: str
    about: str
    rng: random.Random
    turns: list[dict[str, Any]] = field(default_factory=list)
    corrections: list[dict[str, Any]] = field(default_factory=list)
    names: list[str] = field(default_factory=list)  # the people not yet in a dialogue: one person, one dialogue
    clock: datetime = datetime(2000, 1, 1, tzinfo=UTC)
    session: str = ""

    def person(self) -> str:
        return self.names.pop()

    def day(self, year: int, month: int, first: int, last: int) -> None:
        """A new session on a day between `first` and `last` of the month, some time in the evening."""
        self.session = f"{self.dialogue}-s{len({t['session_id'] for t in self.turns}) + 1}"
        self.clock = datetime(year, month, self.rng.randint(first, last), 18, self.rng.randint(0, 50), tzinfo=UTC)

    def say(self, content: str, *facts: dict[str, Any], role: str = "user", name: str | None = None) -> None:
        self.clock += timedelta(minutes=self.rng.randint(2, 6), seconds=self.rng.randint(0, 59))
        said = {"session_id": self.session, "said_at": iso(self.clock), "role": role, "name": name, "content": content}
        self.turns.append(said | {"facts": list(facts)})

    def _correct(self, kind: str, body: dict[str, Any]) -> None:
        self.clock += timedelta(minutes=1)
        self.corrections.append({"after_turn": len(self.turns) - 1, "at": iso(self.clock), kind: body})

    def assert_(self, subject: str, predicate: str, value: str, valid_from: str | None, reason: str) -> None:
        self._correct("assert", fact(subject, predicate, value, valid_from) | {"reason": reason})

    def retract(self, subject: str, predicate: str, value: str, reason: str) -> None:
        self._correct("retract", {"subject": subject, "predicate": predicate, "value": value, "reason": reason})


def moves_and_jobs(s: Script) -> None:
    c1, c2 = s.rng.sample(CITIES, 2)
    (e1, e2), (j1, j2), (h1, h2) = s.rng.sample(EMPLOYERS, 2), s.rng.sample(JOBS, 2), s.rng.sample(HOBBIES, 2)
    u = "user"
    s.day(2024, 1, 8, 12)
    s.say(
        f"Hi! Quick intro: I live in {c1} and I work as {article(j1)} at {e1}.",
        fact(u, "lives_in", c1),
        fact(u, "job_title", j1),
        fact(u, "works_at", e1),
    )
    s.say("Nice to meet you! What do you like doing outside work?", role="assistant")
    s.say(f"Mostly {h1}. I've loved it since I was a kid.", fact(u, "likes", h1))
    s.day(2024, 3, 15, 20)
    s.say(f"Big news: we finally moved to {c2} at the start of March!", fact(u, "lives_in", c2, month_start(2024, 3)))
    s.say(f"Congratulations! How is {c2} treating you?", role="assistant")
    s.say("Still unpacking boxes, but the light in the mornings is amazing.")
    s.day(2024, 6, 18, 22)
    s.say(
        f"Since June 1st I've been {article(j2)} at {e2}, new team, new everything.",
        fact(u, "works_at", e2, month_start(2024, 6)),
        fact(u, "job_title", j2, month_start(2024, 6)),
    )
    s.say(f"Also, honestly, I don't enjoy {h1} anymore, my knees can't take it.", fact(u, "dislikes", h1))
    s.day(2024, 9, 2, 9)
    s.say(f"I picked up {h2} over the summer and I love it.", fact(u, "likes", h2))
    s.say(f"That sounds like a great way to settle into {c2}.", role="assistant")


def two_friends(s: Script) -> None:
    a, b = s.person(), s.person()
    (ca, cb), (e1, e2, eb), (ja, jb) = s.rng.sample(CITIES, 2), s.rng.sample(EMPLOYERS, 3), s.rng.sample(JOBS, 2)
    (l1, l2), (kind, pet) = s.rng.sample(LANGUAGES, 2), s.rng.choice(PETS)
    s.day(2023, 11, 13, 17)
    s.say(
        f"Hey {b}! Did I tell you I started working at {e1} last month?",
        fact(a, "works_at", e1, month_start(2023, 10)),
        name=a,
    )
    s.say(
        f"No way! I'm still {article(jb)} at {eb}, nothing new here.",
        fact(b, "job_title", jb),
        fact(b, "works_at", eb),
        name=b,
    )
    s.say(f"We should celebrate. Are you still in {ca}?", name=a)
    s.say(
        f"Yep, {ca} forever. And I speak {l1} now, the evening classes paid off!",
        fact(b, "lives_in", ca),
        fact(b, "speaks", l1),
        name=b,
    )
    s.day(2024, 3, 18, 24)
    s.say(
        f"{b} moved to {cb} at the start of March and I already miss our coffee walks.",
        fact(b, "lives_in", cb, month_start(2024, 3)),
        name=a,
    )
    s.say(
        f"I miss you too! {cb} is great though, and I adopted a {kind} named {pet}.",
        fact(b, "has_pet", f"{kind} named {pet}"),
        name=b,
    )
    s.day(2024, 7, 8, 14)
    s.say(f"Guess what, I speak a little {l2} too now.", fact(b, "speaks", l2), name=b)
    s.say(
        f"Nice! Me, I left {e1} in June; I'm {article(ja)} at {e2} now.",
        fact(a, "works_at", e2),
        fact(a, "job_title", ja),
        name=a,
    )


def person_outranks_model(s: Script) -> None:
    (c1, c2), (right, wrong), (e1, e2) = s.rng.sample(CITIES, 2), s.rng.sample(JOBS, 2), s.rng.sample(EMPLOYERS, 2)
    u = "user"
    s.day(2024, 2, 5, 9)
    s.say(f"My sister is {article(wrong)} at {e1}, and I'm thinking of doing the same.", fact(u, "job_title", wrong))
    s.say("That is a big decision. What do you do now?", role="assistant")
    s.say(f"I live in {c1}, by the way, right by the river.", fact(u, "lives_in", c1))
    s.assert_(u, "job_title", right, month_start(2023, 1), "the model took my sister's job for mine")
    s.day(2024, 4, 10, 16)
    s.say(f"Work at {e2} is hectic this quarter.", fact(u, "works_at", e2))
    s.assert_(u, "lives_in", c2, None, "I moved last week and told no one yet")
    s.say("Hope it calms down soon.", role="assistant")
    s.day(2024, 8, 5, 12)
    s.say(
        f"I finally switched careers: I've been {article(wrong)} since July!",
        fact(u, "job_title", wrong, month_start(2024, 7)),
    )
    s.say("Congratulations on the new path!", role="assistant")


def retraction(s: Script) -> None:
    name = s.person()
    (c1, c2), (e1,), job, pet = s.rng.sample(CITIES, 2), s.rng.sample(EMPLOYERS, 1), s.rng.choice(JOBS), "Tofu"
    s.day(2024, 1, 20, 26)
    s.say(
        f"My neighbour's cat {pet} keeps visiting, so I basically have a cat named {pet} now, haha.",
        fact(name, "has_pet", f"cat named {pet}"),
        name=name,
    )
    s.say(
        f"I live in {c1} and I'm {article(job)} at {e1}.",
        fact(name, "lives_in", c1),
        fact(name, "job_title", job),
        fact(name, "works_at", e1),
        name=name,
    )
    s.day(2024, 2, 12, 18)
    s.say(f"{pet} slept on my couch again last night.", fact(name, "has_pet", f"cat named {pet}"), name=name)
    s.say(f"I'm in {c2} this week for a conference.", fact(name, "lives_in", c2), name=name)
    s.retract(name, "has_pet", f"cat named {pet}", f"{pet} is the neighbour's cat")
    s.retract(name, "lives_in", c2, "only visiting")
    s.day(2024, 5, 6, 11)
    s.say(f"Conference season again, I'm back in {c2} until Friday.", name=name)
    s.day(2024, 10, 1, 7)
    s.say(
        f"{pet}'s owners moved away and left her with me. So now I really do have a cat named {pet}!",
        fact(name, "has_pet", f"cat named {pet}"),
        name=name,
    )
    s.say(f"What a lucky cat. How is {pet} settling in?", role="assistant")


def preferences(s: Script) -> None:
    name = s.person()
    f1, f2, f3, f4 = s.rng.sample(FOODS, 4)
    l1, l2, l3 = s.rng.sample(LANGUAGES, 3)
    s.day(2023, 12, 2, 8)
    s.say(f"I love {f1} and {f2}.", fact(name, "likes", f1), fact(name, "likes", f2), name=name)
    s.say(f"I speak {l1} and {l2}.", fact(name, "speaks", l1), fact(name, "speaks", l2), name=name)
    s.day(2024, 2, 3, 9)
    s.say(f"I've gone off {f1}, I can't stand it these days.", fact(name, "dislikes", f1), name=name)
    s.say(f"Too much {f4} at the party, I don't like it.", fact(name, "dislikes", f4), name=name)
    s.assert_(name, "likes", f4, month_start(2024, 1), f"I like {f4}; it was that party's that was bad")
    s.day(2024, 4, 14, 20)
    s.say(f"I hate {f3}.", fact(name, "dislikes", f3), name=name)
    s.say(f"I've been learning {l3}; I can speak it decently now.", fact(name, "speaks", l3), name=name)
    s.day(2024, 8, 22, 28)
    s.say(f"I've come around on {f1} again, I like it now!", fact(name, "likes", f1), name=name)
    s.say(f"I've warmed up to {f3}, I actually enjoy {f3} now.", fact(name, "likes", f3), name=name)


def valid_time_order(s: Script) -> None:
    (c1, c2), (e1, e2, e3), job = s.rng.sample(CITIES, 2), s.rng.sample(EMPLOYERS, 3), s.rng.choice(JOBS)
    u = "user"
    s.day(2024, 2, 10, 14)
    s.say(
        f"I work at {e2} since 2022, as {article(job)}.",
        fact(u, "works_at", e2, month_start(2022, 1)),
        fact(u, "job_title", job),
    )
    s.say(f"And I live in {c1}.", fact(u, "lives_in", c1))
    s.day(2024, 5, 6, 10)
    s.say(f"Before {e2}, I was at {e1}; I started there in 2019.", fact(u, "works_at", e1, month_start(2019, 1)))
    s.say(f"Still in {c1}, still loving it.", fact(u, "lives_in", c1))
    s.day(2024, 9, 9, 13)
    s.say(
        f"I've relocated to {c2} as of 2024-09-01 for a new role at {e3}.",
        fact(u, "lives_in", c2, month_start(2024, 9)),
        fact(u, "works_at", e3, month_start(2024, 9)),
    )
    s.say(f"Good luck in {c2}!", role="assistant")


def household(s: Script) -> None:
    partner, (c1, c2), job, ep = s.person(), s.rng.sample(CITIES, 2), s.rng.choice(JOBS), s.rng.choice(EMPLOYERS)
    lang, (kind, pet), hobby = s.rng.choice(LANGUAGES), s.rng.choice(PETS), s.rng.choice(HOBBIES)
    u = "user"
    s.day(2024, 1, 14, 21)
    s.say(f"My partner {partner} and I live in {c1}.", fact(u, "lives_in", c1), fact(partner, "lives_in", c1))
    s.say(
        f"Hi, {partner} here! I'm {article(job)} and I speak {lang}.",
        fact(partner, "job_title", job),
        fact(partner, "speaks", lang),
        name=partner,
    )
    s.say(f"Hello {partner}! I'm Helix, the household assistant.", role="assistant", name="Helix")
    s.day(2024, 4, 22, 27)
    s.say(
        f"We relocated to {c2} in April 2024.",
        fact(partner, "lives_in", c2, month_start(2024, 4)),
        fact(u, "lives_in", c2, month_start(2024, 4)),
        name=partner,
    )
    s.say(
        f"We have a {kind} named {pet}, and I love {hobby}.",
        fact(u, "has_pet", f"{kind} named {pet}"),
        fact(u, "likes", hobby),
    )
    s.assert_(partner, "works_at", ep, month_start(2024, 5), "starting there in May")
    s.day(2024, 7, 3, 9)
    s.say(f"I'm not into {hobby} anymore, too many early mornings.", fact(u, "dislikes", hobby))
    s.say(f"Noted. {partner}, how is {ep}?", role="assistant", name="Helix")


SCENARIOS = [
    ("moves-and-jobs", "an unnamed user moves and changes jobs; a hobby is dropped, another picked up", moves_and_jobs),
    ("two-friends", "two named speakers; one states a fact about the other", two_friends),
    (
        "person-outranks-model",
        "a person's assertions correct a model mistake and supersede a city",
        person_outranks_model,
    ),
    ("retraction", "retracted facts stay gone for earlier turns and come back when said after", retraction),
    ("preferences", "likes dropped and picked up again; an assertion overrides a model dislike", preferences),
    ("valid-time-order", "an earlier job told later; a city said again continues", valid_time_order),
    ("household", "an unnamed user, a named partner and a named assistant", household),
]


# --- the reference fold -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Claim:
    subject: str
    predicate: str
    value: str
    valid_from: datetime
    known: datetime  # when its turn was said, or its assertion made
    person: bool

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.subject, self.predicate, self.value)


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


def claims(d: dict[str, Any]) -> list[Claim]:
    """What stands after the corrections: model facts and standing assertions, none retracted or outranked."""
    made = [
        Claim(
            f["subject"], f["predicate"], f["value"], _time(f["valid_from"] or t["said_at"]), _time(t["said_at"]), False
        )
        for t in d["turns"]
        for f in t["facts"]
    ]
    retracted = [
        (tuple(c["retract"][k] for k in ("subject", "predicate", "value")), _time(c["at"]))
        for c in d["corrections"]
        if "retract" in c
    ]
    asserted = [
        Claim(a["subject"], a["predicate"], a["value"], _time(a["valid_from"] or c["at"]), _time(c["at"]), True)
        for c in d["corrections"]
        if (a := c.get("assert"))
    ]

    def gone(c: Claim) -> bool:
        return any(key == c.key and at >= c.known for key, at in retracted)

    standing = [a for a in asserted if not gone(a)]

    def replaces(c: Claim, a: Claim) -> bool:
        if c.predicate not in MULTI_VALUED:
            return c.predicate == a.predicate and c.value != a.value
        return OPPOSITE.get(a.predicate) == c.predicate and c.value == a.value

    def outranked(c: Claim) -> bool:
        return any(
            a.known > c.known and a.subject == c.subject and replaces(c, a) and c.valid_from >= a.valid_from
            for a in standing
        )

    return [c for c in made if not gone(c) and not outranked(c)] + standing


Interval = tuple[str, str, str, datetime, datetime | None]  # subject, predicate, value, valid_from, valid_to


def _chain(ordered: list[Claim], same: Any) -> list[Interval]:
    """Claims in valid-time order, each closing the open one unless `same`; zero-length ones dropped."""
    out: list[Interval] = []
    for c in ordered:
        if out and out[-1][4] is None and same(out[-1], c):
            continue
        if out and out[-1][4] is None:
            s, p, v, start, _ = out.pop()
            if start < c.valid_from:
                out.append((s, p, v, start, c.valid_from))
        out.append((c.subject, c.predicate, c.value, c.valid_from, None))
    return out


def timeline(standing: list[Claim]) -> list[Interval]:
    groups: dict[tuple[str, ...], list[Claim]] = {}
    for c in sorted(standing, key=lambda c: (c.valid_from, c.known)):
        if c.predicate in OPPOSITE:
            key: tuple[str, ...] = (c.subject, "likes|dislikes", c.value)
        elif c.predicate in MULTI_VALUED:
            key = c.key
        else:
            key = (c.subject, c.predicate)
        groups.setdefault(key, []).append(c)
    out: list[Interval] = []
    for cs in groups.values():
        out += _chain(cs, lambda open_, c: open_[1] == c.predicate and open_[2] == c.value)
    return sorted(out, key=lambda i: (i[0], i[1], i[3], i[2]))


def expect(d: dict[str, Any]) -> dict[str, Any]:
    intervals = timeline(claims(d))
    current = [{"subject": s, "predicate": p, "value": v} for s, p, v, _, to in intervals if to is None]
    history: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for s, p, v, start, to in intervals:
        history.setdefault((s, p), []).append({"value": v, "valid_from": iso(start), "valid_to": to and iso(to)})
    as_of = []
    for (s, p), values in history.items():
        bounds = sorted(
            {_time(x["valid_from"]) for x in values} | {_time(x["valid_to"]) for x in values if x["valid_to"]}
        )
        for at in [t for b in bounds for t in (b - timedelta(seconds=1), b)]:
            held = sorted(
                v
                for s2, p2, v, start, to in intervals
                if (s2, p2) == (s, p) and start <= at and (to is None or at < to)
            )
            as_of.append({"as_of": iso(at), "subject": s, "predicate": p, "values": held})
    return {
        "current": current,
        "history": [{"subject": s, "predicate": p, "values": vs} for (s, p), vs in history.items()],
        "as_of": as_of,
    }


def make(seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    names = rng.sample(NAMES, len(NAMES))
    dialogues: list[dict[str, Any]] = []
    for name, about, write in SCENARIOS:
        script = Script(name, about, rng, names=names)
        write(script)
        d: dict[str, Any] = {"dialogue": name, "about": about, "turns": script.turns, "corrections": script.corrections}
        dialogues.append(d | {"expect": expect(d)})
    said: dict[str, list[dict[str, Any]]] = {}
    for dialogue in dialogues:
        for t in dialogue["turns"]:
            if said.setdefault(t["content"], t["facts"]) != t["facts"]:
                raise ValueError(f"two turns say {t['content']!r} with different facts")
    return {"seed": seed, "dialogues": dialogues}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    args = parser.parse_args()
    data = make(args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "dialogues.json").write_text(json.dumps(data, ensure_ascii=False, indent=1) + "\n")
    turns = sum(len(d["turns"]) for d in data["dialogues"])
    print(f"{len(data['dialogues'])} dialogues, {turns} turns -> {args.out / 'dialogues.json'}")


if __name__ == "__main__":
    main()
