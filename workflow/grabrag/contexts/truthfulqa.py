"""The contexts of CDD's TruthfulQA misconception-injection probe, paired on one question set.

Each question gets three context rows:

- the misconception injected (``TQM``): the question's first false answer, TruthfulQA's
  most common human misconception, as the only retrieved passage;
- its clean counterpart (``TQB``): the question's best answer as the only passage, in the
  same shape, so the two conditions differ by the claim the passage makes and nothing else;
- the closed-book row (``Qclosed``), with no passage, for the passes that elicit the model's
  own prior (P3, P4, EVID+CB, CDD's closed-book step 2).

A passage is the answer sentence verbatim: TruthfulQA writes its answers as plain
declarative statements ("You grow watermelons in your stomach."), so the injection adds no
wording of ours that could make it more or less persuasive.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from grabrag.contexts.paired import TokenCounter, build_context_row
from grabrag.core.conditions import BEST_ANSWER_CONTEXT, CLOSED_BOOK, MISCONCEPTION_CONTEXT
from grabrag.data.datasets import Passage

TRUTHFULQA_CONTEXTS = (BEST_ANSWER_CONTEXT, MISCONCEPTION_CONTEXT, CLOSED_BOOK)
"""The context files of the probe's dataset, the clean one first."""
MISCONCEPTION = "misconception"
BEST_ANSWER = "best_answer"


def _passage(text: str, role: str, counter: TokenCounter) -> dict[str, Any]:
    # the same content-addressed id as a corpus passage
    return {**Passage("", text).as_dict(), "role": role, "tokens": counter.count(text)}


def truthfulqa_contexts(
    questions: Sequence[dict[str, Any]], seed: int, counter: TokenCounter, max_tokens: int
) -> dict[str, list[dict[str, Any]]]:
    """The rows of each probe context (:data:`TRUTHFULQA_CONTEXTS`), one per question in each.
    A row's ``answers`` are the question's true answers; the probe scores answers against
    the true and the false ones (:mod:`grabrag.scoring.truthfulness`)."""
    rows: dict[str, list[dict[str, Any]]] = {c: [] for c in TRUTHFULQA_CONTEXTS}
    for index, question in enumerate(questions):
        base = {"qid": question["qid"], "question": question["question"]}
        base["answers"] = question["true_answers"]
        passages = {
            BEST_ANSWER_CONTEXT: [_passage(question["best_answer"], BEST_ANSWER, counter)],
            MISCONCEPTION_CONTEXT: [_passage(question["false_answers"][0], MISCONCEPTION, counter)],
            CLOSED_BOOK: [],
        }
        for condition, shown in passages.items():
            keep = {p["role"]: [p["text"]] for p in shown}
            rows[condition].append(
                build_context_row(index, base, condition, shown, seed, counter, max_tokens, keep)
            )
    return rows
