"""Abstention policies P0-P4 (GRAB-RAG section 3.4, Appendix B "P3 Decision Logic", Appendix F).

Every policy turns stored rows into one decision row per question::

    {"qid", "index", "condition", "policy", "decision", "answer", "confidence", "rule"}

plus, for P3, ``f1`` (the agreement score, None when the rule table stopped earlier) and,
for P4, ``nli_labels`` (the passage labels, None when a gate stopped earlier). No policy
calls a model: P3 and P4 only read the P1 cell, the closed-book (CB) cell and, for P4,
the NLI file.

* P0, P1, P2 pass their own generation rows through (rule ``generated``).
* P3 applies the Appendix B rule table, in order, first match wins:

  ====================================  ===========  ==========  =================
  condition                             decision     confidence  rule
  ====================================  ===========  ==========  =================
  P1 abstains                           abstain      0           ``p1_abstained``
  CB abstains or CB confidence < cutoff  P1's answer  P1's        ``cb_unreliable``
  F1(P1 answer, CB answer) >= threshold  P1's answer  P1's        ``f1_agree``
  otherwise                             abstain      0           ``f1_conflict``
  ====================================  ===========  ==========  =================

  Ties: a CB confidence equal to the cutoff is not below it (it goes on to the F1
  check); an F1 equal to the threshold agrees. F1 is :func:`grabrag.scoring.metrics.token_f1`,
  the evaluation metric's own normalisation. Token F1 is a ratio of small integers, so
  it is compared with a 1e-9 tolerance: an F1 that is exactly 0.8 on paper but
  0.7999999999999999 in floating point still agrees.
* P4 shares P3's first two gates, then reads the NLI labels of the question's passages
  (:mod:`grabrag.policies.nli`): any ``contradiction`` -> abstain, confidence 0, rule
  ``nli_contradiction``; else P1's answer and confidence, rule ``nli_consistent``.

Failed parses (the generation row has ``parse_status`` "failed" and decision None) are
neither an answer nor an abstention, and are kept that way: the decision row has
decision None, answer None, confidence None and rule ``parse_failed``. Nothing is
invented (no confidence 0 that would enter AURC/ECE as a real score), they count as
"did not answer" in :func:`grabrag.scoring.metrics.answer_rate`, and reports can count them by
their rule. P3 and P4 never answer without P1's answer, so a failed P1 row makes a
``parse_failed`` P3/P4 row too. A failed CB row gives no parametric signal: like an
abstaining CB pass it defers to P1 (P1's answer and confidence), under its own rule
``cb_parse_failed`` so it stays countable. An abstention made by a policy rule has
answer "" (the prompt's "leave the answer empty").

Rows are matched by qid. Every question of the P1 cell needs a CB row (and, for P4, an
NLI row); a missing one is a DataError naming the qids and the kind of file.

* EVID and EVID_CB (EvidentialRAG, :mod:`grabrag.evidential.runs`) read their own rows
  (``results/evidential/.../{EVID,EVID_CB}.jsonl``: the fused state, the route and the
  generator's output). The decision follows the route (the seed's refusal definition):

  ==========================================  ==========  ===========  =======================
  route / generator output                    decision    confidence   rule
  ==========================================  ==========  ===========  =======================
  direct, generator output unparseable        None        None         ``parse_failed``
  direct, generator abstained                 abstain     0            ``generator_abstained``
  direct, generator answered                  its answer  max fused b  ``evidential_direct``
  conflict_aware (tau1 <= U_global < tau2)    abstain     0            ``conflict_aware``
  abstain (U_global >= tau2)                  abstain     0            ``evidential_abstain``
  ==========================================  ==========  ===========  =======================

  The confidence of an answer is Eq. 27 on the 0-100 scale
  (:func:`grabrag.evidential.method.evid_confidence`: 100 x the largest fused singleton mass),
  not the generator's self-reported one. Every EVID row, whatever its route, also
  carries ``fused_confidence`` (Eq. 27) and ``selected_claim`` (the highest-mass claim,
  None without one), which EvidentialRAG's ECE (Eq. 26,
  :func:`grabrag.scoring.metrics.ece_mean`) scores; ``confidence`` keeps GRAB-RAG's convention
  (0 for an abstention) for GRAB-RAG's own AURC/ECE. On the conflict-aware and abstain routes the
  generator was told to abstain, so its output (parsed or not) does not change the
  decision.

* CDD, CDD_ALPHA and the prompt-only baselines CAI, SHAM, REFLECT, FILTER
  (:mod:`grabrag.cdd.runs`): CDD takes its full run's step-5 decision, answer and
  confidence (rule ``cdd_resolved``; ``parse_failed`` when step 5 could not be parsed);
  CDD_ALPHA takes the CDD row for a question its contradiction gate routes (step-1 vs
  parametric answer: the stored model judgement, or the lexical score) and the P1
  generation row otherwise (rule ``gate_bypass``), with
  no new model call; each baseline passes its own generation row through like P0-P2.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from grabrag.cdd import runs as cdd_runs
from grabrag.core import registry as R
from grabrag.core.errors import DataError
from grabrag.evidential.method import ROUTES, evid_confidence, selected_claim
from grabrag.scoring.metrics import token_f1

EVIDENTIAL = ("EVID", "EVID_CB")
# CDD, CDD-alpha and the prompt-only baselines: see grabrag.cdd.runs.
CDD, CDD_ALPHA = cdd_runs.CDD, cdd_runs.CDD_ALPHA
CDD_BASELINES = cdd_runs.BASELINE_POLICIES
SINGLE_PASS = ("P0", "P1", "P2")
CLOSED_BOOK = "CB"
NLI = "NLI"

CONFIDENCE_CUTOFF = 50
F1_THRESHOLD = 0.8
F1_TOLERANCE = 1e-9
# Table 12 (Appendix F): the sweep grid (p3_sweep_grid adds the configured setting).
SWEEP_THRESHOLDS = (0.0, 0.2, 0.4, 0.6, 0.7, 0.8, 0.9, 1.0)
SWEEP_CUTOFFS = (0, 20, 40, 50, 60, 80)


def p3_sweep_grid(threshold: float, cutoff: float) -> dict[str, list[float]]:
    """The P3 sweep's F1 thresholds and confidence cutoffs: the grid plus the configured
    ``threshold`` and ``cutoff`` when it lacks them, so the tables and figure that read the
    sweep at the configured setting always find it."""
    return {
        "thresholds": sorted({*SWEEP_THRESHOLDS, float(threshold)}),
        "cutoffs": sorted({*SWEEP_CUTOFFS, cutoff}),
    }


ANSWER, ABSTAIN = "answer", "abstain"
CONTRADICTION = "contradiction"

# Rules (the ``rule`` column).
GENERATED = "generated"
PARSE_FAILED = "parse_failed"
P1_ABSTAINED = "p1_abstained"
CB_UNRELIABLE = "cb_unreliable"
CB_PARSE_FAILED = "cb_parse_failed"
F1_AGREE = "f1_agree"
F1_CONFLICT = "f1_conflict"
NLI_CONTRADICTION = "nli_contradiction"
NLI_CONSISTENT = "nli_consistent"
EVIDENTIAL_DIRECT = "evidential_direct"
GENERATOR_ABSTAINED = "generator_abstained"
CONFLICT_AWARE = "conflict_aware"
EVIDENTIAL_ABSTAIN = "evidential_abstain"
EVIDENTIAL_RULES = (
    EVIDENTIAL_DIRECT,
    GENERATOR_ABSTAINED,
    PARSE_FAILED,
    CONFLICT_AWARE,
    EVIDENTIAL_ABSTAIN,
)
RULES = (
    GENERATED,
    PARSE_FAILED,
    P1_ABSTAINED,
    CB_UNRELIABLE,
    CB_PARSE_FAILED,
    F1_AGREE,
    F1_CONFLICT,
    NLI_CONTRADICTION,
    NLI_CONSISTENT,
    EVIDENTIAL_DIRECT,
    GENERATOR_ABSTAINED,
    CONFLICT_AWARE,
    EVIDENTIAL_ABSTAIN,
)

_KINDS = {
    "P0": "P0 generation",
    "P1": "P1 generation (context pass)",
    "P2": "P2 generation",
    CLOSED_BOOK: "closed-book (CB) generation",
    NLI: "NLI",
    "EVID": "EVID (EvidentialRAG)",
    "EVID_CB": "EVID_CB (EvidentialRAG + closed-book source)",
}


# --- row checks ------------------------------------------------------------------------


def _failed(row: Mapping[str, Any]) -> bool:
    return row.get("decision") is None or row.get("parse_status") == "failed"


def _check_generation_rows(rows: Sequence[Mapping[str, Any]], kind: str) -> None:
    """Columns and values the policies rely on; a wrong prompt is a wiring mistake."""
    label = _KINDS[kind]
    seen: set[str] = set()
    for position, row in enumerate(rows, start=1):
        for column in ("qid", "decision", "answer", "confidence"):
            if column not in row:
                raise DataError(f"{label} row {position}: column {column!r} is missing")
        qid = row["qid"]
        if qid in seen:
            raise DataError(f"{label} rows: qid {qid} appears more than once")
        seen.add(qid)
        prompt = row.get("prompt")
        if prompt is not None and prompt != kind:
            raise DataError(
                f"{label} rows: qid {qid} comes from prompt {prompt!r}, expected {kind!r}; "
                "the rule was given the wrong generation file"
            )
        decision = row["decision"]
        if decision not in (ANSWER, ABSTAIN, None):
            raise DataError(f"{label} row for qid {qid}: unknown decision {decision!r}")
        if decision is not None and not _failed(row):
            confidence = row["confidence"]
            if isinstance(confidence, bool) or not isinstance(confidence, int | float):
                raise DataError(
                    f"{label} row for qid {qid}: confidence {confidence!r} is not a number"
                )
            if not isinstance(row["answer"], str):
                raise DataError(f"{label} row for qid {qid}: answer {row['answer']!r} is not text")


def _by_qid(
    rows: Sequence[Mapping[str, Any]], kind: str, needed: Iterable[str]
) -> dict[str, Mapping[str, Any]]:
    """Index ``rows`` by qid; every qid in ``needed`` must be there."""
    index: dict[str, Mapping[str, Any]] = {}
    for row in rows:
        if "qid" not in row:
            raise DataError(f"{_KINDS[kind]} rows: a row has no 'qid' column")
        if row["qid"] in index:
            raise DataError(f"{_KINDS[kind]} rows: qid {row['qid']} appears more than once")
        index[row["qid"]] = row
    needed = list(needed)
    missing = [qid for qid in needed if qid not in index]
    if missing:
        shown = ", ".join(missing[:5]) + (", ..." if len(missing) > 5 else "")
        raise DataError(
            f"no {_KINDS[kind]} row for qid {shown} ({len(missing)} of {len(needed)} "
            f"questions); the {_KINDS[kind]} file does not match the P1 cell, rerun the rule "
            "that writes it"
        )
    return index


def _decision_row(
    base: Mapping[str, Any],
    policy: str,
    decision: str | None,
    answer: str | None,
    confidence: float | None,
    rule: str,
    **extra: Any,
) -> dict[str, Any]:
    return {
        "qid": base["qid"],
        "index": base.get("index"),
        "condition": base.get("condition"),
        "policy": policy,
        "decision": decision,
        "answer": answer,
        "confidence": confidence,
        "rule": rule,
        **extra,
    }


def _abstain(base: Mapping[str, Any], policy: str, rule: str, **extra: Any) -> dict[str, Any]:
    return _decision_row(base, policy, ABSTAIN, "", 0, rule, **extra)


def _p1_answer(base: Mapping[str, Any], policy: str, rule: str, **extra: Any) -> dict[str, Any]:
    return _decision_row(base, policy, ANSWER, base["answer"], base["confidence"], rule, **extra)


def _parse_failed(base: Mapping[str, Any], policy: str, **extra: Any) -> dict[str, Any]:
    return _decision_row(base, policy, None, None, None, PARSE_FAILED, **extra)


# --- P0, P1, P2 -----------------------------------------------------------------------


def single_pass_decisions(rows: Sequence[Mapping[str, Any]], policy: str) -> list[dict[str, Any]]:
    """P0, P1 or P2: the generation rows of that prompt, as decision rows."""
    if policy not in SINGLE_PASS:
        raise ValueError(f"{policy!r} is not a single-pass policy ({', '.join(SINGLE_PASS)})")
    _check_generation_rows(rows, policy)
    out = []
    for row in rows:
        if _failed(row):
            out.append(_parse_failed(row, policy))
        else:
            out.append(
                _decision_row(
                    row, policy, row["decision"], row["answer"], row["confidence"], GENERATED
                )
            )
    return out


# --- P3 -------------------------------------------------------------------------------


def _cb_gate(
    p1: Mapping[str, Any], cb: Mapping[str, Any], policy: str, cutoff: float
) -> dict[str, Any] | None:
    """P3 and P4's first two gates; None when the CB pass is confident and answered."""
    if _failed(p1):
        return _parse_failed(p1, policy)
    if p1["decision"] == ABSTAIN:
        return _abstain(p1, policy, P1_ABSTAINED)
    if _failed(cb):
        return _p1_answer(p1, policy, CB_PARSE_FAILED)
    if cb["decision"] == ABSTAIN or cb["confidence"] < cutoff:
        return _p1_answer(p1, policy, CB_UNRELIABLE)
    return None


def agreement_f1(context_answer: str, cb_answer: str) -> float:
    """Token F1 between the two passes' answers (the evaluation metric's normalisation)."""
    return token_f1(context_answer, [cb_answer])


def p3_decision(
    p1: Mapping[str, Any],
    cb: Mapping[str, Any],
    cutoff: float = CONFIDENCE_CUTOFF,
    threshold: float = F1_THRESHOLD,
) -> dict[str, Any]:
    """The Appendix B rule table for one question (P1 row + CB row of the same qid)."""
    gated = _cb_gate(p1, cb, "P3", cutoff)
    if gated is not None:
        return {**gated, "f1": None}
    f1 = agreement_f1(p1["answer"], cb["answer"])
    if f1 >= threshold - F1_TOLERANCE:
        return _p1_answer(p1, "P3", F1_AGREE, f1=f1)
    return _abstain(p1, "P3", F1_CONFLICT, f1=f1)


def p3_decisions(
    p1_rows: Sequence[Mapping[str, Any]],
    cb_rows: Sequence[Mapping[str, Any]],
    cutoff: float = CONFIDENCE_CUTOFF,
    threshold: float = F1_THRESHOLD,
) -> list[dict[str, Any]]:
    """P3 for every question of the P1 cell, in its order."""
    _check_generation_rows(p1_rows, "P1")
    _check_generation_rows(cb_rows, CLOSED_BOOK)
    cb = _by_qid(cb_rows, CLOSED_BOOK, (r["qid"] for r in p1_rows))
    return [p3_decision(row, cb[row["qid"]], cutoff, threshold) for row in p1_rows]


# --- P4 -------------------------------------------------------------------------------


def _check_nli_row(row: Mapping[str, Any], cb: Mapping[str, Any]) -> list[str]:
    qid = row["qid"]
    if row.get("skipped_reason"):
        raise DataError(
            f"NLI row for qid {qid} was skipped ({row['skipped_reason']}) but P4 needs it: "
            "the NLI file was made with a different confidence cutoff or closed-book file; "
            "rerun the NLI rule with P4's cutoff"
        )
    labels = row.get("labels")
    if not isinstance(labels, list):
        raise DataError(f"NLI row for qid {qid}: 'labels' is missing or not a list")
    if "cb_answer" in row and row["cb_answer"] != cb["answer"]:
        raise DataError(
            f"NLI row for qid {qid} was made for the closed-book answer {row['cb_answer']!r}, "
            f"but the CB file now says {cb['answer']!r}; rerun the NLI rule"
        )
    return labels


def p4_decision(
    p1: Mapping[str, Any],
    cb: Mapping[str, Any],
    nli: Mapping[str, Any] | None,
    cutoff: float = CONFIDENCE_CUTOFF,
) -> dict[str, Any]:
    """P4 for one question: P3's first two gates, then any contradicting passage vetoes."""
    gated = _cb_gate(p1, cb, "P4", cutoff)
    if gated is not None:
        return {**gated, "nli_labels": None}
    if nli is None:
        raise DataError(f"no NLI row for qid {p1['qid']}; P4 needs one (rerun the NLI rule)")
    labels = _check_nli_row(nli, cb)
    if CONTRADICTION in labels:
        return _abstain(p1, "P4", NLI_CONTRADICTION, nli_labels=labels)
    return _p1_answer(p1, "P4", NLI_CONSISTENT, nli_labels=labels)


def p4_decisions(
    p1_rows: Sequence[Mapping[str, Any]],
    cb_rows: Sequence[Mapping[str, Any]],
    nli_rows: Sequence[Mapping[str, Any]],
    cutoff: float = CONFIDENCE_CUTOFF,
) -> list[dict[str, Any]]:
    """P4 for every question of the P1 cell; the NLI file must cover every question."""
    _check_generation_rows(p1_rows, "P1")
    _check_generation_rows(cb_rows, CLOSED_BOOK)
    qids = [r["qid"] for r in p1_rows]
    cb = _by_qid(cb_rows, CLOSED_BOOK, qids)
    nli = _by_qid(nli_rows, NLI, qids)
    return [p4_decision(row, cb[row["qid"]], nli[row["qid"]], cutoff) for row in p1_rows]


# --- EVID, EVID_CB --------------------------------------------------------------------


def evidential_decision(row: Mapping[str, Any], policy: str) -> dict[str, Any]:
    """The decision row of one EVID / EVID_CB row (table in the module docstring)."""
    qid = row.get("qid")
    label = _KINDS[policy]
    for column in ("qid", "route", "fused_b", "generator_decision", "generator_answer"):
        if column not in row:
            raise DataError(f"{label} row for qid {qid}: column {column!r} is missing")
    if row.get("policy") not in (None, policy):
        raise DataError(
            f"{label} rows: qid {qid} comes from {row['policy']!r}, expected {policy!r}; "
            "the rule was given the wrong evidential file"
        )
    route = row["route"]
    if route not in ROUTES:
        raise DataError(f"{label} row for qid {qid}: unknown route {route!r}")
    frame = row.get("frame") or []
    extra = {
        "route": route,
        "u_global": row.get("u_global"),
        # Eq. 27 on every route (EvidentialRAG's ECE scores routed abstentions too).
        "fused_confidence": evid_confidence(row["fused_b"]),
        "selected_claim": selected_claim(frame, row["fused_b"]) if frame else None,
    }
    if route == "conflict_aware":
        return _abstain(row, policy, CONFLICT_AWARE, **extra)
    if route == "abstain":
        return _abstain(row, policy, EVIDENTIAL_ABSTAIN, **extra)
    decision = row["generator_decision"]
    if decision is None or row.get("parse_status") == "failed":
        return _parse_failed(row, policy, **extra)
    if decision == ABSTAIN:
        return _abstain(row, policy, GENERATOR_ABSTAINED, **extra)
    if decision != ANSWER or not isinstance(row["generator_answer"], str):
        raise DataError(f"{label} row for qid {qid}: unknown generator decision {decision!r}")
    confidence = evid_confidence(row["fused_b"])
    return _decision_row(
        row, policy, ANSWER, row["generator_answer"], confidence, EVIDENTIAL_DIRECT, **extra
    )


def evidential_decisions(rows: Sequence[Mapping[str, Any]], policy: str) -> list[dict[str, Any]]:
    """EVID or EVID_CB for every question of its evidential file, in its order."""
    if policy not in EVIDENTIAL:
        raise ValueError(f"{policy!r} is not an evidential policy ({', '.join(EVIDENTIAL)})")
    seen: set[str] = set()
    out = []
    for row in rows:
        if row.get("qid") in seen:
            raise DataError(f"{_KINDS[policy]} rows: qid {row['qid']} appears more than once")
        seen.add(row.get("qid"))
        out.append(evidential_decision(row, policy))
    return out


# --- the built-in policies, registered in the order tables and figures list them ---------


def _single_pass(name: str) -> R.Decide:
    return lambda inputs, settings: single_pass_decisions(inputs[name], name)


def _p3(inputs: Mapping[str, Any], settings: Mapping[str, Any]) -> list[dict[str, Any]]:
    cutoff = settings.get("cutoff", CONFIDENCE_CUTOFF)
    threshold = settings.get("threshold", F1_THRESHOLD)
    return p3_decisions(inputs["P1"], inputs[CLOSED_BOOK], cutoff, threshold)


def _p4(inputs: Mapping[str, Any], settings: Mapping[str, Any]) -> list[dict[str, Any]]:
    cutoff = settings.get("cutoff", CONFIDENCE_CUTOFF)
    return p4_decisions(inputs["P1"], inputs[CLOSED_BOOK], inputs[NLI], cutoff)


def _evidential(name: str) -> R.Decide:
    return lambda inputs, settings: evidential_decisions(inputs[name], name)


def _cdd_alpha(inputs: Mapping[str, Any], settings: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``gate``, ``gate_threshold``: the contradiction gate ("model" or "lexical") and the
    lexical gate's threshold (absent or None: grabrag.cdd.method's defaults, the lexical gate)."""
    limit = settings.get("gate_threshold")
    limit = cdd_runs.C.GATE_THRESHOLD if limit is None else limit
    return cdd_runs.cdd_alpha_decisions(
        inputs["P1"], inputs[CDD], limit, settings.get("gate") or cdd_runs.C.LEXICAL
    )


def _baseline(name: str) -> R.Decide:
    return lambda inputs, settings: cdd_runs.baseline_decisions(inputs[name], name)


def _cb_settings(*keys: str):
    names = {"cutoff": "confidence_cutoff", "threshold": "f1_threshold"}
    return lambda config: {key: config["policies"][names[key]] for key in keys}


def _gate_settings(config: Mapping[str, Any]) -> dict[str, Any]:
    return {"gate_threshold": config["cdd"]["gate_threshold"], "gate": config["cdd"]["gate"]}


_P1_CB = {"P1": R.GENERATION, CLOSED_BOOK: R.CLOSED_BOOK}
BUILTIN = (
    R.Policy("P0", _single_pass("P0"), {"P0": R.GENERATION}, "P0 (none)", colour="#4c72b0"),
    R.Policy("P1", _single_pass("P1"), {"P1": R.GENERATION}, "P1 (IDK)", colour="#dd8452"),
    R.Policy("P2", _single_pass("P2"), {"P2": R.GENERATION}, "P2 (CoT)", colour="#55a868"),
    R.Policy(
        "P3",
        _p3,
        _P1_CB,
        "P3 (conflict)",
        colour="#c44e52",
        settings=_cb_settings("cutoff", "threshold"),
    ),
    R.Policy(
        "P4",
        _p4,
        {**_P1_CB, NLI: R.NLI},
        "P4 (NLI)",
        colour="#8172b3",
        settings=_cb_settings("cutoff"),
    ),
    R.Policy(
        "EVID",
        _evidential("EVID"),
        {"EVID": R.EVIDENTIAL},
        title="EVID (EvidentialRAG)",
        colour="#937860",
        scope="evidential",
    ),
    R.Policy(
        "EVID_CB",
        _evidential("EVID_CB"),
        {"EVID_CB": R.EVIDENTIAL},
        "EVID+CB",
        "EVID+CB",
        title="EVID+CB (+ closed-book source)",
        colour="#da8bc3",
        scope="evidential",
    ),
    R.Policy(
        CDD,
        lambda inputs, settings: cdd_runs.cdd_decisions(inputs[CDD]),
        {CDD: R.CDD_TRACES},
        colour="#1b9e77",
        scope="cdd",
        in_policy_tables=False,
    ),
    R.Policy(
        CDD_ALPHA,
        _cdd_alpha,
        {"P1": R.GENERATION, CDD: R.CDD_TRACES},
        "CDD-alpha",
        "CDD-alpha",
        colour="#66a61e",
        settings=_gate_settings,
        scope="cdd",
        in_policy_tables=False,
    ),
    *(
        R.Policy(
            name,
            _baseline(name),
            {name: R.CDD_CELL},
            label,
            colour=colour,
            scope="cdd",
            in_policy_tables=False,
        )
        for name, label, colour in (
            ("CAI", "CAI (conflict-aware)", "#e7298a"),
            ("SHAM", "SHAM (sham CoT)", "#7f7f7f"),
            ("REFLECT", "REFLECT (reflection)", "#e6ab02"),
            ("FILTER", "FILTER (prompt-filtered)", "#17becf"),
        )
    ),
)
for _policy in BUILTIN:
    R.register(_policy)


# --- one entry point for the rules ----------------------------------------------------


def decide(
    policy: str,
    inputs: Mapping[str, Sequence[Mapping[str, Any]]],
    settings: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Decision rows of the registered ``policy`` from ``inputs`` keyed as its
    :attr:`grabrag.core.registry.Policy.inputs`; ``settings`` as its ``settings(config)``
    returns them (absent ones take the defaults)."""
    spec = R.policy(policy)
    missing = [key for key in spec.inputs if key not in inputs]
    if missing:
        raise ValueError(f"policy {policy} needs inputs {', '.join(missing)}")
    return spec.decide(inputs, settings or {})


def with_cell(
    rows: Sequence[Mapping[str, Any]], model: str, dataset: str, condition: str, policy: str
) -> list[dict[str, Any]]:
    """Decision rows led by the cell they belong to (model, dataset, condition, policy),
    so every decision file loads into one frame and filters. A row that names another
    condition or policy is a policy bug, reported as such."""
    out = []
    for row in rows:
        for key, value in (("condition", condition), ("policy", policy)):
            if row.get(key, value) != value:
                raise ValueError(
                    f"policy {policy}: a decision row for question {row.get('qid')!r} says "
                    f"{key} {row[key]!r}, but the cell is {condition}/{policy}; its decide "
                    "function must return the rows of the cell it was given"
                )
        rest = {k: v for k, v in row.items() if k not in ("condition", "policy")}
        out.append(
            {"model": model, "dataset": dataset, "condition": condition, "policy": policy, **rest}
        )
    return out


# --- Table 12 sweep -------------------------------------------------------------------


def p3_sweep_decisions(
    p1_rows: Sequence[Mapping[str, Any]],
    cb_rows: Sequence[Mapping[str, Any]],
    thresholds: Sequence[float] = SWEEP_THRESHOLDS,
    cutoffs: Sequence[float] = SWEEP_CUTOFFS,
) -> dict[tuple[float, float], list[dict[str, Any]]]:
    """P3's decision rows for every (threshold, cutoff), from stored rows only."""
    return {
        (threshold, cutoff): p3_decisions(p1_rows, cb_rows, cutoff=cutoff, threshold=threshold)
        for threshold in thresholds
        for cutoff in cutoffs
    }


def p3_sweep(
    p1_rows: Sequence[Mapping[str, Any]],
    cb_rows: Sequence[Mapping[str, Any]],
    thresholds: Sequence[float] = SWEEP_THRESHOLDS,
    cutoffs: Sequence[float] = SWEEP_CUTOFFS,
    qids: set[str] | None = None,
) -> list[dict[str, Any]]:
    """Answer rate of P3 per (threshold, cutoff): rows {threshold, cutoff, n, answered,
    answer_rate}, thresholds outer, cutoffs inner. ``qids`` restricts the questions
    counted (e.g. a QC-eligible subset). A parse_failed row did not answer; n = 0 gives
    answer_rate NaN."""
    out = []
    for (threshold, cutoff), rows in p3_sweep_decisions(
        p1_rows, cb_rows, thresholds, cutoffs
    ).items():
        chosen = [r for r in rows if qids is None or r["qid"] in qids]
        answered = sum(r["decision"] == ANSWER for r in chosen)
        out.append(
            {
                "threshold": threshold,
                "cutoff": cutoff,
                "n": len(chosen),
                "answered": answered,
                "answer_rate": answered / len(chosen) if chosen else float("nan"),
            }
        )
    return out
