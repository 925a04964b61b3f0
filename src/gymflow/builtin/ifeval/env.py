"""Instruction-following tasks generated from templates with a fixed seed.

Each task is a writing request plus one to three verifiable constraints. The reference response is
built to meet every constraint and then checked with the verifier itself (a task whose reference
does not pass is redrawn), so no task ships with an unreachable target. About a quarter of the
references open with a markdown-bold "**Sure!**" line that breaks a constraint as written: those
pass only in loose mode, so reverifying strict -> loose flips them. The distractor is the clean
reference with exactly one constraint broken, and fails in both modes."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Any

from gymflow.core.tasks import Task
from gymflow.environments.base import Environment
from gymflow.verifiers.ifeval import CHECKS, check_constraint

SEED = 20261130
LOOSE_PREAMBLE = "**Sure!**"

TOPICS: dict[str, list[str]] = {
    "a community garden": [
        "The garden opened on a plot that used to be an empty parking lot",
        "Neighbours share tools from a small shed near the gate",
        "Tomatoes and beans grow best along the sunny south fence",
        "Volunteers water the beds early in the morning before work",
        "Children from the school plant herbs in two raised beds",
        "The harvest is split between the members and a local food bank",
    ],
    "learning to cook": [
        "Start with a handful of simple recipes and repeat them often",
        "A sharp knife makes chopping safer and much faster",
        "Tasting the food while it cooks teaches more than any book",
        "Cheap ingredients like rice and lentils forgive most mistakes",
        "Cleaning as you go keeps the kitchen calm",
        "Cooking for friends turns practice into a small celebration",
    ],
    "a night train journey": [
        "The train left the station just after nine in the evening",
        "Bunks fold down from the wall of each narrow compartment",
        "Towns slide past the window as scattered points of light",
        "The rocking of the carriage makes sleep come easily",
        "Breakfast arrives on a tray as the train reaches the coast",
        "Travellers wake up in a new city without losing a day",
    ],
    "remote work": [
        "Working from home removes the daily commute",
        "A quiet corner with good light helps with focus",
        "Short video calls replace many long meetings",
        "Clear written notes keep a distributed team in step",
        "Regular breaks protect both the eyes and the back",
        "Some people miss the chance conversations of an office",
    ],
    "the history of the bicycle": [
        "Early bicycles had no pedals and were pushed along by the feet",
        "The penny farthing had a huge front wheel and a tiny rear one",
        "The safety bicycle introduced a chain and two equal wheels",
        "Pneumatic tyres made long rides far more comfortable",
        "Bicycles gave many workers cheap transport to distant jobs",
        "Today cities build protected lanes to encourage cycling",
    ],
    "caring for houseplants": [
        "Most houseplants suffer more from too much water than too little",
        "A pot with drainage holes keeps the roots healthy",
        "Bright indirect light suits the majority of common plants",
        "Leaves turning yellow often point to a watering problem",
        "Dust on the leaves blocks light and should be wiped away",
        "Repotting in spring gives growing roots fresh soil",
    ],
    "a small bakery": [
        "The bakery opens at six when the first loaves leave the oven",
        "Sourdough takes two days from starter to finished bread",
        "Regular customers often order their rolls the night before",
        "Flour is bought from a mill only a few miles away",
        "Unsold bread goes to a shelter at the end of each day",
        "The owner learned the trade from her grandfather",
    ],
    "saving energy at home": [
        "Switching to LED bulbs cuts the lighting bill quickly",
        "Draught strips around doors keep warm air inside",
        "Washing clothes at lower temperatures saves power",
        "A thermostat set one degree lower makes a real difference",
        "Unplugging idle chargers removes small but constant loads",
        "Thick curtains help to hold heat in during winter nights",
    ],
}

REQUESTS = (
    "Write a short piece about {topic}.",
    "Explain {topic} to a friend who knows nothing about it.",
    "Write a brief newsletter item on {topic}.",
    "Describe {topic} for a local community website.",
    "Give an overview of {topic} for a school project.",
)

START_PHRASES = ("Here is the thing", "To begin with", "In short", "Dear reader")
END_PHRASES = (
    "Is there anything else I can help with?",
    "That is all for today.",
    "Thank you for reading.",
    "Any other questions?",
)
EXTRA_KEYWORDS = ("community", "patience", "season", "balance", "routine", "budget", "future")
BANNED_WORDS = ("very", "really", "basically", "amazing", "literally", "awesome")
FORBIDDEN_CHARS = (",", "!", ";", ":", "?")

Constraint = dict[str, Any]

#: Constraints that shape the whole response; a task has at most one of them.
_LAYOUT = {"json_format", "paragraph_count", "section_count", "bullet_count"}
_CASE = {"lowercase", "uppercase"}


def describe(c: Constraint) -> str:
    k = c["kind"]
    if k == "word_count":
        return f"Answer with {c['relation'].replace('_', ' ')} {c['n']} words."
    if k == "sentence_count":
        return f"Use {c['relation'].replace('_', ' ')} {c['n']} sentences."
    if k == "include_keywords":
        return "Include the keywords " + ", ".join(repr(w) for w in c["keywords"]) + "."
    if k == "exclude_keywords":
        return "Do not use the words " + ", ".join(repr(w) for w in c["keywords"]) + "."
    if k == "keyword_frequency":
        return f"Use the word {c['keyword']!r} at least {c['n']} times."
    if k == "forbidden_chars":
        return "Do not use these characters anywhere: " + " ".join(c["chars"])
    if k == "json_format":
        return "Wrap your entire output in JSON format (no markdown fences)."
    if k == "paragraph_count":
        return f"Write exactly {c['n']} paragraphs, separated by a blank line."
    if k == "section_count":
        return f"Write exactly {c['n']} sections, each starting with a line 'SECTION X'."
    if k == "bullet_count":
        return f"Include exactly {c['n']} bullet points, each a line starting with '- '."
    if k == "lowercase":
        return "Write the entire response in lowercase letters; no capitals at all."
    if k == "uppercase":
        return "Write the entire response in capital letters."
    if k == "start_phrase":
        return f"Start your response with the exact phrase {c['phrase']!r}."
    if k == "end_phrase":
        return f"End your response with the exact phrase {c['phrase']!r}."
    if k == "title":
        return "Give your answer a title wrapped in double angular brackets, like <<my title>>."
    raise ValueError(f"no description for constraint kind {k!r}")


def _draw_constraint(rng: random.Random, kind: str) -> Constraint:
    if kind == "word_count":
        relation = rng.choice(("at_least", "at_most"))
        return {
            "kind": kind,
            "relation": relation,
            "n": rng.choice((40, 60, 80) if relation == "at_least" else (90, 120, 150)),
        }
    if kind == "sentence_count":
        relation = rng.choice(("at_least", "at_most"))
        n = rng.randint(4, 6) if relation == "at_least" else rng.randint(7, 10)
        return {"kind": kind, "relation": relation, "n": n}
    if kind == "include_keywords":
        return {"kind": kind, "keywords": rng.sample(EXTRA_KEYWORDS, rng.randint(1, 2))}
    if kind == "exclude_keywords":
        return {"kind": kind, "keywords": rng.sample(BANNED_WORDS, 2)}
    if kind == "keyword_frequency":
        return {"kind": kind, "keyword": rng.choice(EXTRA_KEYWORDS), "n": rng.randint(2, 3)}
    if kind == "forbidden_chars":
        return {"kind": kind, "chars": rng.sample(FORBIDDEN_CHARS, rng.randint(1, 2))}
    if kind in ("paragraph_count", "bullet_count"):
        return {"kind": kind, "n": rng.randint(2, 4)}
    if kind == "section_count":
        return {"kind": kind, "n": rng.randint(2, 3)}
    if kind == "start_phrase":
        return {"kind": kind, "phrase": rng.choice(START_PHRASES)}
    if kind == "end_phrase":
        return {"kind": kind, "phrase": rng.choice(END_PHRASES)}
    return {"kind": kind}


def _draw_constraints(rng: random.Random) -> list[Constraint]:
    kinds: list[str] = []
    for _ in range(rng.choice((1, 2, 2, 3, 3))):
        options = [
            k
            for k in CHECKS
            if k not in kinds
            and not (k in _LAYOUT and _LAYOUT & set(kinds))
            and not (k in _CASE and _CASE & set(kinds))
        ]
        kinds.append(rng.choice(options))
    return [_draw_constraint(rng, k) for k in kinds]


def _body_sentences(rng: random.Random, topic: str, constraints: list[Constraint]) -> list[str]:
    """Sentences (without final stops) that carry the content and every required keyword."""
    pool = list(TOPICS[topic])
    rng.shuffle(pool)
    by_kind = {c["kind"]: c for c in constraints}
    wanted = 5
    if "sentence_count" in by_kind:
        c = by_kind["sentence_count"]
        wanted = c["n"] + 1 if c["relation"] == "at_least" else c["n"] - 3
    if "word_count" in by_kind and by_kind["word_count"]["relation"] == "at_least":
        wanted = max(wanted, by_kind["word_count"]["n"] // 9 + 1)
    for kind in ("paragraph_count", "bullet_count"):
        if kind in by_kind:
            wanted = max(wanted, by_kind[kind]["n"])
    if "section_count" in by_kind:
        wanted = max(wanted, 2 * by_kind["section_count"]["n"])
    body = [pool[i % len(pool)] for i in range(max(1, wanted))]
    keywords: list[str] = []
    if "include_keywords" in by_kind:
        keywords += by_kind["include_keywords"]["keywords"]
    if "keyword_frequency" in by_kind:
        c = by_kind["keyword_frequency"]
        keywords += [c["keyword"]] * c["n"]
    for i, word in enumerate(keywords):
        body[i % len(body)] += f" with an eye on {word}"
    return body


def _layout(body: list[str], constraints: list[Constraint], topic: str) -> str:
    by_kind = {c["kind"]: c for c in constraints}
    stop = "."
    if "json_format" in by_kind:
        return json.dumps({"topic": topic, "text": ". ".join(body) + stop})
    if "bullet_count" in by_kind:
        n = by_kind["bullet_count"]["n"]
        return f"{body[0]}{stop}\n\n" + "\n".join(f"- {s}{stop}" for s in body[1 : n + 1])
    groups = 1
    if "paragraph_count" in by_kind:
        groups = by_kind["paragraph_count"]["n"]
    if "section_count" in by_kind:
        groups = by_kind["section_count"]["n"]
    size = -(-len(body) // groups)
    chunks = [body[i * size : (i + 1) * size] for i in range(groups)]
    paragraphs = [" ".join(f"{s}{stop}" for s in chunk) for chunk in chunks]
    if "section_count" in by_kind:
        paragraphs = [f"SECTION {i + 1}\n{p}" for i, p in enumerate(paragraphs)]
    return "\n\n".join(paragraphs)


def build_reference(rng: random.Random, topic: str, constraints: list[Constraint]) -> str:
    by_kind = {c["kind"]: c for c in constraints}
    text = _layout(_body_sentences(rng, topic, constraints), constraints, topic)
    if "title" in by_kind:
        text = f"<<{topic.title()}>>\n\n{text}" if "json_format" not in by_kind else text
    if "start_phrase" in by_kind:
        text = f"{by_kind['start_phrase']['phrase']}. {text}"
    if "end_phrase" in by_kind:
        text = f"{text}\n\n{by_kind['end_phrase']['phrase']}"
    if "forbidden_chars" in by_kind:
        for char in by_kind["forbidden_chars"]["chars"]:
            text = text.replace(char, "")
    if "lowercase" in by_kind:
        text = text.lower()
    if "uppercase" in by_kind:
        text = text.upper()
    return text


#: How to break one constraint so that loose mode cannot forgive it either: the change goes into
#: every line, or removes something everywhere, so dropping a first or last line does not undo it.
_BREAKERS: dict[str, Callable[[str, Constraint], str]] = {
    "word_count": lambda t, c: (
        " ".join(t.split()[:10])
        if c["relation"] == "at_least"
        else _in_every_line(t, " more words follow here" * 40)
    ),
    "sentence_count": lambda t, c: (
        "Too short."
        if c["relation"] == "at_least"
        else _in_every_line(t, ". Another point" * 12 + ". ")
    ),
    "include_keywords": lambda t, c: _drop_words(t, c["keywords"]),
    "exclude_keywords": lambda t, c: _in_every_line(t, f" it is {c['keywords'][0]} good "),
    "keyword_frequency": lambda t, c: _drop_words(t, [c["keyword"]]),
    "forbidden_chars": lambda t, c: _in_every_line(t, f" {c['chars'][0]} "),
    "json_format": lambda t, c: t.rstrip("}") + ",",
    "paragraph_count": lambda t, c: _in_every_line(t, "\n\nOne more thought.\n\n"),
    "section_count": lambda t, c: "\n".join(
        line.replace("SECTION", "PART").replace("section", "part") for line in t.split("\n")
    ),
    "bullet_count": lambda t, c: "\n".join(line.removeprefix("- ") for line in t.split("\n")),
    "lowercase": lambda t, c: _in_every_line(t, " Capital Letters Here "),
    "uppercase": lambda t, c: _in_every_line(t, " small letters here "),
    "start_phrase": lambda t, c: "Well, " + t,
    "end_phrase": lambda t, c: t.strip()[: -len(c["phrase"])].rstrip() + " Goodbye for now.",
    "title": lambda t, c: t.replace("<<", "").replace(">>", ""),
}


def _in_every_line(text: str, piece: str) -> str:
    lines = []
    for line in text.split("\n"):
        if line.strip():
            middle = len(line) // 2
            cut = line.find(" ", middle)
            cut = middle if cut < 0 else cut
            line = line[:cut] + piece + line[cut:]
        lines.append(line)
    return "\n".join(lines)


def _drop_words(text: str, drop: list[str]) -> str:
    for word in drop:
        for form in (word, word.upper(), word.capitalize()):
            text = text.replace(f" with an eye on {form}", "").replace(form, "item")
    return text


def _passes(text: str, constraints: list[Constraint], mode: str) -> bool:
    return all(check_constraint(text, c, mode)["passed"] for c in constraints)


def _distractor(rng: random.Random, reference: str, constraints: list[Constraint]):
    for c in rng.sample(constraints, len(constraints)):
        broken = _BREAKERS[c["kind"]](reference, c)
        if not _passes(broken, constraints, "loose"):
            return broken, c["kind"]
    return None, None


def make_task(index: int) -> Task:
    rng = random.Random(f"{SEED}:{index}")
    for _ in range(50):  # redraw until the reference passes and the distractor does not
        topic = rng.choice(sorted(TOPICS))
        constraints = _draw_constraints(rng)
        reference = build_reference(rng, topic, constraints)
        if not _passes(reference, constraints, "strict"):
            continue
        distractor, broken_kind = _distractor(rng, reference, constraints)
        if distractor is not None:
            break
    else:
        raise RuntimeError(f"ifeval task {index}: no reference/distractor pair after 50 draws")
    loose_only = False
    if rng.random() < 0.35:
        decorated = f"{LOOSE_PREAMBLE}\n{reference}"
        if not _passes(decorated, constraints, "strict") and _passes(
            decorated, constraints, "loose"
        ):
            reference, loose_only = decorated, True
    request = rng.choice(REQUESTS).format(topic=topic)
    kinds = tuple(c["kind"] for c in constraints)
    return Task(
        task_id=f"ifeval-{index:05d}",
        inputs={"request": request, "constraints": [describe(c) for c in constraints]},
        data={
            "constraints": constraints,
            "reference_passes": "loose" if loose_only else "strict",
            "distractor_breaks": broken_kind,
        },
        reference=reference,
        distractor=distractor,
        tags=(*kinds, "loose-only") if loose_only else kinds,
        difficulty={1: "easy", 2: "medium", 3: "hard"}[len(constraints)],
    )


class IfevalEnvironment(Environment):
    def generate(self, split: str) -> list[Task]:
        return [make_task(i) for i in range(self.manifest.splits[split].size or 0)]
