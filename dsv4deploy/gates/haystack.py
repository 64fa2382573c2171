"""Needle-in-a-haystack prompts: filler prose with one planted fact, deterministic by seed.

Each cell draws from seeded pools (docs/interfaces.md §3): what the fact is about (an access code,
a locker combination, the courier who collected a parcel, ...), its value (a code such as
``ZEBRA-4492-OMEGA``, a six-digit number or a person's name), the sentence that states it and the
question, on the last line, that asks for it. So recall is tested on natural phrasings, not on one
sentence shape a model (or a simulator) could special-case. Sizes are token targets reached
through a characters-per-token ratio; the gate measures the real size (``usage.prompt_tokens``)
and resizes until it lands within its tolerance.

A cell is asked several times (its ``trial`` number): each trial draws its own needle, phrasing and
filler order, and a depth jittered by up to ``jitter`` around the cell's, so trials are independent
draws of the cell's recall, not one prompt repeated. The same seed, cell and trial give the same prompt
(the isolation experiment pairs the two sides' trials on it).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

DEFAULT_CHARS_PER_TOKEN = 4.0
#: How far a trial's depth may move from its cell's (either way, kept within 0..1).
DEPTH_JITTER = 0.05

# Plain prose with no "secret code" in it, so the only answer in a haystack is the planted one.
FILLER = (
    "The morning train left the valley station a few minutes after the bakery opened its doors.",
    "Farmers along the river spent the spring repairing fences that the winter floods had bent.",
    "A small museum on the hill keeps a collection of clocks that no longer agree with each other.",
    "Most visitors walk the coastal path in the afternoon, when the wind drops and the tide is low.",
    "The library moved its reading room to the ground floor so that older readers could reach it.",
    "Every autumn the village holds a market where apples are sold by the basket rather than by weight.",
    "Engineers surveyed the old bridge twice before deciding that the stone arches were still sound.",
    "The choir rehearses on Thursday evenings in a hall that smells faintly of floor polish and tea.",
    "Several families still keep bees on the terraces above the vineyard, as their grandparents did.",
    "A narrow lane behind the harbour leads to a workshop where boats are repaired by hand.",
    "The weather station on the ridge has recorded rainfall there for more than ninety years.",
    "Children from the two nearest towns share a school bus that follows the lake road each day.",
    "The post office closes at noon on Saturdays, which surprises almost every newcomer.",
    "In the square, a fountain built for a royal visit now mostly serves thirsty pigeons.",
    "The forest trail is marked with yellow paint on the trees, renewed each year by volunteers.",
    "A retired teacher writes a weekly column about local birds for the regional newspaper.",
    "The mill at the edge of town was turned into apartments after it stopped grinding grain.",
    "Cyclists often stop at the café by the crossroads, where the soup changes every day.",
    "The town council debated for months over the colour of the new benches in the park.",
    "On clear nights, the observatory opens its dome to anyone willing to climb the stairs.",
    "Shepherds move their flocks to the high pastures in June and bring them down in September.",
    "The ferry timetable is pinned to a board that has been painted over at least a dozen times.",
    "A long hedge of hawthorn separates the orchard from the road and shelters small birds.",
    "The hardware store sells everything from nails to garden seeds and keeps a cat by the till.",
    "Storms in late summer sometimes cut the power for an hour, and nobody seems to mind much.",
    "The stone church has a bell that rings slightly flat, a fact the locals are fond of.",
    "A group of students measured the depth of the lake last year using a rope and a weight.",
    "The bakery's rye bread is made from a starter that the owner says is older than she is.",
    "Road workers resurfaced the main street at night to avoid disturbing the weekday traffic.",
    "The meadow below the castle fills with wild flowers in May and with hay bales in July.",
    "An old map in the town hall shows the coastline where it stood three centuries ago.",
    "The swimming pool reopened after repairs, and the queue on the first day reached the corner.",
)
PLACES = ("amber lighthouse", "north archive", "old orchard", "hill observatory", "east harbour", "river mill",
          "copper vault", "stone tower", "quiet garden", "frozen depot")
CODE_WORDS = ("ZEBRA", "OMEGA", "FALCON", "DELTA", "CEDAR", "ORBIT", "EMBER", "TUNDRA", "NOVA", "QUARTZ", "MAPLE",
              "RAVEN", "SIERRA", "COBALT", "LOTUS", "VECTOR")
FIRST_NAMES = ("Maren", "Tobias", "Ines", "Okoro", "Lucia", "Anselm", "Priya", "Henrik", "Yara", "Dmitri")
LAST_NAMES = ("Calloway", "Solberg", "Achterberg", "Mbeki", "Fontaine", "Okafor", "Lindqvist", "Varga", "Quintero")
# (what the fact is about, what kind of value answers it)
SUBJECTS = (
    ("access code for the {place}", "code"),
    ("password of the {place} gate", "code"),
    ("locker combination at the {place}", "number"),
    ("account number of the {place} fund", "number"),
    ("courier who collected the parcel from the {place}", "name"),
    ("caretaker of the {place}", "name"),
)
FACT_FORMS = (
    "The {key} is {value}.",
    "For the record, the {key} is {value}.",
    "As of last spring, the {key} has been {value}.",
    "According to the ledger, the {key} reads {value}.",
    "Someone left a note saying the {key} would be {value} from now on.",
    "Everyone on the night shift knows the {key}: {value}.",
    "It was agreed at the meeting that the {key} is {value}, and nobody objected.",
)
QUESTION_FORMS = (
    "What is the {key}? Answer with the {kind} only.",
    "Somewhere above, the {key} is mentioned. What is it? Give only the {kind}.",
    "Tell me the {key}, nothing else.",
    "Which {kind} belongs to the {key}? Reply with the {kind} alone.",
    "I need the {key} from the text above; what is it? Reply with just the {kind}.",
)
# How a name-valued subject reads in a question ("Who is the caretaker ...").
NAME_QUESTION_FORMS = (
    "Who is the {key}? Answer with the name only.",
    "Tell me the name of the {key}, nothing else.",
    "Somewhere above, the {key} is named. Who is it? Give only the name.",
)


@dataclass(frozen=True)
class Haystack:
    """One needle prompt: the full user message and what it hides where."""

    content: str
    key: str  # what the fact is about, e.g. "access code for the amber lighthouse"
    value: str  # the answer, e.g. "ZEBRA-4492-OMEGA"
    fact: str  # the planted sentence
    question: str  # the last line
    depth: float
    needle_offset: int  # character offset of the fact sentence in ``content``

    @property
    def code(self) -> str:
        """The value the answer must contain (the name the report has always used)."""
        return self.value

    @property
    def phrasing(self) -> str:
        """Fact and question as asked, for the report of a missed cell."""
        return f"{self.fact} / {self.question}"


def cell_rng(seed: int, target_tokens: int, depth: float, trial: int = 0) -> random.Random:
    """A random source fixed by the seed, the cell and the trial, so reruns ask the same questions."""
    return random.Random(f"dsv4deploy-needle:{seed}:{target_tokens}:{depth:.6f}" + (f":{trial}" if trial else ""))


def make_value(kind: str, rng: random.Random) -> str:
    """A distinctive value: ``ZEBRA-4492-OMEGA``, ``583920`` or ``Maren Calloway``."""
    if kind == "code":
        first, last = rng.sample(CODE_WORDS, 2)
        return f"{first}-{rng.randrange(1000, 10000)}-{last}"
    if kind == "number":
        return str(rng.randrange(100000, 1000000))
    return f"{rng.choice(FIRST_NAMES)} {rng.choice(LAST_NAMES)}"


def draw_needle(rng: random.Random) -> tuple[str, str, str, str]:
    """(key, value, fact sentence, question) drawn from the pools."""
    subject, kind = rng.choice(SUBJECTS)
    key = subject.format(place=rng.choice(PLACES))
    value = make_value(kind, rng)
    fact = rng.choice(FACT_FORMS).format(key=key, value=value)
    forms = NAME_QUESTION_FORMS if kind == "name" else QUESTION_FORMS
    question = rng.choice(forms).format(key=key, kind=kind)
    return key, value, fact, question


def build_haystack(
    target_tokens: int,
    depth: float,
    *,
    seed: int = 0,
    chars_per_token: float = DEFAULT_CHARS_PER_TOKEN,
    trial: int = 0,
    jitter: float = 0.0,
) -> Haystack:
    """Build a prompt of about ``target_tokens`` tokens with the fact at ``depth`` (0 start, 1 end).

    ``trial`` draws another needle for the same cell; ``jitter`` moves the fact up to that far from
    ``depth`` (the haystack's ``depth`` is where it really is)."""
    if target_tokens <= 0:
        raise ValueError(f"target_tokens must be positive, got {target_tokens}")
    if not 0.0 <= depth <= 1.0:
        raise ValueError(f"depth must be a fraction between 0 and 1, got {depth}")
    if chars_per_token <= 0:
        raise ValueError(f"chars_per_token must be positive, got {chars_per_token}")
    if not 0.0 <= jitter <= 0.5:
        raise ValueError(f"jitter must be a fraction between 0 and 0.5, got {jitter}")
    rng = cell_rng(seed, target_tokens, depth, trial)
    if jitter:
        depth = min(1.0, max(0.0, depth + rng.uniform(-jitter, jitter)))
    key, value, fact, question = draw_needle(rng)
    budget = max(0, round(target_tokens * chars_per_token) - len(fact) - len(question) - 3)
    filler = _filler(rng, budget)
    at = _boundary(filler, round(depth * len(filler)))
    before, after = filler[:at].rstrip(), filler[at:].lstrip()
    head = f"{before} " if before else ""
    body = f"{head}{fact}" + (f" {after}" if after else "")
    return Haystack(content=f"{body}\n\n{question}", key=key, value=value, fact=fact, question=question,
                    depth=depth, needle_offset=len(head))


def _filler(rng: random.Random, budget: int) -> str:
    """About ``budget`` characters of shuffled filler prose, cut at a word so sizes can be fine-tuned."""
    sentences: list[str] = []
    size = 0
    while size < budget:
        batch = list(FILLER)
        rng.shuffle(batch)  # a fresh order each pass, so long haystacks do not repeat verbatim blocks
        for sentence in batch:
            sentences.append(sentence)
            size += len(sentence) + 1
            if size >= budget:
                break
    text = " ".join(sentences)[:budget]
    return text[: text.rfind(" ")] if " " in text and len(text) == budget else text


def _boundary(text: str, at: int) -> int:
    """The end of the sentence nearest before ``at`` (0 or the text's end at the extremes)."""
    if at <= 0 or at >= len(text):
        return max(0, min(at, len(text)))
    stop = text.rfind(". ", 0, at)
    return stop + 2 if stop >= 0 else 0
