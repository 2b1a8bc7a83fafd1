"""The prompt-only baselines beside CDD: their instructions (one of them a sham chain of
thought length-matched to CDD's step instructions), response formats and messages.

Prompt-only policies (:data:`BASELINE_PROMPTS`, :func:`baseline_messages`), parsed by
:func:`grabrag.generation.generator.parse_output`: conflict-aware instruction RAG (CAI), a
length-matched sham chain of thought (SHAM), reflection prompting (REFLECT) and
prompt-filtered RAG (FILTER). On equal footing with CDD: the same (neutral) system
message as the CDD steps, GRAB-RAG's scaffold and P1's abstention clause. CAI does what
its text says: follow the context unless it contradicts well-established knowledge,
then answer from that knowledge. REFLECT and FILTER reason *before* they commit: their
response format and grammar put the reasoning first (:data:`REASONING_FIRST_FORMAT`,
:data:`grabrag.cdd.schema.REASONING_FIRST_GRAMMAR`; same fields, so the rows parse into the
same schema).
CAI and SHAM keep GRAB-RAG's answer-first format (CAI's instruction needs no worked
reasoning before the answer, and SHAM's steps are content-free by design).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from grabrag.cdd.prompts import CDD_SYSTEM, STEP_INSTRUCTIONS, _context_prefix
from grabrag.cdd.schema import BASELINE_GRAMMAR, REASONING_FIRST_GRAMMAR, STEPS
from grabrag.generation.prompts import POLICY_INSTRUCTIONS, RESPONSE_FORMAT

# Choice: every baseline is GRAB-RAG's P1 instruction (the abstention clause) plus its own
# content, under GRAB-RAG's scaffold and CDD's system message (:data:`CDD_SYSTEM`, without
# "use ONLY the provided context", which would contradict the baselines' own instructions
# to weigh what the model knows), so the baselines and CDD start from the same footing.
# CAI and SHAM use GRAB-RAG's response format and grammar; REFLECT and FILTER the same
# fields with the reasoning first (:data:`REASONING_FIRST_FORMAT`), because their
# instructions ask for reasoning (a first answer and its critique; the claims to drop)
# that must come before the answer it decides.

_ABSTAIN_CLAUSE = POLICY_INSTRUCTIONS["P1"]


def word_count(text: str) -> int:
    return len(text.split())


CDD_INSTRUCTION_WORDS = word_count(" ".join(STEP_INSTRUCTIONS[s] for s in STEPS))
"""Words of the five CDD step instructions together (response formats excluded): the
length the sham prompt is matched to."""
LENGTH_TOLERANCE = 0.10


def within_length(
    text: str, target_words: int = CDD_INSTRUCTION_WORDS, tolerance: float = LENGTH_TOLERANCE
) -> bool:
    """Whether ``text`` has within ``tolerance`` (relative) of ``target_words`` words."""
    return abs(word_count(text) - target_words) <= tolerance * target_words


def length_matched(
    head: str,
    filler: Sequence[str],
    tail: str,
    target_words: int = CDD_INSTRUCTION_WORDS,
    tolerance: float = LENGTH_TOLERANCE,
) -> str:
    """``head``, then numbered steps cycling through ``filler`` ("Step 1: ..."), then
    ``tail``: as many steps as keep the text at most ``target_words`` words long, at least
    one. Raises ValueError when the result is not within ``tolerance`` of the target
    (a head + tail already too long, or filler sentences too long to land close)."""
    if not filler:
        raise ValueError("need at least one filler sentence")
    steps: list[str] = []

    def text() -> str:
        return "\n".join([head, *steps, tail])  # one step a line

    while True:
        candidate = f"Step {len(steps) + 1}: {filler[len(steps) % len(filler)]}"
        if steps and word_count(text()) + word_count(candidate) > target_words:
            break
        steps.append(candidate)
    out = text()
    if not within_length(out, target_words, tolerance):
        raise ValueError(
            f"the length-matched text has {word_count(out)} words, not within "
            f"{tolerance:.0%} of {target_words}"
        )
    return out


# Content-free steps: reading and re-reading, no judgement about truth, knowledge,
# conflict or reliability (tests check the sham carries none of those words).
SHAM_FILLER = (
    "Read the question carefully.",
    "Read each passage in the context from beginning to end.",
    "Read the question again, word by word.",
    "Count how many passages the context contains.",
    "Look at the title of each passage.",
    "Read the question one more time.",
    "Make sure you have read every passage.",
)

BASELINE_PROMPTS: dict[str, str] = {
    "CAI": (
        "Trust the context unless it conflicts with well-established scientific or "
        "historical knowledge. If a claim in the context contradicts well-established "
        "knowledge, say so in your reasoning and give the answer from that knowledge "
        f'instead, or set decision to "abstain" if you are not sure of it. {_ABSTAIN_CLAUSE}'
    ),
    "SHAM": length_matched(
        "Work through the following steps before you respond.",
        SHAM_FILLER,
        f"Then answer the question. {_ABSTAIN_CLAUSE}",
    ),
    "REFLECT": (
        "First, answer the question from the context. Then critique your own answer: "
        "check it against the context and against what you know, and look for mistakes. "
        "Finally, give your final answer, revised if the critique found a problem. Write "
        "the first answer and the critique in your reasoning, before the decision, and "
        f"the final answer in the answer. {_ABSTAIN_CLAUSE}"
    ),
    "FILTER": (
        "First, find any claims in the context that are severely implausible or "
        "contradict well-established knowledge, and disregard them. Then answer the "
        "question using only the remaining context. In your reasoning, before the "
        f"decision, list the claims you disregarded. {_ABSTAIN_CLAUSE}"
    ),
}
BASELINES = tuple(BASELINE_PROMPTS)

REASONING_FIRST_FORMAT = (
    "Respond ONLY with a JSON object in this exact format:\n"
    '{"reasoning": "your reasoning",\n'
    '"decision": "answer" or "abstain",\n'
    '"answer": "your answer or empty string",\n'
    '"confidence": 0-100}\n'
    "Start with { immediately.\n"
    "Keep reasoning brief.\n"
    "Do not use backslashes."
)
"""GRAB-RAG's response format (prompts.RESPONSE_FORMAT) with the reasoning first."""
REASONING_FIRST = ("REFLECT", "FILTER")
"""The baselines that reason before they commit (:data:`REASONING_FIRST_GRAMMAR`)."""


def baseline_format(name: str) -> str:
    return REASONING_FIRST_FORMAT if name in REASONING_FIRST else RESPONSE_FORMAT


def baseline_grammar(name: str) -> str:
    """The GBNF grammar of a baseline's call."""
    if name not in BASELINE_PROMPTS:
        raise ValueError(f"unknown baseline {name!r}; known: {', '.join(BASELINES)}")
    return REASONING_FIRST_GRAMMAR if name in REASONING_FIRST else BASELINE_GRAMMAR


def baseline_messages(name: str, question: str, context: str) -> list[dict[str, str]]:
    """GRAB-RAG's P-prompt scaffold with the baseline's instruction as the policy
    instruction and the baseline's response format, under :data:`CDD_SYSTEM`; call with
    :func:`baseline_grammar` (or :func:`grammar_for_messages`) and parse the output with
    :func:`grabrag.generation.generator.parse_output` (it reads the fields in any order)."""
    if name not in BASELINE_PROMPTS:
        raise ValueError(f"unknown baseline {name!r}; known: {', '.join(BASELINES)}")
    user = "\n\n".join(
        [_context_prefix(context, question), BASELINE_PROMPTS[name], baseline_format(name)]
    )
    return [
        {"role": "system", "content": CDD_SYSTEM},
        {"role": "user", "content": user},
    ]


def grammar_for_messages(messages: Sequence[Mapping[str, str]]) -> str:
    """The grammar of a baseline call, from its messages: the reasoning-first grammar
    when the user message ends with :data:`REASONING_FIRST_FORMAT`, else GRAB-RAG's.
    (The generation loop builds messages per prompt name and then calls the model with
    the messages alone; this keeps format and grammar in step.)"""
    user = messages[-1]["content"]
    return REASONING_FIRST_GRAMMAR if user.endswith(REASONING_FIRST_FORMAT) else BASELINE_GRAMMAR
