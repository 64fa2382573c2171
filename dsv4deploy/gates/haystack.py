"""Needle-in-a-haystack prompts: filler prose with one planted fact, deterministic by seed.

The fact is ``The secret code for <topic> is <CODE>.`` and the last line asks
``What is the secret code for <topic>? Answer with the code only.`` (docs/interfaces.md §3).
Sizes are token targets reached through an assumed characters-per-token ratio; the real size is
whatever the server reports in ``usage.prompt_tokens``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

DEFAULT_CHARS_PER_TOKEN = 4.0

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
TOPICS_A = ("amber", "silver", "northern", "hidden", "copper", "quiet", "eastern", "frozen", "crimson", "old")
TOPICS_B = ("lighthouse", "archive", "orchard", "observatory", "harbour", "vault", "garden", "mill", "tower")
CODE_WORDS = (
    "ZEBRA",
    "OMEGA",
    "FALCON",
    "DELTA",
    "CEDAR",
    "ORBIT",
    "EMBER",
    "TUNDRA",
    "NOVA",
    "QUARTZ",
    "MAPLE",
    "RAVEN",
    "SIERRA",
    "COBALT",
    "LOTUS",
    "VECTOR",
)


@dataclass(frozen=True)
class Haystack:
    """One needle prompt: the full user message and what it hides where."""

    content: str
    topic: str
    code: str
    question: str
    depth: float
    needle_offset: int  # character offset of the fact sentence in ``content``

    @property
    def fact(self) -> str:
        """The planted sentence."""
        return fact_sentence(self.topic, self.code)


def fact_sentence(topic: str, code: str) -> str:
    """``The secret code for <topic> is <CODE>.``"""
    return f"The secret code for {topic} is {code}."


def question_line(topic: str) -> str:
    """``What is the secret code for <topic>? Answer with the code only.``"""
    return f"What is the secret code for {topic}? Answer with the code only."


def cell_rng(seed: int, target_tokens: int, depth: float) -> random.Random:
    """A random source fixed by the seed and the cell, so reruns ask the same questions."""
    return random.Random(f"dsv4deploy-needle:{seed}:{target_tokens}:{depth:.6f}")


def make_code(rng: random.Random) -> str:
    """A code such as ``ZEBRA-4492-OMEGA``."""
    first, last = rng.sample(CODE_WORDS, 2)
    return f"{first}-{rng.randrange(1000, 10000)}-{last}"


def build_haystack(
    target_tokens: int, depth: float, *, seed: int = 0, chars_per_token: float = DEFAULT_CHARS_PER_TOKEN
) -> Haystack:
    """Build a prompt of about ``target_tokens`` tokens with the fact at ``depth`` (0 start, 1 end)."""
    if target_tokens <= 0:
        raise ValueError(f"target_tokens must be positive, got {target_tokens}")
    if not 0.0 <= depth <= 1.0:
        raise ValueError(f"depth must be a fraction between 0 and 1, got {depth}")
    if chars_per_token <= 0:
        raise ValueError(f"chars_per_token must be positive, got {chars_per_token}")
    rng = cell_rng(seed, target_tokens, depth)
    topic = f"the {rng.choice(TOPICS_A)} {rng.choice(TOPICS_B)}"
    code = make_code(rng)
    fact, question = fact_sentence(topic, code), question_line(topic)

    budget = target_tokens * chars_per_token - len(fact) - len(question) - 2
    sentences: list[str] = []
    size = 0
    while size < budget:
        batch = list(FILLER)
        rng.shuffle(batch)  # a fresh order each pass, so long haystacks do not repeat verbatim blocks
        for sentence in batch:
            if size >= budget:
                break
            sentences.append(sentence)
            size += len(sentence) + 1
    at = round(depth * len(sentences))
    before = " ".join(sentences[:at])
    after = " ".join(sentences[at:])
    head = f"{before} " if before else ""
    body = f"{head}{fact}" + (f" {after}" if after else "")
    return Haystack(
        content=f"{body}\n\n{question}",
        topic=topic,
        code=code,
        question=question,
        depth=depth,
        needle_offset=len(head),
    )
