"""The long-conversation recall eval: dialogues and questions labelled with their evidence turns.

    python bench/recall_eval/make.py [--seed 7] [--out bench/recall_eval]

Writes `dialogues.jsonl` (one dialogue a line: two or three speakers, a dozen dated sessions of
20-40 turns) and `questions.jsonl` (one question a line: its dialogue, the answer, the ids of the
turns that hold its evidence, and its kind: `single-fact`, `multi-hop`, `temporal`, `changed`).
Deterministic for a seed; the committed files are those of seed 7, and `tests` check they are
what this script makes.

What makes it a test of recall rather than of string matching: a fact is said in the speaker's
words ("we adopted a beagle puppy") and asked in another's ("what breed is Caroline's dog?");
facts change (a move, a new job), so the newest statement answers "now" and an older one
"before"; the other speaker's replies, and chit-chat about other people's pets, cities and jobs,
share the question's words without answering it; and a question about when something happened
is answered by the date of the session its turn was said in.
"""

from __future__ import annotations

import argparse
import json
import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

NAMES = [
    "Caroline", "Melanie", "Jonas", "Priya", "Tomasz", "Aiko", "Rafael", "Ingrid", "Kwame", "Lucia",
    "Dmitri", "Soraya", "Ethan", "Mei", "Olu", "Freya", "Mateo", "Hana", "Viktor", "Nadia",
    "Samir", "Greta", "Diego", "Yara",
]  # fmt: skip
CITIES = [
    "Lisbon", "Portland", "Kyoto", "Toronto", "Valencia", "Edinburgh", "Austin", "Melbourne",
    "Ljubljana", "Montreal", "Porto", "Tallinn", "Denver", "Bologna", "Wellington", "Krakow",
]  # fmt: skip
JOBS = [
    ("nurse", "St. Mary's hospital"), ("data analyst", "a logistics startup"),
    ("high school chemistry teacher", "Westbrook High"), ("pastry chef", "a bakery downtown"),
    ("civil engineer", "the city's transit office"), ("UX designer", "a fintech company"),
    ("paramedic", "the county ambulance service"), ("librarian", "the central library"),
    ("software tester", "a game studio"), ("veterinary assistant", "an animal clinic"),
    ("carpenter", "a furniture workshop"), ("translator", "a publishing house"),
]  # fmt: skip
BREEDS = ["beagle", "border collie", "corgi", "golden retriever", "dachshund", "greyhound", "husky", "poodle"]
PET_NAMES = ["Biscuit", "Pepper", "Miso", "Juniper", "Rocket", "Waffles", "Olive", "Bruno", "Tofu", "Maple"]
INSTRUMENTS = ["cello", "ukulele", "trumpet", "piano", "violin", "drums", "banjo", "saxophone"]
PLACES = [
    ("Iceland", "the black sand beach"), ("Morocco", "the old medina in Fez"), ("Peru", "Machu Picchu"),
    ("Norway", "the fjords near Bergen"), ("Vietnam", "Ha Long Bay"), ("Scotland", "the Isle of Skye"),
    ("Mexico", "the pyramids at Teotihuacan"), ("Greece", "the cliffs of Santorini"),
    ("Japan", "the bamboo forest in Arashiyama"), ("Chile", "the Atacama desert"),
]  # fmt: skip
BOOKS = [
    "The Overstory", "Piranesi", "Klara and the Sun", "The Left Hand of Darkness", "Station Eleven",
    "Braiding Sweetgrass", "The Remains of the Day", "Project Hail Mary", "A Gentleman in Moscow",
]  # fmt: skip
SPORTS = [
    ("a half marathon", "crossed the finish line in just under two hours"),
    ("a sprint triathlon", "the swim was the hardest part"),
    ("a 100 km charity bike ride", "my legs are still sore"),
    ("an indoor climbing competition", "I topped three of the five routes"),
]  # fmt: skip
CARS = ["a used Subaru Outback", "a little electric Fiat", "a vintage VW van", "a Toyota Prius", "a cargo bike"]
SIBLINGS = ["sister", "brother", "cousin"]
FOODS = ["Ethiopian", "Korean barbecue", "Sichuan", "Lebanese", "Neapolitan pizza", "ramen", "tapas"]

# What one speaker says of a fact, in the first person; {…} are the fact's values.
SAY = {
    "city": [
        "We finally moved to {city}! The apartment is small but the light in the mornings is amazing.",
        "Big news: I signed the lease and I'm living in {city} now, still unpacking boxes.",
    ],
    "city_first": [
        "Honestly {city} has been home for years, I can't picture living anywhere else.",
        "I've been in {city} since college, the neighborhood feels like family.",
    ],
    "job": [
        "I started a new position as a {job} at {employer} on Monday, and I'm exhausted already.",
        "So I accepted the offer: I'm officially a {job} now, working at {employer}.",
    ],
    "pet": [
        "We adopted a {breed} puppy this weekend and named him {pet}, he chews everything.",
        "Meet {pet}! A little {breed} from the shelter, he came home with us on Saturday.",
    ],
    "instrument": [
        "I signed up for {instrument} lessons, every Tuesday evening, my fingers hurt so much.",
        "Guess who bought a secondhand {instrument}? My teacher says I have decent rhythm.",
    ],
    "trip": [
        "Just got back from {place}, {sight} was unreal, I took about a thousand photos.",
        "We spent ten days in {place}. Seeing {sight} at sunrise was the highlight.",
    ],
    "book": [
        "I'm halfway through {book} and I can't put it down, I read until 2am last night.",
        "My book club picked {book} this month, I'm loving it so far.",
    ],
    "sport": [
        "I did {event} on Sunday, {detail}!",
        "Remember the training I kept complaining about? I finished {event} yesterday, {detail}.",
    ],
    "car": [
        "I traded in my old hatchback for {car}, it's perfect for weekend trips.",
        "New wheels: I'm driving {car} now, way better on the hills.",
    ],
    "sibling": [
        "My {relation} {sibling} just got engaged, the wedding is planned for {month}!",
        "Family news: {sibling}, my {relation}, is getting married in {month} and I'm giving a speech.",
    ],
    "food": [
        "Found a tiny {food} place around the corner, I've eaten there three times this week.",
        "I'm obsessed with {food} lately, I even took a cooking class to make it at home.",
    ],
}
# The other speaker's answers to a fact: they echo its words and answer no question.
REPLY = [
    "Wait, really? {echo}? Tell me everything!",
    "No way, {echo}! That's so exciting.",
    "Haha I love that. {echo}, who would have guessed.",
    "That sounds wonderful. How are you feeling about {echo}?",
]
CHAT = [
    "How was your weekend?",
    "Pretty quiet, mostly laundry and a long walk.",
    "The weather has been so gray lately, I miss the sun.",
    "Did you watch the game last night?",
    "I've been sleeping badly, too much coffee I think.",
    "My neighbor's {breed} barks every time the mail arrives.",
    "A coworker of mine wants to move to {city}, she keeps sending me apartment listings.",
    "My cousin is a {job}, she says the hours are brutal.",
    "I keep seeing ads for trips to {place}, the algorithm knows me too well.",
    "Someone at the gym was telling me about {book}, is it any good?",
    "We ordered {food} for dinner, it was fine, nothing special.",
    "I should really call my mom more often.",
    "Work has been chaotic, three deadlines in one week.",
    "Have you tried that new coffee place on the corner?",
    "I finally cleaned out the garage, found my old rollerblades.",
    "It's been ages since we talked properly!",
    "Same here, life just gets busy.",
    "Anyway, enough about me, what's new with you?",
    "I'm thinking of repainting the kitchen, maybe a pale green.",
    "My {relation} visited last week, we ate way too much.",
]


@dataclass
class Said:
    """A fact a speaker stated: its kind, values, and the turn and session that hold it."""

    kind: str
    values: dict[str, str]
    turn: str
    session: int
    date: datetime


@dataclass
class Person:
    name: str
    facts: dict[str, list[Said]] = field(default_factory=dict)


def plan(rng: random.Random, sessions: int) -> list[list[tuple[str, dict[str, str]]]]:
    """Per session, the facts a speaker states in it (kind, values): each kind once, the city and
    the job twice (a change), spread over the sessions."""
    city0, city1 = rng.sample(CITIES, 2)
    (job0, emp0), (job1, emp1) = rng.sample(JOBS, 2)
    place0, place1 = rng.sample(PLACES, 2)
    sport = rng.choice(SPORTS)
    facts: list[tuple[str, dict[str, str]]] = [
        ("city_first", {"city": city0}),
        ("job", {"job": job0, "employer": emp0}),
        ("pet", {"breed": rng.choice(BREEDS), "pet": rng.choice(PET_NAMES)}),
        ("instrument", {"instrument": rng.choice(INSTRUMENTS)}),
        ("trip", {"place": place0[0], "sight": place0[1]}),
        ("book", {"book": rng.choice(BOOKS)}),
        ("sport", {"event": sport[0], "detail": sport[1]}),
        ("car", {"car": rng.choice(CARS)}),
        ("sibling", {"relation": rng.choice(SIBLINGS), "sibling": rng.choice(NAMES), "month": rng.choice(MONTHS)}),
        ("food", {"food": rng.choice(FOODS)}),
        ("trip", {"place": place1[0], "sight": place1[1]}),
        ("city", {"city": city1}),
        ("job", {"job": job1, "employer": emp1}),
    ]
    # the first city first, the move and the new job in the second half, the rest anywhere
    out: list[list[tuple[str, dict[str, str]]]] = [[] for _ in range(sessions)]
    out[0].append(facts[0])
    for f in facts[1:11]:
        out[rng.randrange(0, sessions * 2 // 3)].append(f)
    out[rng.randrange(sessions // 2, sessions)].append(facts[11])
    out[rng.randrange(sessions * 2 // 3, sessions)].append(facts[12])
    return out


MONTHS = ["January", "March", "May", "June", "August", "September", "October", "December"]


def dialogue(rng: random.Random, index: int, names: list[str]) -> tuple[dict[str, Any], list[Person]]:
    people = [Person(n) for n in names]
    sessions = rng.randint(11, 14)
    plans = {p.name: plan(rng, sessions) for p in people}
    start = datetime(2023, 1, 1, tzinfo=UTC) + timedelta(days=rng.randint(0, 120))
    when = start
    out_sessions = []
    did = f"d{index:02d}"
    for s in range(sessions):
        when = when + timedelta(days=rng.randint(4, 24), hours=rng.randint(0, 5), minutes=rng.randint(0, 59))
        date = when.replace(hour=rng.randint(9, 21))
        turns: list[dict[str, str]] = []
        # the session's statements, in a random order, each a few chit-chat turns apart
        stated = [(p, kind, values) for p in people for kind, values in plans[p.name][s]]
        rng.shuffle(stated)
        length = rng.randint(20, 40)
        slots = sorted(rng.sample(range(2, length - 2), min(len(stated), length - 4)))
        speaker = rng.randrange(len(people))
        t = 0
        while t < length or stated:
            tid = f"{did}-s{s + 1:02d}-t{len(turns) + 1:03d}"
            who = people[speaker % len(people)]
            if stated and (t in slots or t >= length):
                p, kind, values = stated.pop()
                text = rng.choice(SAY[kind]).format(**values)
                turns.append({"id": tid, "speaker": p.name, "text": text})
                p.facts.setdefault(kind.removesuffix("_first"), []).append(
                    Said(kind.removesuffix("_first"), values, tid, s + 1, date)
                )
                other = next(q for q in people if q is not p)
                echo = next(iter(values.values()))
                reply = rng.choice(REPLY).format(echo=echo)
                turns.append({"id": f"{did}-s{s + 1:02d}-t{len(turns) + 1:03d}", "speaker": other.name, "text": reply})
                speaker = people.index(p)
            else:
                text = rng.choice(CHAT).format(
                    breed=rng.choice(BREEDS),
                    city=rng.choice(CITIES),
                    job=rng.choice(JOBS)[0],
                    place=rng.choice(PLACES)[0],
                    book=rng.choice(BOOKS),
                    food=rng.choice(FOODS),
                    relation=rng.choice(SIBLINGS),
                )
                turns.append({"id": tid, "speaker": who.name, "text": text})
            speaker += 1
            t += 1
        out_sessions.append({"session": f"{did}-s{s + 1:02d}", "date": date.isoformat(), "turns": turns})
    return {"dialogue": did, "speakers": names, "sessions": out_sessions}, people


def day(d: datetime) -> str:
    return f"{d:%B} {d.day}, {d.year}"


def questions(rng: random.Random, did: str, people: list[Person]) -> list[dict[str, Any]]:
    """Each speaker's questions: single facts in other words, what changed, when, and two hops."""
    out: list[dict[str, Any]] = []

    def ask(kind: str, question: str, answer: str, *said: Said) -> None:
        out.append(
            {"dialogue": did, "question": question, "answer": answer, "evidence": [s.turn for s in said], "kind": kind}
        )

    for p in people:
        f = {k: v for k, v in p.facts.items()}
        n = p.name
        pet, inst, book, car, food = f["pet"][0], f["instrument"][0], f["book"][0], f["car"][0], f["food"][0]
        sport, sib = f["sport"][0], f["sibling"][0]
        city_then, city_now = f["city"][0], f["city"][-1]
        job_then, job_now = f["job"][0], f["job"][-1]
        trips = f["trip"]
        ask("single-fact", f"What breed is {n}'s dog?", pet.values["breed"], pet)
        ask("single-fact", f"What is the name of {n}'s dog?", pet.values["pet"], pet)
        ask("single-fact", f"Which musical instrument is {n} learning to play?", inst.values["instrument"], inst)
        ask("single-fact", f"What novel was {n} reading?", book.values["book"], book)
        ask("single-fact", f"What vehicle does {n} drive?", car.values["car"], car)
        ask("single-fact", f"What kind of cuisine has {n} been eating a lot?", food.values["food"], food)
        ask("single-fact", f"What athletic event did {n} complete?", sport.values["event"], sport)
        ask("single-fact", f"Whose wedding is coming up in {n}'s family?", sib.values["sibling"], sib)
        ask(
            "single-fact",
            f"Which sights did {n} see on vacation in {trips[0].values['place']}?",
            trips[0].values["sight"],
            trips[0],
        )
        # in the evidence's own words, with chit-chat that shares them: where a keyword ranker shines
        ask("single-fact", f"What is the name of {n}'s {pet.values['breed']}?", pet.values["pet"], pet)
        ask("single-fact", f"Where does {n} work as a {job_then.values['job']}?", job_then.values["employer"], job_then)
        ask(
            "single-fact",
            f"In which month is {n}'s {sib.values['relation']} getting married?",
            sib.values["month"],
            sib,
        )
        ask("single-fact", f"What did {n} see in {trips[1].values['place']}?", trips[1].values["sight"], trips[1])
        ask("single-fact", f"Did {n} enjoy reading {book.values['book']}?", "yes", book)
        ask("changed", f"Which city does {n} live in now?", city_now.values["city"], city_now)
        ask("changed", f"Where did {n} live before the move?", city_then.values["city"], city_then, city_now)
        ask("changed", f"What is {n}'s current occupation?", job_now.values["job"], job_now)
        ask("changed", f"What did {n} work as before changing jobs?", job_then.values["job"], job_then, job_now)
        ask("temporal", f"When did {n} bring home a new dog?", day(pet.date), pet)
        ask("temporal", f"When did {n} travel to {trips[1].values['place']}?", day(trips[1].date), trips[1])
        ask("temporal", f"When did {n} move house?", day(city_now.date), city_now)
        first = min(trips, key=lambda s: (s.session, s.turn))
        ask(
            "temporal",
            f"Which trip did {n} take first, {trips[0].values['place']} or {trips[1].values['place']}?",
            first.values["place"],
            *trips,
        )
        ask(
            "multi-hop",
            f"What is the dog's name of the person who works at {job_now.values['employer']}?",
            pet.values["pet"],
            job_now,
            pet,
        )
        ask(
            "multi-hop",
            f"Which instrument does the person who moved to {city_now.values['city']} play?",
            inst.values["instrument"],
            city_now,
            inst,
        )
    return out


def make(seed: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    rng = random.Random(seed)
    dialogues, asked = [], []
    names = rng.sample(NAMES, len(NAMES))
    for i in range(12):
        speakers = [names[(2 * i) % len(names)], names[(2 * i + 1) % len(names)]]
        d, people = dialogue(rng, i + 1, speakers)
        dialogues.append(d)
        asked += questions(rng, d["dialogue"], people)
    for i, q in enumerate(asked, 1):
        q["id"] = f"q{i:04d}"
    return dialogues, asked


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    args = parser.parse_args()
    dialogues, asked = make(args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    with open(args.out / "dialogues.jsonl", "w") as f:
        for d in dialogues:
            f.write(json.dumps(d, ensure_ascii=False) + "\n")
    with open(args.out / "questions.jsonl", "w") as f:
        for q in asked:
            f.write(json.dumps(q, ensure_ascii=False) + "\n")
    turns = sum(len(s["turns"]) for d in dialogues for s in d["sessions"])
    print(f"{len(dialogues)} dialogues, {turns} turns, {len(asked)} questions -> {args.out}")


if __name__ == "__main__":
    main()
