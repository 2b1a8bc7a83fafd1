"""The paired context conditions (GRAB-RAG section 3.2).

For question i (its 0-based position in the sampled list) every condition shuffles with
a fresh ``random.Random(seed + i)``, so each condition is reproducible on its own and a
new condition (QC, QX) never changes the existing ones.

* Q100: n_passages gold passages; with fewer golds they are reused in turn to fill.
* Q50: n_gold_q50 gold slots (reused in turn when short) + hard negatives.
* Q0: n_passages hard negatives.
* Qclosed: no passages.

The context is capped at ``max_context_tokens`` tokens of the given tokenizer by
water-filling: when the passages are too long together, the longest are cut to a common
length L (the largest L that fits), so short passages stay whole. A cut passage keeps its
first L tokens, except a passage that carries the condition's answer (a gold passage's
alias; in QC/QX the planted replacement too): when its first L tokens lose that span, it
keeps the L-token window centred on the span's first occurrence instead (ours: the paper
states only the 1,500-token cap), so Q100 and Q50 stay supportive however often one long
gold passage is reused.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grabrag.core.conditions import CLOSED_BOOK, RETRIEVED
from grabrag.core.errors import DataError
from grabrag.core.text import contains_alias

PAIRED_CONDITIONS = (*RETRIEVED, CLOSED_BOOK)
"""The conditions this stage builds (QC and QX come from the swaps)."""
GOLD = "gold"
HARD_NEGATIVE = "hard_negative"


@dataclass
class TokenCounter:
    """Counts tokens and cuts text to a token budget with a Hugging Face fast tokenizer."""

    tokenizer: Any

    def count(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"])

    def offsets(self, text: str) -> list[tuple[int, int]]:
        """Each token's (start, end) character span in ``text``."""
        encoded = self.tokenizer(
            text, add_special_tokens=False, return_offsets_mapping=True, verbose=False
        )
        return [tuple(span) for span in encoded["offset_mapping"]]

    def truncate(self, text: str, n_tokens: int) -> str:
        offsets = self.offsets(text)
        if len(offsets) <= n_tokens:
            return text
        if n_tokens <= 0:
            return ""
        return text[: offsets[n_tokens - 1][1]].rstrip()


class _RawFastTokenizer:
    """The `tokenizers` library's Tokenizer behind the call signature TokenCounter uses.

    A Hugging Face fast tokenizer is this Tokenizer plus Python around it; loading it
    directly skips importing transformers (and torch), about 7 s per context job on 2
    cores. A plain call of the transformers wrapper neither truncates nor pads, so
    neither does this (tokenizer.json may set both for the encoder's own inputs).
    """

    def __init__(self, path: Path) -> None:
        from tokenizers import Tokenizer

        self.tokenizer = Tokenizer.from_file(str(path))
        self.tokenizer.no_truncation()
        self.tokenizer.no_padding()

    def __call__(
        self,
        text: str,
        add_special_tokens: bool = True,
        return_offsets_mapping: bool = False,
        verbose: bool = False,
    ) -> dict[str, list[Any]]:
        encoding = self.tokenizer.encode(text, add_special_tokens=add_special_tokens)
        out: dict[str, list[Any]] = {"input_ids": encoding.ids}
        if return_offsets_mapping:
            out["offset_mapping"] = encoding.offsets
        return out


def load_token_counter(tokenizer_dir: str) -> TokenCounter:
    """The tokenizer of a model folder: its tokenizer.json through the `tokenizers` library
    when there is one (the same tokens and offsets as the transformers fast tokenizer; a
    test compares both on real passages), else transformers' AutoTokenizer."""
    path = Path(tokenizer_dir) / "tokenizer.json"
    if path.is_file():
        return TokenCounter(_RawFastTokenizer(path))
    from transformers import AutoTokenizer

    return TokenCounter(AutoTokenizer.from_pretrained(tokenizer_dir, local_files_only=True))


def render_passage(position: int, passage: dict[str, Any]) -> str:
    header = f"[{position}] {passage['title']}".rstrip()
    return f"{header}\n{passage['text']}"


def render_context(passages: Sequence[dict[str, Any]]) -> str:
    """The {context} string of the prompt: numbered passages separated by blank lines."""
    return "\n\n".join(render_passage(k, p) for k, p in enumerate(passages, start=1))


def water_fill(lengths: Sequence[int], budget: int) -> int | None:
    """Largest per-passage cap L with sum(min(len, L)) <= budget; None when all fit."""
    if sum(lengths) <= budget:
        return None
    low, high = 0, max(lengths)
    while low < high:
        mid = (low + high + 1) // 2
        if sum(min(n, mid) for n in lengths) <= budget:
            low = mid
        else:
            high = mid - 1
    return low


def _answer_window(
    text: str, offsets: Sequence[tuple[int, int]], n_tokens: int, targets: Sequence[str]
) -> tuple[int, int] | None:
    """Token window [start, start + n_tokens) of ``text`` centred on the first occurrence of
    any of ``targets`` (on word boundaries, after SQuAD normalisation); None when no target
    occurs or its span alone is longer than ``n_tokens``.

    Whether a prefix or suffix holds a target is monotone in its length, so two binary
    searches find the occurrence's last token (the shortest prefix holding it) and its
    first token (the shortest span ending there that still holds it)."""
    n = len(offsets)
    if not targets or not contains_alias(text, targets):
        return None
    low, high = 0, n - 1
    while low < high:  # smallest end with a target in text[: offsets[end][1]]
        mid = (low + high) // 2
        if contains_alias(text[: offsets[mid][1]], targets):
            high = mid
        else:
            low = mid + 1
    end = low
    low, high = 0, end
    while low < high:  # largest start with a target in text[offsets[start][0] : end]
        mid = (low + high + 1) // 2
        if contains_alias(text[offsets[mid][0] : offsets[end][1]], targets):
            low = mid
        else:
            high = mid - 1
    span = end - low + 1
    if span > n_tokens:
        return None
    start = min(max(low - (n_tokens - span) // 2, 0), n - n_tokens)
    return start, start + n_tokens


def cut_passage(
    text: str, counter: TokenCounter, n_tokens: int, targets: Sequence[str] = ()
) -> tuple[str, int]:
    """``text`` cut to ``n_tokens`` tokens and the token it now starts at: its first
    ``n_tokens`` tokens, or, when those lose every one of ``targets`` that the whole text
    holds, the window centred on the first target (:func:`_answer_window`)."""
    head = counter.truncate(text, n_tokens)
    if not targets or contains_alias(head, targets) or n_tokens <= 0:
        return head, 0
    offsets = counter.offsets(text)
    window = _answer_window(text, offsets, n_tokens, targets)
    if window is None:
        return head, 0
    start, stop = window
    kept = text[offsets[start][0] : offsets[stop - 1][1]].strip()
    # A prefix that ends inside a word can look like a match ("Paris" in "Parisian"):
    # keep the window only when it holds a target on word boundaries.
    return (kept, start) if contains_alias(kept, targets) else (head, 0)


def cap_passages(
    passages: list[dict[str, Any]],
    counter: TokenCounter,
    max_tokens: int,
    keep: Mapping[str, Sequence[str]] | None = None,
) -> list[dict[str, Any]]:
    """Cut passage texts so the passages' tokens together fit ``max_tokens``.

    ``keep`` maps a passage role to the strings a passage of that role must not lose to
    the cut (:func:`cut_passage`); a passage cut to a later window records the token it
    starts at as ``window_start_token``."""
    keep = keep or {}
    lengths = [counter.count(p["text"]) for p in passages]
    cap = water_fill(lengths, max_tokens)
    out = []
    for passage, length in zip(passages, lengths, strict=True):
        passage = dict(passage)
        if cap is not None and length > cap:
            targets = keep.get(passage.get("role", ""), ())
            passage["text"], start = cut_passage(passage["text"], counter, cap, targets)
            passage["truncated_from_tokens"] = length
            if start:
                passage["window_start_token"] = start
            length = counter.count(passage["text"])
        passage["tokens"] = length
        out.append(passage)
    return out


def fill_gold(gold: Sequence[dict[str, Any]], n_slots: int) -> list[dict[str, Any]]:
    """Gold passages in turn until ``n_slots`` are filled (reused when there are fewer)."""
    return [dict(gold[k % len(gold)]) for k in range(n_slots)] if gold and n_slots else []


def condition_passages(
    condition: str,
    gold: Sequence[dict[str, Any]],
    hard_negatives: Sequence[dict[str, Any]],
    n_passages: int,
    n_gold_q50: int,
) -> list[dict[str, Any]]:
    """Passages of one condition, before shuffling, each tagged with its role."""
    golds = [{**p, "role": GOLD} for p in gold]
    negatives = [{**p, "role": HARD_NEGATIVE} for p in hard_negatives]
    if condition == "Q100":
        return fill_gold(golds, n_passages)
    if condition == "Q50":
        return fill_gold(golds, n_gold_q50) + negatives[: n_passages - n_gold_q50]
    if condition == "Q0":
        return negatives[:n_passages]
    if condition == CLOSED_BOOK:
        return []
    raise ValueError(f"unknown condition {condition!r}; known: {', '.join(PAIRED_CONDITIONS)}")


def build_context_row(
    index: int,
    question: dict[str, Any],
    condition: str,
    passages: list[dict[str, Any]],
    seed: int,
    counter: TokenCounter,
    max_tokens: int,
    keep: Mapping[str, Sequence[str]] | None = None,
) -> dict[str, Any]:
    """Shuffle with Random(seed + index), cap to the token budget, render the context.

    ``keep``: role -> the strings the cap must not cut out of a passage of that role
    (:func:`cap_passages`); by default a gold passage keeps the question's answers."""
    passages = list(passages)
    random.Random(seed + index).shuffle(passages)
    if keep is None:
        keep = {GOLD: question["answers"]}
    passages = cap_passages(passages, counter, max_tokens, keep) if passages else []
    context = render_context(passages)
    return {
        "qid": question["qid"],
        "index": index,
        "condition": condition,
        "question": question["question"],
        "answers": question["answers"],
        "passages": passages,
        "context": context,
        "context_tokens": sum(p["tokens"] for p in passages),
        "truncated": any("truncated_from_tokens" in p for p in passages),
        # Auditing aid: the cap keeps a gold passage's answer when the answer fits the
        # passage's share of the budget; this says whether it did.
        "answer_in_context": contains_alias(context, question["answers"]),
    }


def build_contexts(
    questions: Sequence[dict[str, Any]],
    retrieval: dict[str, dict[str, Any]],
    corpus: dict[str, dict[str, str]],
    seed: int,
    counter: TokenCounter,
    n_passages: int = 5,
    n_gold_q50: int = 3,
    max_tokens: int = 1500,
    conditions: Sequence[str] = PAIRED_CONDITIONS,
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, Any]]:
    """Rows per condition plus a report.

    Stated rule for short hard-negative lists: a question with fewer than
    ``n_passages`` hard negatives in the whole corpus cannot fill Q0, so it is dropped
    from every condition (keeping all conditions paired on one question set) and
    counted in the report.
    """
    rows: dict[str, list[dict[str, Any]]] = {c: [] for c in conditions}
    dropped: list[str] = []
    truncated = {c: 0 for c in conditions}
    answer_lost = {c: 0 for c in conditions}
    for index, question in enumerate(questions):
        ranked = retrieval.get(question["qid"])
        if ranked is None:
            raise KeyError(f"question {question['qid']} has no retrieval row")
        negatives = [corpus[pid] for pid in ranked["hard_negatives"]]
        if len(negatives) < n_passages:
            dropped.append(question["qid"])
            continue
        for condition in conditions:
            passages = condition_passages(
                condition, question["gold_passages"], negatives, n_passages, n_gold_q50
            )
            row = build_context_row(index, question, condition, passages, seed, counter, max_tokens)
            truncated[condition] += row["truncated"]
            has_gold = any(p["role"] == GOLD for p in row["passages"])
            answer_lost[condition] += row["truncated"] and has_gold and not row["answer_in_context"]
            rows[condition].append(row)
    report = {
        "questions": len(questions),
        "kept": len(questions) - len(dropped),
        "dropped_insufficient_hard_negatives": dropped,
        "truncated_contexts": truncated,
        "truncated_contexts_without_answer": answer_lost,
        "max_context_tokens": max_tokens,
        "n_passages": n_passages,
        "n_gold_q50": n_gold_q50,
    }
    return rows, report


# Several construction seeds pooled as one sample (grabrag.evaluation.seeds) offset a
# seed's question positions by this much times its place among the seeds, so that the
# pooled order keeps each seed's questions together and in their own order.
SEED_STRIDE = 10**9


def sample_position(row: Mapping[str, Any], source: str | Path = "context rows") -> int:
    """A context row's question's place in its build's sample (its ``index``, 0 first),
    whether the row is a build's own or pooled over the seeds."""
    index = row.get("index")
    if not isinstance(index, int):
        raise DataError(
            f"{source}: qid {row.get('qid')} has no integer 'index' (the question's place in "
            "the sample); rebuild the contexts"
        )
    return index % SEED_STRIDE


def first_questions(
    rows: Sequence[Mapping[str, Any]], n: int, source: str | Path = "context rows"
) -> list[Mapping[str, Any]]:
    """The rows (of any condition) whose question is among the first ``n`` of the sample,
    in their order: what a method run on a dataset's first questions only reads
    (``evidential.n_questions``, ``cdd.n_questions``)."""
    return [row for row in rows if sample_position(row, source) < n]
