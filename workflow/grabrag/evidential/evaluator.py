"""The EvidentialRAG evaluator's contract (EvidentialRAG paper, section 3.2, Appendix B):
the order it reads a question's passages in (which is also Eq. 12's fold order), its
prompt and output grammar, and the parse of one output into an :class:`Evaluation` (one
claim with a non-negative evidence score). Pure: the workflow calls the evaluator
(:mod:`grabrag.evidential.evaluator_pass`) and stores its raw outputs, which
:func:`parse_evaluation` reads back without a model.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from grabrag.core.text import normalize_answer

# =====================================================================================
# Fold order (Eq. 12)
# =====================================================================================

# The evaluator walks the passages by question overlap, then pid, title and text: its
# candidate inventory grows along that order.


def passage_relevance(question: str, passage: Mapping[str, Any]) -> int:
    """How many distinct SQuAD-normalised question tokens occur in the passage (title and
    text): a lexical stand-in for the paper's reranker score."""
    words = set(normalize_answer(question).split())
    text = f"{passage.get('title') or ''} {passage.get('text') or ''}"
    return len(words & set(normalize_answer(text).split()))


def fold_key(question: str, passage: Mapping[str, Any]) -> tuple[int, str, str, str]:
    """Sort key of one passage in the fold: most relevant first (:func:`passage_relevance`),
    ties by pid, title and text."""
    return (
        -passage_relevance(question, passage),
        str(passage.get("pid") or ""),
        str(passage.get("title") or ""),
        str(passage.get("text") or ""),
    )


def fold_groups(question: str, passages: Sequence[Mapping[str, Any]]) -> list[list[int]]:
    """:func:`fold_order` cut into the groups the evaluator and Eq. 12 treat as one step.

    Passages that tie on relevance and pid but differ in text (QX's gold passage and its
    swapped twin: one passage and its edit) have no order of their own: the text decides
    which comes first, and which is gold is not to be read. Choice: such a run is one
    group: each member is evaluated with the inventory from before the group (neither
    sees the other's claim) and the members are combined with each other before they
    join the fold (:func:`grabrag.evidential.fusion.fuse`), so the result does not depend
    on their order. Every other passage (identical Q100 copies included) is a group of its
    own, in order.
    """
    order = fold_order(question, passages)
    groups: list[list[int]] = []
    run: list[int] = []

    def close() -> None:
        texts = {(passages[i].get("title"), passages[i].get("text")) for i in run}
        if len(run) > 1 and len(texts) == len(run):
            groups.append(list(run))
        else:
            groups.extend([i] for i in run)

    for i in order:
        if run and fold_key(question, passages[i])[:2] != fold_key(question, passages[run[0]])[:2]:
            close()
            run = []
        run.append(i)
    if run:
        close()
    return groups


def fold_order(question: str, passages: Sequence[Mapping[str, Any]]) -> list[int]:
    """Indices of ``passages`` in the order the evaluator reads them and Eq. 12 folds them.

    The paper folds its reranked top-k in rank order. The lambda rule is not associative,
    so the order changes the route, and a GRAB-RAG context is shuffled per condition on
    purpose (its passage order carries no rank). Choice: we rank the passages of a
    question by their overlap with the question (:func:`fold_key`), a deterministic
    function of the question and the passages alone: any permutation of the same context
    gives the same order, hence the same evaluations and the same route. It uses no
    benchmark label (a passage's role is never read). Identical passages (Q100 reuses its
    gold passages) tie completely and are interchangeable.
    """
    return sorted(range(len(passages)), key=lambda i: fold_key(question, passages[i]))


# =====================================================================================
# Evaluator (section 3.2, Appendix B)
# =====================================================================================

STANCES = ("supports", "competing", "irrelevant")
MAX_EVIDENCE = 10
# Appendix B / section 4.3: an invalid or unrecoverable evaluator output is treated as
# no singleton evidence (high uncertainty), never as hidden support.
FALLBACK_EVIDENCE = 0.0
EVAL_OK, EVAL_REPAIRED, EVAL_FAILED = "ok", "repaired", "failed"
EVALUATION_FIELDS = ("claim", "value", "stance", "rationale", "evidence")

# Appendix B, part 1 (task role).
EVALUATOR_SYSTEM = (
    "You are an evidence evaluator for retrieval-augmented question answering.\n"
    "You judge ONE retrieved passage: does it state an answer to the question, and how "
    "strongly?\n"
    "Use only the passage, never your own knowledge.\n"
    "Always respond with valid JSON."
)

# Appendix B, part 3 (evidence-scoring rules) and part 5 (failure handling).
EVALUATOR_RULES = (
    "Rules:\n"
    '- If the passage states an answer to the question, put that statement in "claim" and '
    'the short answer (a name, date or number; a few words) in "value". Write dates as '
    "day month year (5 March 1990) and numbers in digits (1000).\n"
    "- If the answer is the same as one of the candidate answers, copy that candidate "
    'exactly into "value" and set "stance" to "supports".\n'
    '- If the answer differs from every candidate answer, set "stance" to "competing". '
    'With no candidate answers yet, an answer the passage states "supports".\n'
    '- "evidence" (0 to 10) says how directly and completely THIS passage states the '
    "answer: 10 = stated explicitly, 5 = stated indirectly or in part, 1 = barely hinted.\n"
    "- If the passage is irrelevant, incomplete, or only about the same topic without "
    'stating an answer, set "stance" to "irrelevant", "claim" and "value" to empty '
    'strings and "evidence" to 0. Do not guess.\n'
    '- If you cannot judge the passage, set "stance" to "irrelevant" and "evidence" to 0. '
    "An output that does not follow the format below counts as no evidence."
)

# Appendix B, part 4 (output schema), in the style of GRAB-RAG's RESPONSE_FORMAT.
EVALUATOR_FORMAT = (
    "Respond ONLY with a JSON object in this exact format:\n"
    '{"claim": "the passage\'s statement that answers the question, or empty string",\n'
    '"value": "the short answer, or empty string",\n'
    '"stance": "supports" or "competing" or "irrelevant",\n'
    '"rationale": "brief reason",\n'
    '"evidence": 0-10}\n'
    "Start with { immediately.\n"
    "Keep the rationale brief.\n"
    "Do not use backslashes."
)

# The evaluator's output, forced by llama.cpp. One rule per line: llama.cpp's GBNF
# parser ends a rule at a newline outside parentheses. Strings are JSON strings without
# backslashes (no escapes to get wrong) and without control characters (json.loads
# rejects raw newlines and tabs inside strings); the character class is the one of
# llama.cpp's own grammars/json.gbnf. Evidence is a JSON integer 0..10, spelled out.
# Choice: whitespace between tokens is at most one space, not [ \t\n]*: a small model
# can otherwise emit whitespace until max_tokens, and a cut-off output before the
# evidence field cannot be repaired (it fails, as zero evidence).
EVALUATOR_GRAMMAR = (
    r"""root ::= "{" ws "\"claim\":" ws str "," ws "\"value\":" ws str "," ws """
    r""""\"stance\":" ws stance "," ws "\"rationale\":" ws str "," ws """
    r""""\"evidence\":" ws evidence ws "}"
ws ::= " "?
str ::= "\"" [^"\\\x7F\x00-\x1F]* "\""
stance ::= "\"supports\"" | "\"competing\"" | "\"irrelevant\""
evidence ::= "0" | "1" | "2" | "3" | "4" | "5" | "6" | "7" | "8" | "9" | "10"
"""
)


def evaluator_user_prompt(question: str, passage: str, inventory: Sequence[str]) -> str:
    """User message of one evaluator call (Appendix B, part 2: query, one chunk, the
    current candidate-claim inventory).

    Choice: the blocks that are the same for every passage of a question (question,
    rules, format) come first, so llama.cpp reuses their KV cache across the k calls.
    """
    candidates = list(dict.fromkeys(c.strip() for c in inventory if c.strip()))
    if candidates:
        listed = "\n".join(f"- {c}" for c in candidates)
        inventory_block = f"Candidate answers already found in other passages:\n{listed}"
    else:
        inventory_block = "Candidate answers already found in other passages: none yet."
    return "\n\n".join(
        [
            f"Question: {question}",
            EVALUATOR_RULES,
            EVALUATOR_FORMAT,
            inventory_block,
            f"Passage:\n{passage}",
        ]
    )


def evaluator_messages(
    question: str, passage: str, inventory: Sequence[str]
) -> list[dict[str, str]]:
    """System + user chat messages for evaluating one passage."""
    return [
        {"role": "system", "content": EVALUATOR_SYSTEM},
        {"role": "user", "content": evaluator_user_prompt(question, passage, inventory)},
    ]


@dataclass(frozen=True)
class Evaluation:
    """One evaluator judgement of one passage (or of another evidence source)."""

    claim: str
    value: str
    stance: str  # "supports" | "competing" | "irrelevant"; "" when parsing failed
    rationale: str
    evidence: float
    status: str  # "ok" | "repaired" | "failed"


FAILED_EVALUATION = Evaluation("", "", "", "", FALLBACK_EVIDENCE, EVAL_FAILED)

# Evidence is the last field, so an output cut off by max_tokens that holds every field
# can only be missing its closing brace. A cut earlier (inside the rationale, say) would
# need the evidence invented, so it fails instead. Choice: a cut right after the digit
# "1" is read as 1 although the model may have been writing 10; the lower reading is
# the conservative one (less support, more uncertainty).
_REPAIR_SUFFIXES = ("}",)


def _validate_evaluation(obj: Any, status: str) -> Evaluation | None:
    if not isinstance(obj, dict) or any(field not in obj for field in EVALUATION_FIELDS):
        return None
    claim, value, stance = obj["claim"], obj["value"], obj["stance"]
    rationale, evidence = obj["rationale"], obj["evidence"]
    if not all(isinstance(s, str) for s in (claim, value, stance, rationale)):
        return None
    if stance not in STANCES:
        return None
    if isinstance(evidence, bool) or not isinstance(evidence, int):
        return None
    if not 0 <= evidence <= MAX_EVIDENCE:
        return None
    # Choice: an "irrelevant" stance or a value with nothing left after SQuAD
    # normalisation cannot support any claim, so its evidence is 0 whatever the model
    # wrote (otherwise it would lower the vacuity without naming what it supports).
    if stance == "irrelevant" or not normalize_answer(value):
        evidence = 0
    return Evaluation(claim, value, stance, rationale, float(evidence), status)


def parse_evaluation(raw: str, finish_reason: str | None) -> Evaluation:
    """Parse one evaluator output; repair an output cut off by max_tokens only by closing
    it (see ``_REPAIR_SUFFIXES``). Anything else that is not the schema is ``failed``
    with evidence :data:`FALLBACK_EVIDENCE` and empty claim and value.

    Extra keys are ignored, as in :func:`grabrag.generation.generator.parse_output` (the grammar
    does not allow them anyway)."""
    try:
        parsed = _validate_evaluation(json.loads(raw), EVAL_OK)
    except (json.JSONDecodeError, TypeError):
        parsed = None
    if parsed is not None:
        return parsed
    if finish_reason == "length" and isinstance(raw, str):
        for suffix in _REPAIR_SUFFIXES:
            try:
                repaired = _validate_evaluation(json.loads(raw + suffix), EVAL_REPAIRED)
            except json.JSONDecodeError:
                continue
            if repaired is not None:
                return repaired
    return FAILED_EVALUATION
