"""The re-ask audit's table (:mod:`grabrag.generation.reask`): per model, how many
re-asked calls came back with the same decision, answer, confidence and output."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from grabrag.report.tabular import Number, Table


def _percent(agree: int, calls: int) -> Number:
    share = 100.0 * agree / calls if calls else None
    return Number("" if share is None else f"{share:.1f}", share, n=calls)


def agreement_table(
    counts: Mapping[str, Mapping[str, int]],
    own: Mapping[str, int],
    reasked_at: Mapping[str, int],
    served: Sequence[str] = (),
) -> Table:
    """One row per model: its calls re-asked (every cell pooled), and the share whose
    decision (answer or abstain), then decision and answer, then also confidence, then the
    whole output, came back the same. ``counts``: :func:`grabrag.generation.reask.compare_rows`
    summed per model."""
    rows = []
    for model, count in counts.items():
        kind = "concurrency" if model in served else "batch"
        calls = count["calls"]
        rows.append(
            {
                "Model": model,
                "Run at": f"{kind} {own[model]}",
                "Re-asked at": f"{kind} {reasked_at[model]}",
                "Calls": calls,
                "Same decision (%)": _percent(count["decision"], calls),
                "Same answer (%)": _percent(count["answer"], calls),
                "Same confidence (%)": _percent(count["confidence"], calls),
                "Same output (%)": _percent(count["raw"], calls),
            }
        )
    note = (
        "Our determinism audit, not a paper's quantity: each generation cell's first "
        "questions sent again (P0, P1, P2; never from the response cache) at another "
        "concurrency, compared with the cell's own calls. Answer and confidence count as "
        "the same only where the decision is."
    )
    return Table(rows, note=note)
