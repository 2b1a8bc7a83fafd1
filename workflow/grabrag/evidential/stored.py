"""The EvidentialRAG policies' names and the evaluator's stored rows read back, shared by
the generator pass, the sweep tables and the policies' decisions.

Stored files (``results/evidential/<model>/<dataset>/<condition>/``):

* ``evaluations.jsonl``: one row per question: ``qid, index, condition, evaluations``
  (one entry per passage, in fold order (:func:`grabrag.evidential.evaluator.fold_order`):
  ``position`` (in the context), ``fold_rank`` (1 = folded first), ``pid, role, claim,
  value, stance, rationale, evidence, status, raw, finish_reason, prompt_tokens,
  completion_tokens, seconds``), ``evaluator_seconds`` and ``evaluator_passes``
  (:func:`grabrag.evidential.evaluator_pass.evaluate_question`).
* ``EVID.jsonl`` / ``EVID_CB.jsonl``: one row per question
  (:func:`grabrag.evidential.generator_pass.evidential_row`).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

from grabrag.core.errors import DataError
from grabrag.core.parsing import PARSE_FAILED
from grabrag.evidential.claims import closed_book_evaluation
from grabrag.evidential.evaluator import Evaluation

EVID, EVID_CB = "EVID", "EVID_CB"
VARIANTS = (EVID, EVID_CB)


def folded_evaluations(evaluation_row: Mapping[str, Any]) -> list[Evaluation]:
    """The stored evaluations of one question in fold order (by ``fold_rank``)."""
    entries = evaluation_row["evaluations"]
    if any("fold_rank" not in e for e in entries):
        raise DataError(
            f"qid {evaluation_row.get('qid')}: evaluations without a fold_rank were written "
            "in context order by an older version; rerun evidential_evaluate"
        )
    return [stored_evaluation(e) for e in sorted(entries, key=lambda e: e["fold_rank"])]


def fold_group_sizes(evaluation_row: Mapping[str, Any]) -> list[int]:
    """The sizes of the stored evaluations' fold groups, in fold order (``fold_group``;
    :func:`grabrag.evidential.evaluator.fold_groups`), for
    :func:`grabrag.evidential.fusion.fuse`."""
    entries = sorted(evaluation_row["evaluations"], key=lambda e: e["fold_rank"])
    # An entry without a fold group is a group of its own.
    groups = (e.get("fold_group", f"own {k}") for k, e in enumerate(entries))
    return [len(list(members)) for _, members in itertools.groupby(groups)]


def stored_evaluation(entry: Mapping[str, Any]) -> Evaluation:
    """An :class:`grabrag.evidential.evaluator.Evaluation` back from a stored entry."""
    return Evaluation(
        claim=entry["claim"],
        value=entry["value"],
        stance=entry["stance"],
        rationale=entry["rationale"],
        evidence=float(entry["evidence"]),
        status=entry["status"],
    )


def cb_source(cb_row: Mapping[str, Any] | None) -> Evaluation | None:
    """The closed-book answer as an evidence source (None: no CB answer to use)."""
    if cb_row is None or cb_row.get("parse_status") == PARSE_FAILED:
        return None
    return closed_book_evaluation(
        cb_row.get("answer"), cb_row.get("confidence"), cb_row.get("decision")
    )
