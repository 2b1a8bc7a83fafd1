"""Writing a built table: CSV + Markdown + LaTeX with the policies as printed, a tidy
numeric CSV beside them (:mod:`grabrag.report.tabular`), and the note on batched decoding.

The CSV keeps the same formatted cells, so the three files show one table. A table named
after one of the paper's has the paper's columns and no others; what the paper gives in a
caption (the questions behind each rate, say) goes into the table's note (``with_note``),
which follows the caption. What each table is and reads is declared in its family's module
(:mod:`grabrag.report.specs`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from grabrag.core import registry
from grabrag.report.tabular import Table
from grabrag.report.tabular import write_table as _write_table


def display_policies(table: Table) -> Table:
    """Policy codes as printed (the registry's ``printed``): EVID_CB becomes "EVID+CB" in
    policy columns and headers."""
    printed = {name: p.printed for name, p in registry.policies().items() if p.printed}
    return table.renamed(printed, printed)


def write_table(table: Table, stem: str | Path, caption: str) -> list[Path]:
    """CSV + Markdown + LaTeX + HTML of one table as printed (EVID_CB as "EVID+CB"; the note
    after the caption) and its numbers in ``<stem>.tidy.csv`` (policy codes as the
    decision files and metrics name them); returns the five paths."""
    return _write_table(display_policies(table), stem, caption, tidy=table)


def decoding_note(decoding: Mapping[str, Mapping[str, Any]]) -> str:
    """The sentence that says a table's model calls were decoded several at a time: a
    GGUF's ``batch`` above 1 (batched decoding in one llama.cpp context) or a served
    model's ``concurrency`` above 1 (calls in flight together, batched by the serving
    engine); empty when every model decoded one call at a time. ``decoding``: per model,
    :meth:`grabrag.pipeline.run.Run.decoding`."""
    batched = {m: d for m, d in decoding.items() if d["side_by_side"] > 1}
    if not batched:
        return ""
    listed = ", ".join(
        f"{model} {'concurrency' if d['served'] else 'batch'} {d['side_by_side']}"
        for model, d in sorted(batched.items())
    )
    if all(d["audited"] for d in batched.values()):
        measured = "table reask_agreement gives how often they did"
    else:
        measured = "the re-ask audit (config reask_audit) measures how often"
    return (
        f"Model calls decoded several at a time ({listed}); near ties can decode "
        f"differently than one call at a time ({measured})."
    )


def served_note(served: Mapping[str, Mapping[str, str]]) -> str:
    """The sentence that says which models were called through an OpenAI-compatible
    server instead of run in-process; empty when none was."""
    if not served:
        return ""
    listed = "; ".join(
        f"{model}: {spec['model']} at {urlsplit(spec['base_url']).netloc} "
        f"(constraint {spec['constraint']})"
        for model, spec in sorted(served.items())
    )
    return f"Served models (OpenAI-compatible endpoint, not llama.cpp in the job): {listed}."
