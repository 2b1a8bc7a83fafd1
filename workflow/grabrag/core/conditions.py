"""The context conditions, declared once.

Every stage names a condition by its code: the context rows, the generation and
decision files, the metrics and the tables. What each condition is, whether a model
should answer under it and whether it is one of the paper's four lives here only;
the modules and the config check read these names.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Condition:
    name: str
    should_abstain: bool  # the context does not support one definitive answer
    in_paper: bool  # one of GRAB-RAG's four; the pooled ``all`` metrics pool these only
    description: str


CONDITIONS = (
    Condition("Q100", False, True, "the gold passage among retrieved ones"),
    Condition("Q50", False, True, "the gold passage among more distractors"),
    Condition("Q0", True, True, "hard negatives only: the answer is missing"),
    Condition("QC", True, True, "the gold passage with its answer swapped: misleading"),
    # The gold passage and its swapped twin: the sources disagree, so a single
    # definitive answer is a failure.
    Condition("QX", True, False, "the gold passage and its swapped twin: conflicting"),
)
"""Every condition a prompt and a policy run on, in the order tables and figures list
them (``generation.conditions`` chooses among them)."""

BY_NAME = {c.name: c for c in CONDITIONS}
NAMES = tuple(BY_NAME)
SHOULD_ANSWER = tuple(c.name for c in CONDITIONS if not c.should_abstain)
SHOULD_ABSTAIN = tuple(c.name for c in CONDITIONS if c.should_abstain)
PAPER = tuple(c.name for c in CONDITIONS if c.in_paper)
RETRIEVED = ("Q100", "Q50", "Q0")
"""The conditions built from retrieval alone (QC and QX are built from swaps)."""
CLOSED_BOOK = "Qclosed"
"""The question without passages: the condition of the closed-book pass P3 and P4 read."""
CLOSED_BOOK_PROMPT = "CB"
"""The closed-book pass's prompt, and the key its rows arrive under in a policy's inputs."""
SEED_COMPARED = ("Q0", "QC")
"""The conditions Table 13 compares under two construction seeds."""

# CDD's TruthfulQA misconception-injection probe (grabrag.contexts.truthfulqa): its own
# dataset and conditions, scored by its own table, outside the GRAB-RAG metrics.
TRUTHFULQA = "truthfulqa"
"""The probe's dataset: BIG-bench's TruthfulQA questions (``truthfulqa_probe``)."""
BEST_ANSWER_CONTEXT = "TQB"
"""The probe's clean condition: the question's best answer as the only passage."""
MISCONCEPTION_CONTEXT = "TQM"
"""The probe's injected condition: the question's most common misconception (its first
false answer) as the only passage."""
TRUTHFULQA_CONDITIONS = (BEST_ANSWER_CONTEXT, MISCONCEPTION_CONTEXT)
"""The probe's two paired conditions, clean first."""
