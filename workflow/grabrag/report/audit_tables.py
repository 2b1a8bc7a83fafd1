"""The tables of the QC swaps and their audit: Table 4 (the recogniser's labels), Table 5
(swap examples), Table 6 (HwSA@QC on every swap vs the audited fluent + borderline ones)
and Appendix C's audit quality; with the rows and the CSV of Table 6's numbers that the
audit_hwsa rule writes per audited dataset.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from grabrag.core.errors import DataError
from grabrag.core.outputs import AUDIT_HWSA, AUDIT_RATINGS, SWAP_ROWS
from grabrag.core.registry import PAPER_POLICIES
from grabrag.evaluation.evaluate import policy_sort_key
from grabrag.report.specs import Sources, TableSpec
from grabrag.report.table_cells import _mean, _pp, _records, pct, pct_ci
from grabrag.report.tabular import Number, Table, in_order, order_key, rows_csv
from grabrag.scoring.abstention import audit_hwsa

AUDIT_COLUMNS = (
    "dataset",
    "model",
    "policy",
    "n_all",
    "hwsa_qc_all",
    "n_clean",
    "hwsa_qc_clean",
    "shift",
    "hwsa_q0_all",
    "hwsa_q0_clean",
    "delta_all",
    "delta_clean",
    "sign_preserved",
)


def audit_hwsa_rows(
    dataset: str,
    decisions: Mapping[tuple[str, str, str], Sequence[Mapping[str, Any]]],
    ratings: Mapping[str, str],
    qc_qids: Sequence[str],
    audit_file: str | Path = "the audit file",
) -> list[dict[str, Any]]:
    """Table 6's numbers for one dataset, one row per model x policy (tidy; rates as
    fractions): HwSA@QC on every QC-eligible question and on those rated fluent or
    borderline, the shift, and the Q0 -> QC delta on both sets (Q0 paired on the same
    questions), with whether the delta keeps its sign.

    ``decisions`` maps (model, policy, condition) -> decision rows for QC (and Q0 when
    generated). A rated qid that is not QC-eligible here is a DataError: the audit was
    filled for another dataset, seed or sample.
    """
    eligible = set(qc_qids)
    stray = [qid for qid in ratings if qid not in eligible]
    if stray:
        shown = ", ".join(stray[:5]) + (f" and {len(stray) - 5} more" if len(stray) > 5 else "")
        raise DataError(
            f"{audit_file}: {len(stray)} rated qid(s) are not QC-eligible in dataset "
            f"{dataset!r}: {shown}. Fill in this run's qc/{dataset}/audit_sample.csv (the "
            "audit must come from the same dataset and construction seed)"
        )
    clean = [qid for qid, quality in ratings.items() if quality != "broken"]
    rows = []
    qc_cells = {(m, p) for m, p, c in decisions if c == "QC"}
    for model, policy in sorted(qc_cells, key=lambda mp: (order_key("model", mp[0]), mp[1])):
        values = audit_hwsa(
            decisions[(model, policy, "QC")], decisions.get((model, policy, "Q0")), clean
        )
        delta_all, delta_clean = float(values["delta_all"]), float(values["delta_clean"])
        rows.append(
            {
                "dataset": dataset,
                "model": model,
                "policy": policy,
                "n_all": values["qc_all"].n,
                "hwsa_qc_all": float(values["qc_all"]),
                "n_clean": values["qc_clean"].n,
                "hwsa_qc_clean": float(values["qc_clean"]),
                "shift": float(values["shift"]),
                "hwsa_q0_all": float(values["q0_all"]),
                "hwsa_q0_clean": float(values["q0_clean"]),
                "delta_all": delta_all,
                "delta_clean": delta_clean,
                # Signs compare as -1 / 0 / +1: a zero delta is not "the same sign" as +x.
                "sign_preserved": (
                    None
                    if math.isnan(delta_all) or math.isnan(delta_clean)
                    else bool(np.sign(delta_all) == np.sign(delta_clean))
                ),
            }
        )
    rows.sort(key=lambda r: (r["model"], policy_sort_key(r["policy"])))
    return rows


def write_audit_hwsa(path: str | Path, rows: Sequence[Mapping[str, Any]]) -> None:
    """:func:`audit_hwsa_rows` as the CSV Table 6 reads (one per audited dataset)."""
    rows_csv(path, rows, AUDIT_COLUMNS)


TABLE6_COLUMNS = (
    "Model",
    "Dataset",
    "Policy",
    "n (all)",
    "HwSA@QC (all)",
    "n (F+B)",
    "HwSA@QC (F+B)",
    "Shift (pp)",
)


def _flag(value: Any) -> bool:
    """A True/False cell as read from a CSV (a bool, or its text)."""
    return value if isinstance(value, bool) else str(value).strip().lower() == "true"


def table_audit(audit: pl.DataFrame) -> Table:
    """Table 6 with the paper's columns: HwSA@QC on the full QC set vs the audited
    fluent + borderline subset (F+B) per model, dataset and policy, and the shift in pp;
    then the macro-average row and a last row counting the cells whose Q0 -> QC delta
    keeps its sign on F+B (the paper's "All 30 delta signs preserved."). The deltas per
    cell are in each dataset's audit_hwsa.csv."""
    out = []
    for row in _records(audit):
        out.append(
            {
                "Model": row.model,
                "Dataset": row.dataset,
                "Policy": row.policy,
                "n (all)": int(row.n_all),
                "HwSA@QC (all)": pct(row.hwsa_qc_all),
                "n (F+B)": int(row.n_clean),
                "HwSA@QC (F+B)": pct(row.hwsa_qc_clean),
                "Shift (pp)": _pp(row.shift),
            }
        )
    # The macro row pools the paper's policies (its "30 cells" are 3 models x 2 datasets
    # x P0-P4), so adding EVID or the CDD family does not move it; all policies otherwise.
    paper = audit.filter(pl.col("policy").is_in(PAPER_POLICIES))
    pooled = paper if len(paper) else audit
    label = "Macro avg (P0-P4)" if len(paper) and len(paper) < len(audit) else "Macro avg"
    if len(pooled):
        blank = dict.fromkeys(TABLE6_COLUMNS, "")
        out.append(
            {
                **blank,
                "Model": label,
                "HwSA@QC (all)": pct(_mean(pooled["hwsa_qc_all"].to_list())),
                "HwSA@QC (F+B)": pct(_mean(pooled["hwsa_qc_clean"].to_list())),
                "Shift (pp)": _pp(_mean(pooled["shift"].to_list())),
            }
        )
        known = [_flag(v) for v in pooled["sign_preserved"].to_list() if v is not None]
        kept, cells = sum(known), len(known)
        kept_text = f"All {cells}" if kept == cells else f"{kept} of {cells}"
        out.append({**blank, "Model": f"{kept_text} delta signs preserved."})
    return Table(out, list(TABLE6_COLUMNS))


QUALITY_ORDER = ("fluent", "borderline", "broken")


def table_ner_labels(backend: str) -> Table:
    """Table 4: the recogniser's labels and the internal entity types they map to (GLiNER's
    eight prompting labels in the paper; spaCy's OntoNotes labels in the embedded run)."""
    from grabrag.contexts.ner import GLINER_LABELS, SPACY_LABELS

    labels = GLINER_LABELS if backend == "gliner" else SPACY_LABELS
    return Table(
        [{"Backend": backend, "NER label": k, "Internal type": v} for k, v in labels.items()]
    )


def table_swap_examples(
    records: Mapping[str, Sequence[Mapping[str, Any]]],
    ratings: Mapping[str, Mapping[str, str]] | None = None,
    per_group: int = 2,
    width: int = 80,
) -> Table:
    """Table 5: QC swap examples from ``swaps.jsonl`` (dataset -> records), the first
    ``per_group`` accepted swaps (by question position) of each group: the audit's quality
    tiers (fluent, borderline, broken) for a dataset with a filled audit (``ratings``:
    dataset -> qid -> quality), else the swap tiers (1, 1b, 2, 3, 4). The excerpts show
    ``width`` characters around the span in the original and the QC passage."""
    from grabrag.contexts.audit import excerpt
    from grabrag.contexts.swap_tiers import TIERS

    rows = []
    for dataset in in_order("dataset", records):
        accepted = sorted(
            (r for r in records[dataset] if r.get("status") == "accepted"),
            key=lambda r: r["index"],
        )
        rated = (ratings or {}).get(dataset) or {}
        if rated:
            groups = [(q, [r for r in accepted if rated.get(r["qid"]) == q]) for q in QUALITY_ORDER]
        else:
            groups = [(f"tier {t}", [r for r in accepted if r["tier"] == t]) for t in TIERS]
        for label, members in groups:
            for r in members[:per_group]:
                rows.append(
                    {
                        "Dataset": dataset,
                        "Group": label,
                        "Tier": r["tier"],
                        "Swap": f"{r.get('source_type', r['entity_type'])} -> {r['entity_type']}",
                        "Question": r["question"],
                        "Gold": " | ".join(r["answers"]),
                        "Original": excerpt(r["passage"]["text"], r["original_span"], width),
                        "QC": excerpt(r["modified_passage"]["text"], r["replacement"], width),
                    }
                )
    columns = ["Dataset", "Group", "Tier", "Swap", "Question", "Gold", "Original", "QC"]
    return Table(rows, columns)


def _bootstrap_share(flags: np.ndarray, n_resamples: int, level: float, rng) -> tuple:
    """Share of true flags with a percentile bootstrap CI over the rows."""
    if not len(flags):
        return float("nan"), float("nan"), float("nan")
    draws = rng.integers(0, len(flags), size=(n_resamples, len(flags)))
    shares = flags[draws].mean(axis=1)
    tail = (1 - level) / 2
    return (
        float(flags.mean()),
        float(np.quantile(shares, tail)),
        float(np.quantile(shares, 1 - tail)),
    )


def table_audit_quality(
    audits: Mapping[str, pl.DataFrame],
    n_resamples: int = 10_000,
    level: float = 0.95,
    seed: int = 42,
) -> Table:
    """Appendix C's audit: the quality-tier distribution per dataset and in total, and the
    broken rate by entity type, each with a percentile bootstrap CI over the rated swaps
    (``audits``: dataset -> the filled audit CSV with ``entity_type`` and ``quality``)."""
    rng = np.random.default_rng(seed)
    # Each rated swap as (entity type, quality), per dataset and pooled.
    frames = [
        [
            (str(kind), str(quality).strip().lower())
            for kind, quality in zip(frame["entity_type"], frame["quality"], strict=True)
        ]
        for _, frame in sorted(audits.items(), key=lambda kv: order_key("dataset", kv[0]))
    ]
    scopes = [(d, f) for d, f in zip(in_order("dataset", audits), frames, strict=True)]
    if len(frames) > 1:
        scopes.append(("Total", [rated for frame in frames for rated in frame]))
    rows = []

    def share_row(section: str, dataset: str, category: str, flags: np.ndarray) -> None:
        share, low, high = _bootstrap_share(flags, n_resamples, level, rng)
        rows.append(
            {
                "Section": section,
                "Dataset": dataset,
                "Category": category,
                "n": int(flags.sum()),
                "of": len(flags),
                "%": pct(share),
                "95% CI": Number(pct_ci(share, low, high).split(" ", 1)[-1], share, low, high),
            }
        )

    for dataset, frame in scopes:
        for quality in QUALITY_ORDER:
            flags = np.array([q == quality for _, q in frame], dtype=float)
            share_row("quality tier", dataset, quality, flags)
    for dataset, frame in scopes:
        for kind in sorted({k for k, _ in frame}):
            flags = np.array([q == "broken" for k, q in frame if k == kind], dtype=float)
            share_row("broken rate by type", dataset, kind, flags)
    columns = ["Section", "Dataset", "Category", "n", "of", "%", "95% CI"]
    return Table(rows, columns)


# --- the tables this module declares (grabrag.report.specs) ---------------------------------


def _ratings(s: Sources) -> dict[str, dict[str, str]]:
    """dataset -> qid -> the audit's quality rating."""
    from grabrag.contexts.audit import read_audit_ratings

    return {cell["dataset"]: read_audit_ratings(path) for cell, path in s.read(AUDIT_RATINGS)}


def _audits(s: Sources) -> dict[str, pl.DataFrame]:
    """The filled audit CSV of each audited dataset, every field as text."""
    return {
        cell["dataset"]: pl.read_csv(path, infer_schema=False, empty_string_is_null=False)
        for cell, path in s.read(AUDIT_RATINGS)
    }


def _audit_quality(s: Sources) -> Table:
    audit = s.setting("audit")
    return table_audit_quality(
        _audits(s),
        audit["bootstrap"]["n_resamples"],
        audit["bootstrap"]["confidence_level"],
        audit["seed"],
    )


TABLES = (
    # Tables 4 and 5: the NER labels and examples of the swaps.
    TableSpec(
        "table4_ner_labels",
        lambda s: table_ner_labels(s.setting("ner_backend")),
        settings=("ner_backend",),
    ),
    TableSpec(
        "table5_swap_examples",
        lambda s: table_swap_examples(
            {cell["dataset"]: rows for cell, rows in s.read(SWAP_ROWS)}, _ratings(s)
        ),
        (SWAP_ROWS, AUDIT_RATINGS),
    ),
    TableSpec(
        "table6_audit",
        lambda s: table_audit(s.read(AUDIT_HWSA)),
        (AUDIT_HWSA,),
        when=lambda f: f.audited,
    ),
    TableSpec("audit_quality", _audit_quality, (AUDIT_RATINGS,), ("audit",), lambda f: f.audited),
)
