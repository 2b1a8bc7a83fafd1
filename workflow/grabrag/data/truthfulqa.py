"""TruthfulQA for CDD's misconception-injection probe: each question with its category, its
best answer, its true answers and its false answers. The first false answer is the
question's most common misconception, the one the probe injects as the retrieved passage.

Two sources, one format each (:data:`FORMATS`):

- ``hub_generation``: the Hugging Face hub's ``truthfulqa/truthful_qa``, config
  ``generation``, split ``validation``: TruthfulQA's 817 questions, exported by the asset
  registry as JSONL rows ``{type, category, question, best_answer, correct_answers,
  incorrect_answers, source}``;
- ``bigbench``: BIG-bench's ``truthful_qa/questions.json`` (299 questions,
  ``{"examples": [{"Question", "Category", "Best answer", "True answers", "False
  answers"}]}``), a member of the bigbench 1.0.0 sdist, which PyPI no longer serves (a
  copy you have, declared with ``path`` and ``sha256``).

Question schema (one JSON object per line)::

    {"qid", "index", "question", "category", "best_answer",
     "true_answers": [...], "false_answers": [...]}
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from grabrag.core.errors import DataError
from grabrag.core.io import read_json, read_jsonl
from grabrag.data.datasets import MAX_MALFORMED_FRACTION, _dedupe, _need

BIGBENCH, HUB_GENERATION = "bigbench", "hub_generation"
QUESTIONS_IN = {BIGBENCH: 299, HUB_GENERATION: 817}
"""The questions of each source: BIG-bench's truthful_qa/questions.json (bigbench 1.0.0),
TruthfulQA's generation set on the hub."""
QUESTIONS_IN_FILE = QUESTIONS_IN[BIGBENCH]
MISCONCEPTIONS = "Misconceptions"
"""The category the probe lists first (with its sub-categories, "Misconceptions: Health" ...)."""


@dataclass(frozen=True)
class TruthfulQAQuestion:
    qid: str
    index: int  # the row's position in the file: qids stay stable when N or the seed change
    question: str
    category: str
    best_answer: str
    true_answers: list[str]
    false_answers: list[str]

    @property
    def misconception(self) -> str:
        """The most common misconception: TruthfulQA lists it as the first false answer."""
        return self.false_answers[0]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class TruthfulQAFile:
    questions: list[TruthfulQAQuestion]
    malformed: list[str]  # rows skipped, each "where: why"


def _answers(row: dict[str, Any], key: str, where: str) -> list[str]:
    values = _need(row, key, where, list)
    if not all(isinstance(v, str) for v in values):
        raise DataError(f"{where}: '{key}' should be a list of strings")
    answers = _dedupe(values)
    if not answers:
        raise DataError(f"{where}: '{key}' is empty")
    return answers


# Each source's keys for (question, category, best answer, true answers, false answers).
KEYS = {
    BIGBENCH: ("Question", "Category", "Best answer", "True answers", "False answers"),
    HUB_GENERATION: (
        "question",
        "category",
        "best_answer",
        "correct_answers",
        "incorrect_answers",
    ),
}


def _question(row: Any, index: int, where: str, keys: Sequence[str]) -> TruthfulQAQuestion:
    if not isinstance(row, dict):
        raise DataError(f"{where}: expected a JSON object")
    question_key, category_key, best_key, true_key, false_key = keys
    question = _need(row, question_key, where, str).strip()
    best = _need(row, best_key, where, str).strip()
    if not question or not best:
        raise DataError(f"{where}: empty '{question_key}' or '{best_key}'")
    true_answers = _answers(row, true_key, where)
    return TruthfulQAQuestion(
        qid=f"tqa-{index:03d}",
        index=index,
        question=question,
        category=_need(row, category_key, where, str).strip() or "(none)",
        best_answer=best,
        # the best answer is a true answer even where the file does not list it again
        true_answers=_dedupe([best, *true_answers]),
        false_answers=_answers(row, false_key, where),
    )


def adapt_bigbench_truthful_qa(path: Path) -> TruthfulQAFile:
    """Read BIG-bench's ``truthful_qa/questions.json`` (``{"examples": [{"Question",
    "Category", "Best answer", "True answers", "False answers"}, ...]}``). A row without
    false answers (no misconception to inject), without true answers or otherwise
    malformed is counted and skipped; more than MAX_MALFORMED_FRACTION of them means the
    wrong file, an error."""
    data = read_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("examples"), list):
        raise DataError(f"{path}: not BIG-bench's truthful_qa/questions.json (no 'examples' list)")
    return _read_rows(
        path,
        data["examples"],
        lambda i: f"{path}: examples[{i}]",
        KEYS[BIGBENCH],
        "BIG-bench's truthful_qa/questions.json",
    )


def adapt_hub_truthful_qa(path: Path) -> TruthfulQAFile:
    """Read the hub's TruthfulQA generation split as the asset registry exports it (JSONL
    rows ``{question, category, best_answer, correct_answers, incorrect_answers, ...}``);
    malformed rows as in :func:`adapt_bigbench_truthful_qa`."""
    return _read_rows(
        path,
        read_jsonl(path),
        lambda i: f"{path}: row {i + 1}",
        KEYS[HUB_GENERATION],
        "the hub's truthfulqa/truthful_qa generation split",
    )


def _read_rows(
    path: Path, rows: Sequence[Any], where: Any, keys: Sequence[str], what: str
) -> TruthfulQAFile:
    questions: list[TruthfulQAQuestion] = []
    malformed: list[str] = []
    for index, row in enumerate(rows):
        try:
            questions.append(_question(row, index, where(index), keys))
        except DataError as error:
            malformed.append(str(error))
    total = len(questions) + len(malformed)
    if not questions or len(malformed) > MAX_MALFORMED_FRACTION * total:
        shown = "\n  ".join(malformed[:5])
        raise DataError(
            f"{path}: {len(malformed)} of {total} rows are malformed (more than "
            f"{MAX_MALFORMED_FRACTION:.0%}), so this is probably not {what} or the file is "
            f"corrupt (truthfulqa_probe.format says which source it is). First "
            f"problems:\n  {shown}"
        )
    return TruthfulQAFile(questions, malformed)


FORMATS = {BIGBENCH: adapt_bigbench_truthful_qa, HUB_GENERATION: adapt_hub_truthful_qa}
"""The reader of each TruthfulQA source (``truthfulqa_probe.format``)."""


def sample_questions(
    questions: Sequence[TruthfulQAQuestion], n_questions: int | None, seed: int
) -> list[TruthfulQAQuestion]:
    """``n_questions`` questions drawn with Random(seed) (None: all), in file order."""
    if n_questions is None or n_questions >= len(questions):
        return list(questions)
    chosen = random.Random(seed).sample(range(len(questions)), n_questions)
    return [questions[i] for i in sorted(chosen)]


def category_group(category: str) -> str:
    """The top-level category: "Misconceptions: Health" -> "Misconceptions"."""
    return category.split(":", 1)[0].strip()
