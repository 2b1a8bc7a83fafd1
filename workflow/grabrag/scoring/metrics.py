"""Answer scoring with SQuAD normalisation (the metric every stage shares), and the
abstention, selection and confidence metrics of GRAB-RAG section 3.5 and Appendix A."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from grabrag.core.conditions import SHOULD_ABSTAIN, SHOULD_ANSWER
from grabrag.core.text import normalize_answer


def exact_match(prediction: str | None, answers: Sequence[str]) -> float:
    """1.0 when the normalised prediction equals a normalised alias; abstention (None) scores 0."""
    if prediction is None:
        return 0.0
    pred = normalize_answer(prediction)
    return float(any(pred == normalize_answer(a) for a in answers))


def _f1(pred_tokens: list[str], gold_tokens: list[str]) -> float:
    common = Counter(pred_tokens) & Counter(gold_tokens)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision = same / len(pred_tokens)
    recall = same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def token_f1(prediction: str | None, answers: Sequence[str]) -> float:
    """Maximum SQuAD token F1 over aliases; abstention (None) scores 0."""
    if prediction is None:
        return 0.0
    pred_tokens = normalize_answer(prediction).split()
    best = 0.0
    for answer in answers:
        gold_tokens = normalize_answer(answer).split()
        if not pred_tokens and not gold_tokens:
            best = max(best, 1.0)
        elif pred_tokens and gold_tokens:
            best = max(best, _f1(pred_tokens, gold_tokens))
    return best


def answer_rate(rows: Sequence[dict], qids: set[str] | None = None) -> tuple[int, float]:
    """(n, share of rows that answered) over ``rows``, or over those whose qid is in ``qids``.

    On a should-abstain condition (Q0, QC) this is HwSA: any answer counts, even a
    correct one. A row whose output could not be parsed did not answer.
    """
    chosen = [r for r in rows if qids is None or r["qid"] in qids]
    if not chosen:
        return 0, float("nan")
    return len(chosen), sum(r.get("decision") == "answer" for r in chosen) / len(chosen)


# =====================================================================================
# Abstention and confidence metrics (GRAB-RAG section 3.5, Appendix A)
# =====================================================================================
#
# Conventions shared by every function below (and by grabrag.evaluation.evaluate, which computes
# the same numbers vectorised for the bootstrap):
#
# * A decision row is {"qid", "decision", "answer", "confidence", ...} as written by
#   grabrag.policies.paper. decision is "answer", "abstain", or None for an output that could
#   not be parsed.
# * An unparseable row (decision None) is neither an answer nor an abstention: it does
#   not count as answered (Ans, HwSA), does not count as abstained (FAC counts
#   1[d = abstain] literally, Eq. 2), scores 0 EM and 0 F1, and is left out of AURC and
#   ECE (it has no confidence; inventing one would enter the calibration metrics as a
#   real score). The parse_failed share of each cell is reported on its own.
# * Zero-size cases return a NaN :class:`Value` whose ``reason`` says why, never 0.

# Which conditions should be answered and which abstained on: grabrag.core.conditions.
ANSWER, ABSTAIN = "answer", "abstain"
CONFIDENCE_SCALE = 100.0

# QC answer categories (section 3.5, Table 3, Table 9).
OVERRIDE, ECHO, HALLUCINATION = "override", "echo", "hallucination"
QC_CATEGORIES = (ECHO, OVERRIDE, HALLUCINATION)


class Value(float):
    """A metric value: a ``float`` that also carries ``n`` (how many rows or questions it
    was computed over) and ``reason`` (why it is NaN; None when it is defined).

    It behaves as a plain float everywhere (arithmetic, comparisons, ``math.isnan``,
    ``json.dumps``); ``.value`` gives the bare float.
    """

    __slots__ = ("n", "reason")

    def __new__(cls, value: float, n: int, reason: str | None = None) -> Value:
        self = super().__new__(cls, value)
        self.n = int(n)
        self.reason = reason
        return self

    @classmethod
    def undefined(cls, reason: str, n: int = 0) -> Value:
        """NaN over ``n`` units, with the reason it is undefined."""
        return cls(float("nan"), n, reason)

    @property
    def value(self) -> float:
        return float(self)

    def __repr__(self) -> str:
        extra = f", reason={self.reason!r}" if self.reason else ""
        return f"Value({float(self)!r}, n={self.n}{extra})"

    def __reduce__(self) -> tuple:
        return (Value, (float(self), self.n, self.reason))


def _ratio(numerator: float, denominator: int, reason: str) -> Value:
    if denominator == 0:
        return Value.undefined(reason)
    return Value(numerator / denominator, denominator)


# --- row-level scoring ---------------------------------------------------------------


def answered(row: Mapping[str, Any]) -> bool:
    return row.get("decision") == ANSWER


def abstained(row: Mapping[str, Any]) -> bool:
    return row.get("decision") == ABSTAIN


def parse_failed(row: Mapping[str, Any]) -> bool:
    """Neither an answer nor an abstention (the policies' ``parse_failed`` rows)."""
    return row.get("decision") not in (ANSWER, ABSTAIN)


def row_em(row: Mapping[str, Any], answers: Sequence[str]) -> float:
    """EM of a decision row; an abstention or an unparseable row scores 0."""
    return exact_match(row.get("answer"), answers) if answered(row) else 0.0


def row_f1(row: Mapping[str, Any], answers: Sequence[str]) -> float:
    """Token F1 of a decision row; an abstention or an unparseable row scores 0."""
    return token_f1(row.get("answer"), answers) if answered(row) else 0.0


def row_correct(row: Mapping[str, Any], answers: Sequence[str], condition: str) -> int | None:
    """Correct behaviour for AURC and ECE (Appendix A): answering correctly (EM) at
    Q100/Q50, abstaining at Q0/QC/QX. None for a row left out of AURC/ECE: unparseable, or
    without a numeric confidence."""
    if parse_failed(row) or row.get("confidence") is None:
        return None
    if condition in SHOULD_ANSWER:
        return int(row_em(row, answers) == 1.0)
    if condition in SHOULD_ABSTAIN:
        return int(abstained(row))
    raise ValueError(
        f"unknown condition {condition!r}; expected one of "
        f"{', '.join(SHOULD_ANSWER + SHOULD_ABSTAIN)}"
    )


def _contains(text: str, targets: Iterable[str]) -> bool:
    """Normalised word-boundary containment (as grabrag.core.text.contains_alias)."""
    haystack = f" {normalize_answer(text)} "
    return any((needle := normalize_answer(t)) and f" {needle} " in haystack for t in targets if t)


def _matches(text: str, targets: Iterable[str]) -> bool:
    """Normalised match: equal after SQuAD normalisation (EM) to one of ``targets``."""
    answer = normalize_answer(text)
    return bool(answer) and any(answer == normalize_answer(t) for t in targets if t)


def classify_qc_answer(
    answer: str | None, gold: Sequence[str], planted: Sequence[str], lenient: bool = False
) -> str:
    """Category of an answered QC row (section 3.5): ``override``, ``echo`` or
    ``hallucination``.

    The paper's rule (default): the answer *matches* a target when it equals it after
    SQuAD normalisation (lowercase, no punctuation, no articles): a correct override
    matches a gold alias, an echo matches the planted replacement (the QC row's
    ``replacement`` or ``replacement_entity``), anything else is a hallucination.

    ``lenient=True`` is the containment split reported beside it (the ``*_lenient``
    metrics): a target matches when it occurs in the answer on word boundaries, so
    "in 1949" echoes the planted "1949" and "Miriam Margolyes (actress)" echoes "Miriam
    Margolyes", but "Margolyes" alone does not (the answer must hold the whole target).

    Both: gold first (correct override), then planted (echo), as the paper orders them;
    an empty answer is a hallucination.
    """
    text = answer or ""
    match = _contains if lenient else _matches
    if match(text, gold):
        return OVERRIDE
    if match(text, planted):
        return ECHO
    return HALLUCINATION


# --- rates over rows ---------------------------------------------------------------------


def _select(rows: Sequence[Mapping[str, Any]], qids: Iterable[str] | None) -> list:
    if qids is None:
        return list(rows)
    keep = set(qids)
    return [r for r in rows if r["qid"] in keep]


def decision_rate(
    rows: Sequence[Mapping[str, Any]], decision: str | None, qids: Iterable[str] | None = None
) -> Value:
    """Share of ``rows`` (or of those whose qid is in ``qids``) whose decision is
    ``decision`` ("answer", "abstain", or None for unparseable)."""
    chosen = _select(rows, qids)
    if decision is None:
        hits = sum(map(parse_failed, chosen))
    else:
        hits = sum(r.get("decision") == decision for r in chosen)
    return _ratio(hits, len(chosen), "no rows")


def hwsa(rows: Sequence[Mapping[str, Any]], qids: Iterable[str] | None = None) -> Value:
    """HwSA (Eq. 1): answer rate on a should-abstain condition; any answer counts, even a
    correct one at QC. ``qids`` restricts it to a subset (the paired QC-eligible set)."""
    chosen = _select(rows, qids)
    return _ratio(
        sum(map(answered, chosen)), len(chosen), "no should-abstain rows (no QC-eligible questions)"
    )


def audit_hwsa(
    qc_rows: Sequence[Mapping[str, Any]],
    q0_rows: Sequence[Mapping[str, Any]] | None,
    clean_qids: Iterable[str],
) -> dict[str, Value]:
    """Table 6 (robustness to swap quality): HwSA@QC on every QC row (``qc_all``) and on
    the questions whose swap an auditor rated fluent or borderline (``qc_clean``), their
    ``shift`` (clean - all), and the Q0 -> QC delta (QC - Q0) on both sets, with Q0 taken on
    the same questions (paired): ``q0_all``, ``q0_clean``, ``delta_all``, ``delta_clean``.
    ``q0_rows`` None (no Q0 cell) leaves the Q0 values NaN with a reason."""
    clean = set(clean_qids)
    qc_qids = {r["qid"] for r in qc_rows}
    out = {"qc_all": hwsa(qc_rows), "qc_clean": hwsa(qc_rows, clean)}
    if qc_qids and not qc_qids & clean:
        out["qc_clean"] = Value.undefined("no QC row among the audited fluent/borderline swaps")
    if q0_rows is None:
        missing = Value.undefined("no Q0 cell (Q0 is not among generation.conditions)")
        out["q0_all"] = out["q0_clean"] = missing
    else:
        out["q0_all"] = hwsa(q0_rows, qc_qids)
        out["q0_clean"] = hwsa(q0_rows, qc_qids & clean)
    for name, (a, b) in {
        "shift": ("qc_all", "qc_clean"),
        "delta_all": ("q0_all", "qc_all"),
        "delta_clean": ("q0_clean", "qc_clean"),
    }.items():
        low, high = out[a], out[b]
        if np.isnan(low) or np.isnan(high):
            out[name] = Value.undefined(low.reason or high.reason or "undefined", high.n)
        else:
            out[name] = Value(float(high) - float(low), high.n)
    return out


def capability_set(
    p1_q100_rows: Sequence[Mapping[str, Any]], gold: Mapping[str, Sequence[str]]
) -> set[str]:
    """C_{P1,m}: qids the model answers correctly (EM) at Q100 under P1."""
    return {r["qid"] for r in p1_q100_rows if row_em(r, gold[r["qid"]]) == 1.0}


def fac(rows: Sequence[Mapping[str, Any]], capability: Iterable[str]) -> Value:
    """FAC (Eq. 2): abstention rate on the capability set. Only explicit abstentions
    count; a capable question missing from ``rows`` is not counted (n is the number of
    capable questions with a row)."""
    chosen = _select(rows, capability)
    return _ratio(
        sum(map(abstained, chosen)),
        len(chosen),
        "empty capability set: the model answers no question correctly (EM) at Q100 under P1",
    )


def em_rate(
    rows: Sequence[Mapping[str, Any]],
    gold: Mapping[str, Sequence[str]],
    qids: Iterable[str] | None = None,
) -> Value:
    """Mean EM over rows (abstentions and unparseable rows score 0)."""
    chosen = _select(rows, qids)
    return _ratio(sum(row_em(r, gold[r["qid"]]) for r in chosen), len(chosen), "no rows")


def f1_rate(
    rows: Sequence[Mapping[str, Any]],
    gold: Mapping[str, Sequence[str]],
    qids: Iterable[str] | None = None,
) -> Value:
    """Mean token F1 over rows (abstentions and unparseable rows score 0)."""
    chosen = _select(rows, qids)
    return _ratio(sum(row_f1(r, gold[r["qid"]]) for r in chosen), len(chosen), "no rows")


def planted_strings(qc_context: Mapping[str, Any]) -> list[str]:
    """The planted strings of a QC context row: ``replacement`` and ``replacement_entity``."""
    return [
        s
        for s in dict.fromkeys(
            [qc_context.get("replacement"), qc_context.get("replacement_entity")]
        )
        if s
    ]


def qc_breakdown(
    rows: Sequence[Mapping[str, Any]],
    qc_contexts: Mapping[str, Mapping[str, Any]],
    lenient: bool = False,
) -> dict[str, Value]:
    """Answered QC rows split into echo / override / hallucination (Table 3, Table 9);
    ``lenient``: the containment split (see :func:`classify_qc_answer`).

    Returns ``answered`` (count, n = QC rows), the three counts and the three shares
    (``echo_share`` ...; n = answered rows; NaN with a reason when nothing was answered).
    ``qc_contexts`` maps qid -> QC context row (``answers``, ``replacement``,
    ``replacement_entity``).
    """
    counts = dict.fromkeys(QC_CATEGORIES, 0)
    n_answered = 0
    for row in rows:
        if not answered(row):
            continue
        context = qc_contexts[row["qid"]]
        counts[
            classify_qc_answer(
                row.get("answer"), context["answers"], planted_strings(context), lenient
            )
        ] += 1
        n_answered += 1
    out: dict[str, Value] = {"answered": Value(n_answered, len(rows))}
    for category in QC_CATEGORIES:
        out[category] = Value(counts[category], n_answered)
        out[f"{category}_share"] = _ratio(counts[category], n_answered, "no answered QC rows")
    return out


# --- refusal precision / recall / F1 (EvidentialRAG Eqs. 23-25) -------------------------

NO_REFUSAL = "no abstention in these rows: refusal precision is undefined"
NO_SHOULD_ABSTAIN = "no row of a should-abstain condition (Q0, QC, QX): refusal recall is undefined"


def refusal_f1_from(precision: float, recall: float) -> float:
    """Eq. 25: the harmonic mean; NaN when either is undefined, 0 when both are 0."""
    if np.isnan(precision) or np.isnan(recall):
        return float("nan")
    if precision + recall == 0:
        return 0.0
    return 2 * precision * recall / (precision + recall)


def refusal_scores(
    rows_by_condition: Mapping[str, Sequence[Mapping[str, Any]]],
) -> dict[str, Value]:
    """Refusal precision, recall and F1 pooled over the conditions of ``rows_by_condition``
    (condition -> decision rows).

    R_i = 1 for an abstention (decision "abstain"; a parse failure is not a refusal),
    U_i = 1 for a row of a should-abstain condition (Q0, QC, QX). Precision = sum(R U) /
    sum(R) (n = refusals), recall = sum(R U) / sum(U) (n = should-abstain rows), F1 =
    2PR / (P + R) (n = rows). A zero denominator gives NaN with its reason.
    """
    refused = hits = should = total = 0
    for condition, rows in rows_by_condition.items():
        if condition not in SHOULD_ANSWER + SHOULD_ABSTAIN:
            raise ValueError(f"unknown condition {condition!r}")
        unanswerable = condition in SHOULD_ABSTAIN
        for row in rows:
            r = abstained(row)
            total += 1
            refused += r
            should += unanswerable
            hits += r and unanswerable
    precision = _ratio(hits, refused, NO_REFUSAL)
    recall = _ratio(hits, should, NO_SHOULD_ABSTAIN)
    f1 = refusal_f1_from(float(precision), float(recall))
    reason = precision.reason or recall.reason
    return {
        "refusal_precision": precision,
        "refusal_recall": recall,
        "refusal_f1": Value(f1, total) if not np.isnan(f1) else Value.undefined(reason, total),
    }


# --- AURC and ECE ----------------------------------------------------------------------
#
# Both are computed from per-confidence-level counts: for each distinct confidence
# (ordered from highest to lowest), N = rows at that level and C = correct rows at that
# level. That form is exact (below), and it is linear in the rows, which is what lets the
# bootstrap (grabrag.scoring.bootstrap) compute 10,000 resamples with one matrix product.
#
# AURC ties: rows with equal confidence have no order of their own, and stable input
# order would let the (arbitrary) file order change the metric. We report the EXPECTED
# AURC over a uniformly random order within each tie group. Within a group of m rows
# (c correct) that starts after a rows (A correct), the expected cumulative correct count
# after t of its rows is A + t*c/m, so
#     sum_{t=1..m} E[S_{a+t}]/(a+t) = c + (A - a*c/m) * (H(a+m) - H(a)),
# with H the harmonic numbers, and AURC = 1 - (1/n) * sum over groups. Without ties this
# is exactly Appendix A's formula; it is invariant to row order.


def _harmonic(upto: int) -> np.ndarray:
    """H(0..upto), H(0) = 0."""
    table = np.zeros(int(upto) + 1)
    if upto > 0:
        table[1:] = np.cumsum(1.0 / np.arange(1, int(upto) + 1))
    return table


def aurc_from_levels(n_at: np.ndarray, correct_at: np.ndarray) -> np.ndarray:
    """Tie-averaged AURC from counts per confidence level, levels along the last axis in
    DESCENDING confidence. Leading axes are independent (e.g. bootstrap resamples).
    Counts are float arrays of integer values. NaN where there are no rows.

    With cumulative counts a + N (rows) and A + C (correct) through a group, the group's
    term c + (A - a*c/m)(H(a+m) - H(a)) is c + (cumC - cumN * C/N) * (H(cumN) - H(cumN - N)).
    """
    n_at = np.asarray(n_at)
    correct_at = np.asarray(correct_at)
    if n_at.dtype.kind != "f":
        n_at = n_at.astype(float)
    if correct_at.dtype.kind != "f":
        correct_at = correct_at.astype(float)
    cum_n = np.cumsum(n_at, axis=-1)
    cum_c = np.cumsum(correct_at, axis=-1)
    if cum_n.shape[-1] == 0:
        return np.full(cum_n.shape[:-1], np.nan)
    total = cum_n[..., -1]
    hi = np.rint(cum_n).astype(np.intp)
    lo = hi - np.rint(n_at).astype(np.intp)
    harmonic = _harmonic(int(hi.max(initial=0))).astype(cum_n.dtype)
    spread = harmonic[hi]
    spread -= harmonic[lo]
    share = correct_at / np.maximum(n_at, 1)  # a level with no rows has no correct rows
    lead = cum_c - cum_n * share
    terms = cum_c[..., -1] + np.einsum("...l,...l->...", lead, spread)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, 1.0 - terms / total, np.nan)


def ece_bin_index(confidence: np.ndarray, n_bins: int) -> np.ndarray:
    """Bin of each 0-100 confidence among ``n_bins`` equal-width bins of [0, 1].

    Bins are left-closed, [k/M, (k+1)/M), so a value on an inner edge goes to the
    upper bin (0.3 -> [0.3, 0.4)); 1.0 goes to the last bin, [(M-1)/M, 1]. The index is
    floor(conf * M / 100) computed on the 0-100 scale, so integer confidences land on
    edges exactly (no 0.7 * 10 = 6.999... rounding).
    """
    confidence = np.asarray(confidence, dtype=float)
    return np.minimum(np.floor(confidence * n_bins / CONFIDENCE_SCALE), n_bins - 1).astype(np.int64)


def ece_from_levels(
    levels: np.ndarray, n_at: np.ndarray, correct_at: np.ndarray, n_bins: int = 10
) -> np.ndarray:
    """Bin-midpoint ECE from counts per confidence level (levels on the 0-100 scale, in
    any order, along the last axis):  sum_m |sum_{i in B_m} (y_i - mid_m)| / n.
    NaN where there are no rows."""
    levels = np.asarray(levels, dtype=float)
    n_at = np.asarray(n_at, dtype=float) if np.asarray(n_at).dtype.kind != "f" else n_at
    correct_at = (
        np.asarray(correct_at, dtype=float)
        if np.asarray(correct_at).dtype.kind != "f"
        else correct_at
    )
    total = n_at.sum(axis=-1)
    if levels.size == 0:
        return np.full(total.shape, np.nan)
    bins = ece_bin_index(levels, n_bins)
    order = np.argsort(bins, kind="stable")
    if np.any(order != np.arange(len(bins))) and np.any(order != np.arange(len(bins))[::-1]):
        n_at, correct_at, bins = n_at[..., order], correct_at[..., order], bins[order]
    # Levels of one bin are now contiguous: sum each run.
    starts = np.flatnonzero(np.r_[True, bins[1:] != bins[:-1]])
    mids = ((bins[starts] + 0.5) / n_bins).astype(n_at.dtype)
    in_bin = np.add.reduceat(n_at, starts, axis=-1)
    correct_in_bin = np.add.reduceat(correct_at, starts, axis=-1)
    gap = np.abs(correct_in_bin - in_bin * mids).sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, gap / total, np.nan)


def _check_scores(
    confidence: Sequence[float], correct: Sequence[int | bool]
) -> tuple[np.ndarray, np.ndarray]:
    conf = np.asarray(confidence, dtype=float).reshape(-1)
    y = np.asarray(correct, dtype=float).reshape(-1)
    if conf.shape != y.shape:
        raise ValueError(f"confidence has {conf.size} values but correct has {y.size}")
    if conf.size and (not np.all(np.isfinite(conf)) or conf.min() < 0 or conf.max() > 100):
        raise ValueError("confidence must be finite and on the 0-100 scale")
    if y.size and not np.all((y == 0) | (y == 1)):
        raise ValueError("correct must be 0/1 (or bool)")
    return conf, y


def confidence_levels(
    confidence: Sequence[float], correct: Sequence[int | bool]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(levels in descending order, rows per level, correct rows per level)."""
    conf, y = _check_scores(confidence, correct)
    neg, inverse = np.unique(-conf, return_inverse=True)
    n_levels = len(neg)
    return (
        -neg,
        np.bincount(inverse, minlength=n_levels).astype(float),
        np.bincount(inverse, weights=y, minlength=n_levels),
    )


def aurc(
    confidence: Sequence[float], correct: Sequence[int | bool], *, ties: str = "average"
) -> Value:
    """AURC (Appendix A): rows ranked by confidence (0-100) descending,
    (1/n) sum_k (1 - (1/k) sum_{j<=k} y_sigma(j)).

    ``ties="average"`` (default): the expected AURC over a random order within tie groups
    (see the note above; independent of row order). ``ties="input"``: stable sort, equal
    confidences keep their input order (for comparison only). No rows gives NaN.
    """
    conf, y = _check_scores(confidence, correct)
    if conf.size == 0:
        return Value.undefined("no evaluated rows (none with a parsed decision and confidence)")
    if ties == "input":
        ranked = y[np.argsort(-conf, kind="stable")]
        k = np.arange(1, len(ranked) + 1)
        return Value(float(np.mean(1.0 - np.cumsum(ranked) / k)), conf.size)
    if ties != "average":
        raise ValueError(f"ties must be 'average' or 'input', not {ties!r}")
    _, n_at, correct_at = confidence_levels(conf, y)
    return Value(float(aurc_from_levels(n_at, correct_at)), conf.size)


def ece(confidence: Sequence[float], correct: Sequence[int | bool], n_bins: int = 10) -> Value:
    """ECE (Appendix A), bin-midpoint form: confidence rescaled from 0-100 to [0, 1],
    ``n_bins`` equal-width bins (see :func:`ece_bin_index` for edges),
    sum_m |B_m|/n * |acc(B_m) - mid(B_m)|; empty bins contribute 0. No rows gives NaN.
    This is GRAB-RAG's ECE (metric ``ece``; ``ece_15`` is the same form with 15 bins).
    EvidentialRAG's ECE (Eq. 26, the bin's mean confidence) is :func:`ece_mean`."""
    if n_bins < 1:
        raise ValueError("n_bins must be at least 1")
    conf, y = _check_scores(confidence, correct)
    if conf.size == 0:
        return Value.undefined("no evaluated rows (none with a parsed decision and confidence)")
    levels, n_at, correct_at = confidence_levels(conf, y)
    return Value(float(ece_from_levels(levels, n_at, correct_at, n_bins)), conf.size)


def ece_mean_from_bins(
    n_at: np.ndarray, correct_at: np.ndarray, confidence_at: np.ndarray
) -> np.ndarray:
    """Guo et al.'s ECE from per-bin sums (bins along the last axis; leading axes are
    independent, e.g. bootstrap resamples): rows, correct rows and the sum of the rows'
    confidences on the [0, 1] scale in each bin. With acc(B) = C/N and conf(B) = S/N,
    sum_b N/n * |C/N - S/N| = sum_b |C - S| / n (an empty bin adds 0). NaN without rows."""
    n_at = np.asarray(n_at, dtype=float)
    gap = np.abs(np.asarray(correct_at, dtype=float) - np.asarray(confidence_at, dtype=float))
    total = n_at.sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, gap.sum(axis=-1) / total, np.nan)


def ece_bin_sums(
    confidence: Sequence[float], correct: Sequence[int | bool], n_bins: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rows, correct rows, summed [0, 1] confidence) in each of ``n_bins`` equal-width
    bins (edges as :func:`ece_bin_index`); the input of :func:`ece_mean_from_bins`."""
    conf, y = _check_scores(confidence, correct)
    bins = ece_bin_index(conf, n_bins)
    return (
        np.bincount(bins, minlength=n_bins).astype(float),
        np.bincount(bins, weights=y, minlength=n_bins),
        np.bincount(bins, weights=conf / CONFIDENCE_SCALE, minlength=n_bins),
    )


def ece_mean(
    confidences: Sequence[float], correct: Sequence[int | bool], n_bins: int = 15
) -> Value:
    """Expected calibration error as Guo et al. (2017) and EvidentialRAG Eq. 26 define it:
    ``n_bins`` equal-width bins of [0, 1], each compared at the MEAN confidence of its
    rows (not its midpoint, unlike GRAB-RAG's :func:`ece`):
    sum_b |B_b|/n * |acc(B_b) - conf(B_b)|.

    ``confidences`` on the 0-100 scale, ``correct`` 0/1; returns a fraction in [0, 1]
    (NaN with a reason without rows). Bin edges as :func:`ece_bin_index`. For
    EvidentialRAG the confidence of a row is the fused singleton mass of its selected
    answer (Eq. 27) and ``correct`` says whether that answer is right.
    """
    if n_bins < 1:
        raise ValueError("n_bins must be at least 1")
    conf, y = _check_scores(confidences, correct)
    if conf.size == 0:
        return Value.undefined("no evaluated rows (none with a confidence)")
    return Value(float(ece_mean_from_bins(*ece_bin_sums(conf, y, n_bins))), conf.size)


def selected_answer_score(
    row: Mapping[str, Any], answers: Sequence[str]
) -> tuple[float, int] | None:
    """(confidence 0-100, correct 0/1) of one decision row for :func:`ece_mean`: the
    confidence in the row's selected answer and whether that answer is right (EM).

    EvidentialRAG rows carry ``fused_confidence`` (Eq. 27: 100 x the largest fused
    singleton mass) and ``selected_claim`` (that claim; None without any claim), for every
    route: a routed abstention still has a selected answer and its mass. Other rows
    (naive RAG, P1) use their own confidence and answer: an abstention has no selected
    answer, so it is not correct. None for a row without a confidence (unparseable)."""
    if "fused_confidence" in row:
        claim = row.get("selected_claim")
        return float(row["fused_confidence"]), int(bool(claim) and exact_match(claim, answers) == 1)
    if parse_failed(row) or row.get("confidence") is None:
        return None
    return float(row["confidence"]), int(row_em(row, answers) == 1.0)


def risk_coverage(
    confidence: Sequence[float], correct: Sequence[int | bool]
) -> tuple[np.ndarray, np.ndarray]:
    """The risk-coverage curve whose mean is :func:`aurc`: coverage k/n and expected risk
    1 - E[S_k]/k at every k = 1..n (ties averaged as in :func:`aurc`)."""
    levels, n_at, correct_at = confidence_levels(confidence, correct)
    if n_at.size == 0:
        return np.zeros(0), np.zeros(0)
    group = np.repeat(np.arange(len(levels)), n_at.astype(np.int64))
    before = (np.cumsum(n_at) - n_at)[group]
    k = np.arange(1, len(group) + 1)
    expected = (np.cumsum(correct_at) - correct_at)[group] + (k - before) * (correct_at / n_at)[
        group
    ]
    return k / len(group), 1.0 - expected / k


def reliability_bins(
    confidence: Sequence[float], correct: Sequence[int | bool], n_bins: int = 10
) -> list[dict[str, float]]:
    """Per-bin rows for a reliability diagram: {bin, low, high, mid, n, accuracy,
    mean_confidence} on the [0, 1] scale; accuracy and mean_confidence are NaN in an
    empty bin. The bins are :func:`ece`'s."""
    conf, y = _check_scores(confidence, correct)
    bins = ece_bin_index(conf, n_bins)
    out = []
    for b in range(n_bins):
        mask = bins == b
        count = int(mask.sum())
        out.append(
            {
                "bin": b,
                "low": b / n_bins,
                "high": (b + 1) / n_bins,
                "mid": (b + 0.5) / n_bins,
                "n": count,
                "accuracy": float(y[mask].mean()) if count else float("nan"),
                "mean_confidence": float(conf[mask].mean() / CONFIDENCE_SCALE)
                if count
                else float("nan"),
            }
        )
    return out


def confidence_and_correct(
    rows: Sequence[Mapping[str, Any]], gold: Mapping[str, Sequence[str]], condition: str
) -> tuple[list[float], list[int]]:
    """The (confidence, correct) pairs AURC/ECE use for one cell; unparseable rows and
    rows without a confidence are left out."""
    conf: list[float] = []
    correct: list[int] = []
    for row in rows:
        y = row_correct(row, gold[row["qid"]], condition)
        if y is not None:
            conf.append(float(row["confidence"]))
            correct.append(y)
    return conf, correct
