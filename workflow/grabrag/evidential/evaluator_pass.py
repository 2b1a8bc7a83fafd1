"""The EvidentialRAG evaluator pass in the workflow: k evaluator calls per question, back
to back in fold order with the growing candidate-claim inventory, resumable from a
checkpoint, and the report of one evaluations file.

The LLM is passed in as a ``complete(messages, grammar, max_tokens)`` callable
(:meth:`grabrag.generation.generator.LlamaGenerator.complete`), so everything here is
testable with a stub and loads no model itself. The call accounting is in
:mod:`grabrag.evidential.generator_pass`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from grabrag.core.io import append_checkpoint_row, read_checkpoint_rows
from grabrag.core.progress import Progress
from grabrag.core.text import normalize_answer
from grabrag.evidential.evaluator import (
    EVALUATOR_GRAMMAR,
    Evaluation,
    evaluator_messages,
    fold_groups,
    parse_evaluation,
)
from grabrag.evidential.stored import stored_evaluation
from grabrag.generation.batching import Batcher, run_in_groups
from grabrag.generation.generator import provenance

# complete(messages, grammar, max_tokens) -> {raw, finish_reason, prompt_tokens,
# completion_tokens, seconds}; grammar None = the paper's answer grammar.
Complete = Callable[..., dict[str, Any]]


def evaluator_passage(passage: Mapping[str, Any]) -> str:
    """The passage as the evaluator sees it: title line (when there is one) and text."""
    title = str(passage.get("title") or "").strip()
    return f"{title}\n{passage['text']}" if title else str(passage["text"])


def gives_evidence(evaluation: Evaluation) -> bool:
    """A judgement that puts a claim into the frame (as
    :func:`grabrag.evidential.claims.question_masses`)."""
    return evaluation.evidence > 0 and evaluation.stance != "irrelevant"


def add_to_inventory(inventory: list[str], evaluation: Evaluation) -> None:
    """The candidate-claim inventory the next passage's evaluator sees: the values already
    extracted, with evidence, from earlier passages of the question (no repeats after
    SQuAD normalisation)."""
    if not gives_evidence(evaluation):
        return
    seen = {normalize_answer(v) for v in inventory}
    if normalize_answer(evaluation.value) not in seen:
        inventory.append(evaluation.value.strip())


def evaluate_question(
    complete: Complete, row: Mapping[str, Any], max_tokens: int
) -> dict[str, Any]:
    """Evaluate every passage of one context row in fold order
    (:func:`grabrag.evidential.evaluator.fold_order`; k calls back to back; the inventory
    grows as claims are found), so a permuted context gives the same calls. The members of a
    fold group (:func:`grabrag.evidential.evaluator.fold_groups`) all see the inventory from
    before the group, so their evaluations do not depend on their order either."""
    inventory: list[str] = []
    entries = []
    passages = row["passages"]
    rank = 0
    for group, members in enumerate(fold_groups(row["question"], passages), start=1):
        shown = list(inventory)
        found = []
        for i in members:
            rank += 1
            entry, evaluation = _evaluate_passage(
                complete, row["question"], passages[i], shown, max_tokens
            )
            entries.append({"position": i + 1, "fold_rank": rank, "fold_group": group, **entry})
            found.append(evaluation)
        for evaluation in found:
            add_to_inventory(inventory, evaluation)
    return {
        "qid": row["qid"],
        "index": row["index"],
        "condition": row["condition"],
        "evaluations": entries,
        "evaluator_seconds": round(sum(e["seconds"] for e in entries), 3),
        "evaluator_passes": len(entries),
    }


def _evaluate_passage(
    complete: Complete,
    question: str,
    passage: Mapping[str, Any],
    inventory: Sequence[str],
    max_tokens: int,
) -> tuple[dict[str, Any], Evaluation]:
    """One evaluator call: its stored entry (without the position and fold fields) and
    its parse."""
    messages = evaluator_messages(question, evaluator_passage(passage), inventory)
    result = complete(messages, EVALUATOR_GRAMMAR, max_tokens)
    evaluation = parse_evaluation(result["raw"], result["finish_reason"])
    entry = {
        "pid": passage.get("pid"),
        "role": passage.get("role"),
        "claim": evaluation.claim,
        "value": evaluation.value,
        "stance": evaluation.stance,
        "rationale": evaluation.rationale,
        "evidence": evaluation.evidence,
        "status": evaluation.status,
        "inventory": list(inventory),
        "raw": result["raw"],
        "finish_reason": result["finish_reason"],
        "prompt_tokens": result["prompt_tokens"],
        "completion_tokens": result["completion_tokens"],
        "seconds": result["seconds"],
        **provenance(result),
    }
    return entry, evaluation


def preflight_messages(
    row: Mapping[str, Any], max_tokens: int
) -> Iterable[tuple[str, list[dict[str, str]]]]:
    """(label, messages) for the evaluator preflight: each passage with the largest
    inventory it can meet (every earlier passage naming a value of max_tokens tokens)."""
    # Distinct strings: the prompt lists each candidate once.
    filler = [f"{'x ' * max_tokens}{j}" for j in range(max(len(row["passages"]) - 1, 0))]
    for position, passage in enumerate(row["passages"], start=1):
        yield (
            f"question {row['qid']} passage {position} (with a full claim inventory)",
            evaluator_messages(row["question"], evaluator_passage(passage), filler),
        )


def run_evaluations(
    complete: Complete,
    reset: Callable[[], None],
    context_rows: Sequence[Mapping[str, Any]],
    checkpoint: Path,
    max_tokens: int,
    progress: Progress | None = None,
    batcher: Batcher[Any, Any] | None = None,
) -> list[dict[str, Any]]:
    """Evaluation rows for every question, resuming from ``checkpoint`` (one line per
    finished question, so a killed job redoes at most the question in flight). The KV
    cache is reset before each question, so a resumed run computes what an uninterrupted
    one does. The checkpoint is left in place; the caller removes it once the output is
    written. With a ``batcher`` (the model's batch > 1) the questions of a group run side
    by side, each keeping its passage order and inventory; a group not finished when the
    job was killed is redone whole."""
    batch = batcher.size if batcher else 1
    done = read_checkpoint_rows(checkpoint, keep=lambda row: row.get("batch", 1) == batch)
    checkpoint.parent.mkdir(parents=True, exist_ok=True)

    def evaluate(row: Mapping[str, Any]) -> dict[str, Any]:
        stepping = _stepping(complete, progress, row["qid"])
        return {**evaluate_question(stepping, row, max_tokens), "batch": batch}

    def skipped(rows: Sequence[Mapping[str, Any]]) -> None:
        if progress:
            for row in rows:
                k = len(row["passages"])
                progress.skip(f"{row['qid']} passages 1-{k}", n=k)

    with checkpoint.open("a", encoding="utf-8") as handle:

        def finished(rows: Sequence[Mapping[str, Any]], outs: list[dict[str, Any]]) -> None:
            for row, out in zip(rows, outs, strict=True):
                done[(row["qid"],)] = out
                append_checkpoint_row(handle, out)

        if batcher is not None:
            run_in_groups(
                batcher, context_rows, evaluate, lambda r: (r["qid"],) in done, finished, skipped
            )
        for row in context_rows if batcher is None else ():
            if (row["qid"],) in done:
                skipped([row])
                continue
            reset()
            finished([row], [evaluate(row)])
    return [done[(row["qid"],)] for row in context_rows]


def _stepping(complete: Complete, progress: Progress | None, qid: str) -> Complete:
    if progress is None:
        return complete
    calls = 0

    def wrapped(*args: Any, **kwargs: Any) -> dict[str, Any]:
        nonlocal calls
        result = complete(*args, **kwargs)
        calls += 1
        progress.step(f"{qid} passage {calls}")
        return result

    return wrapped


def evaluation_report(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Counts of one evaluations file: statuses, stances, passes, seconds."""
    entries = [e for r in rows for e in r["evaluations"]]
    return {
        "questions": len(rows),
        "evaluator_passes": len(entries),
        "status": dict(Counter(e["status"] for e in entries)),
        "stance": dict(Counter(e["stance"] or "(failed)" for e in entries)),
        "with_evidence": sum(stored_evaluation(e).evidence > 0 for e in entries),
        "finish_reasons": dict(Counter(str(e["finish_reason"]) for e in entries)),
        "completion_tokens": sum(e["completion_tokens"] for e in entries),
        "seconds": round(sum(e["seconds"] for e in entries), 3),
    }
