"""Tables as rows, written as CSV, Markdown, LaTeX, an HTML page and a tidy numeric CSV.

A table builder returns a :class:`Table`: its rows (dicts in column order) and a note.
A cell that shows a number is a :class:`Number`: the text the paper's layout prints
("12.5 [8.1, 17.0]") that also remembers the estimate, the CI bounds and n behind it, so
:func:`tidy_frame` can write every table once more as numbers in one long schema
(:data:`TIDY_SCHEMA`), and every ``results/tables/*.tidy.csv`` loads with one call::

    pl.read_csv("results/tables/*.tidy.csv", schema=TIDY_SCHEMA)

The formatted CSV, Markdown and LaTeX print values as the workflow always has (Python's
shortest round-tripping float, tabulate's pipe tables, a booktabs tabular with floats to
six decimals), so the files stay byte-identical across versions of the dataframe library.
"""

from __future__ import annotations

import html
import math
import numbers
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
from tabulate import tabulate

from grabrag.core.builds import derived_base
from grabrag.core.io import atomic_write

NAN = float("nan")

# The order tables and figures list models and datasets in: the config's (the paper
# config's is the paper's: Phi, Llama, Qwen; NQ, HotpotQA). Names the config does not
# list (seed replicates and sensitivity variants, say) follow, sorted.
_ORDER: ContextVar[Mapping[str, Sequence[str]] | None] = ContextVar("grabrag_order", default=None)


def render_rst(template: str, config: Mapping[str, Any]) -> str:
    """A caption file's reStructuredText with its Jinja2 expressions rendered as
    Snakemake's report renders them (``snakemake.config`` is the config): what the report
    shows for it."""
    from types import SimpleNamespace

    import jinja2

    return jinja2.Template(template, undefined=jinja2.StrictUndefined).render(
        snakemake=SimpleNamespace(config=config)
    )


def render_caption(template: str, config: Mapping[str, Any]) -> str:
    """A caption file's text for the Markdown and LaTeX tables: :func:`render_rst` on one
    line ("\\@" in the file keeps reStructuredText from making "HwSA@QC" an e-mail link)."""
    return " ".join(render_rst(template, config).split()).replace("\\@", "@")


@contextmanager
def listed_in(models: Sequence[str], datasets: Sequence[str]) -> Iterator[None]:
    """Within the block, :func:`in_order` lists models and datasets in these orders."""
    token = _ORDER.set({"model": list(models), "dataset": list(datasets)})
    try:
        yield
    finally:
        _ORDER.reset(token)


def order_key(axis: str, name: str) -> tuple[int, str]:
    """Sort key of a model (``axis`` "model") or dataset ("dataset") name: its place in the
    :func:`listed_in` order; unlisted names after the listed ones, by name. A seed replicate
    (``nq_seed7``) or Table 13's variant (``nq_sensitivity43``) sorts right after its base
    dataset."""
    order = list((_ORDER.get() or {}).get(axis, ()))
    if name in order:
        return (2 * order.index(name), "")
    base = derived_base(name)
    if base in order:
        return (2 * order.index(base) + 1, name)
    return (2 * len(order), name)


def in_order(axis: str, names: Iterable[str]) -> list[str]:
    """The distinct ``names`` of one axis ("model" or "dataset") in the listed order."""
    return sorted(set(names), key=lambda name: order_key(axis, name))


def cell_order(cells: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """Distinct (model, dataset) cells: models in the listed order, then datasets."""
    return sorted(
        set(cells), key=lambda cell: (order_key("model", cell[0]), order_key("dataset", cell[1]))
    )


class Number(str):
    """A formatted number ("12.5 [8.1, 17.0]") carrying the numbers it shows."""

    estimate: float
    ci_low: float
    ci_high: float
    n: int | None

    def __new__(
        cls,
        text: str,
        estimate: float | None,
        ci_low: float | None = None,
        ci_high: float | None = None,
        n: int | None = None,
    ) -> Number:
        self = super().__new__(cls, text)
        self.estimate = NAN if estimate is None else float(estimate)
        self.ci_low = NAN if ci_low is None else float(ci_low)
        self.ci_high = NAN if ci_high is None else float(ci_high)
        self.n = n
        return self


class Label(str):
    """A row label printed one way and keyed another in the tidy file (Table 2 prints
    "P1 (IDK)" for the policy P1)."""

    key: str

    def __new__(cls, text: str, key: str) -> Label:
        self = super().__new__(cls, text)
        self.key = key
        return self


class _Missing:
    """A column a row does not have (printed as pandas printed NaN: empty in CSV)."""

    def __repr__(self) -> str:
        return "nan"


MISSING = _Missing()


@dataclass
class Table:
    """One table: rows as dicts, its columns in order, and the note that follows its
    caption (what the paper says in the caption: the questions behind each rate, say)."""

    rows: list[dict[str, Any]]
    columns: list[str] = field(default_factory=list)
    note: str = ""
    keys: tuple[str, ...] = ()  # number columns that label rows (a threshold, say)

    def __post_init__(self) -> None:
        if not self.columns:
            seen: dict[str, None] = {}
            for row in self.rows:
                seen.update(dict.fromkeys(row))
            self.columns = list(seen)

    def __len__(self) -> int:
        return len(self.rows)

    def column(self, name: str) -> list[Any]:
        return [row.get(name, MISSING) for row in self.rows]

    def __getitem__(self, name: str) -> list[Any]:
        """A column's values, top to bottom."""
        return self.column(name)

    def renamed(self, names: Mapping[str, str], values: Mapping[str, str]) -> Table:
        """Columns renamed by ``names``; in the policy columns, values by ``values``."""
        rows = []
        for row in self.rows:
            out = {}
            for key, value in row.items():
                if key.lower() == "policy" and isinstance(value, str):
                    value = values.get(value, value)
                out[names.get(key, key)] = value
            rows.append(out)
        columns = [names.get(c, c) for c in self.columns]
        return Table(rows, columns, self.note, tuple(names.get(k, k) for k in self.keys))

    @property
    def frame(self) -> pl.DataFrame:
        """The table as printed, one string column per column."""
        texts = {name: _column_texts(self.column(name), "csv") for name in self.columns}
        return pl.DataFrame(texts, schema=dict.fromkeys(self.columns, pl.String))


def _missing(value: Any) -> bool:
    return value is MISSING or value is None or (isinstance(value, float) and math.isnan(value))


def _kind(values: Sequence[Any]) -> str:
    """The column kind pandas would have given the values: int, float or object."""
    present = [v for v in values if not _missing(v)]
    if not present:
        return "float" if values else "object"
    if all(isinstance(v, bool) for v in present):
        return "object"
    if any(isinstance(v, str) or isinstance(v, bool) for v in present):
        return "object"
    if all(isinstance(v, numbers.Integral) for v in present):
        return "int" if len(present) == len(values) else "float"
    return "float"


def _column_texts(values: Sequence[Any], target: str) -> list[str | None]:
    """Each value as ``target`` (csv, md or tex) prints it; None is an empty CSV field."""
    kind = _kind(values)
    out: list[str | None] = []
    for value in values:
        if _missing(value):
            text = {"csv": None, "md": "nan", "tex": "NaN"}[target]
            if value is None and kind == "object":
                text = {"csv": None, "md": "", "tex": "None"}[target]
        elif kind == "float":
            value = float(value)
            text = f"{value:.6f}" if target == "tex" else repr(value)
        else:
            text = str(value)
            if target == "tex" and kind == "object":
                text = latex_escape(text)
        out.append(text)
    return out


def latex_escape(text: str) -> str:
    """LaTeX's special characters escaped, as pandas' ``to_latex(escape=True)`` does."""
    marker = "ab2§=§8yz"  # a placeholder no table contains, so the backslash is done last
    return (
        text.replace("\\", marker)
        .replace(f"{marker} ", f"{marker}\\space ")
        .replace("&", "\\&")
        .replace("%", "\\%")
        .replace("$", "\\$")
        .replace("#", "\\#")
        .replace("_", "\\_")
        .replace("{", "\\{")
        .replace("}", "\\}")
        .replace("~ ", "~\\space ")
        .replace("~", "\\textasciitilde ")
        .replace("^ ", "^\\space ")
        .replace("^", "\\textasciicircum ")
        .replace(marker, "\\textbackslash ")
    )


def csv_text(table: Table) -> str:
    """The table as CSV (polars writes it; every field is already text)."""
    frame = table.frame.with_columns(
        pl.when(pl.col(c) == "").then(None).otherwise(pl.col(c)).alias(c) for c in table.columns
    )  # an empty string is an empty field, not ""
    return frame.write_csv() if table.columns else "\n"


def markdown_text(table: Table) -> str:
    """A pipe table, every cell left as text (no number parsing)."""
    if not len(table):
        return "(no rows)"
    columns = [_column_texts(table.column(c), "md") for c in table.columns]
    return tabulate(
        list(zip(*columns, strict=True)),
        headers=table.columns,
        tablefmt="pipe",
        disable_numparse=True,
    )


def latex_text(table: Table, caption: str) -> str:
    """A booktabs tabular in a table float with ``caption``; numbers right-aligned."""
    kinds = [_kind(table.column(c)) for c in table.columns]
    align = "".join("r" if kind in ("int", "float") else "l" for kind in kinds)
    lines = [
        "\\begin{table}",
        f"\\caption{{{caption}}}",
        f"\\begin{{tabular}}{{{align}}}",
        "\\toprule",
        " & ".join(latex_escape(c) for c in table.columns) + " \\\\",
        "\\midrule",
    ]
    columns = [_column_texts(table.column(c), "tex") for c in table.columns]
    lines += [" & ".join(cells) + " \\\\" for cells in zip(*columns, strict=True)]
    lines += ["\\bottomrule", "\\end{tabular}", "\\end{table}", ""]
    return "\n".join(lines)


_PAGE_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #1e293b; }
table { border-collapse: collapse; font-size: 0.9em; }
caption { caption-side: top; text-align: left; max-width: 60em; padding-bottom: 0.8em;
  line-height: 1.4; }
th, td { padding: 0.25em 0.8em; border-bottom: 1px solid #e2e8f0; white-space: nowrap; }
th { border-bottom: 2px solid #64748b; text-align: left; }
td.number { text-align: right; font-variant-numeric: tabular-nums; }
tbody tr:nth-child(even) { background: #f8fafc; }
"""


def _is_number_column(values: Sequence[Any]) -> bool:
    present = [v for v in values if not _missing(v)]
    return bool(present) and all(
        isinstance(v, Number) or (isinstance(v, numbers.Real) and not isinstance(v, bool))
        for v in present
    )


def html_text(table: Table, caption: str, title: str) -> str:
    """The table as a page of its own: ``caption`` above it, numbers right-aligned, an
    empty cell where a row has no value; the report opens it in place."""
    columns = [table.column(c) for c in table.columns]
    cells = [_column_texts(values, "csv") for values in columns]
    classes = [' class="number"' if _is_number_column(values) else "" for values in columns]
    head = "".join(f"<th>{html.escape(c)}</th>" for c in table.columns)
    body = []
    for row in zip(*cells, strict=True):
        tds = (
            f"<td{cls}>{html.escape(text or '')}</td>"
            for text, cls in zip(row, classes, strict=True)
        )
        body.append(f"<tr>{''.join(tds)}</tr>")
    if not body:
        body.append(f'<tr><td colspan="{max(1, len(table.columns))}">(no rows)</td></tr>')
    rows = "\n".join(body)
    return (
        "<!DOCTYPE html>\n"
        f'<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"<style>{_PAGE_STYLE}</style></head>\n<body>\n<table>\n"
        f"<caption>{html.escape(caption)}</caption>\n"
        f"<thead><tr>{head}</tr></thead>\n<tbody>\n{rows}\n</tbody>\n</table>\n"
        "</body></html>\n"
    )


# --- the tidy numeric form ----------------------------------------------------------------

KEYS = ("model", "dataset", "policy", "condition")
NOT_KEYS = ("note", "scorer")  # text columns that explain a row rather than name it
TIDY_SCHEMA = {
    "table": pl.String,
    "model": pl.String,
    "dataset": pl.String,
    "policy": pl.String,
    "condition": pl.String,
    "row": pl.String,  # the row's other labels, "name=value; ..." (a rule, a variant...)
    "quantity": pl.String,  # the column the number is printed in
    "estimate": pl.Float64,
    "ci_low": pl.Float64,
    "ci_high": pl.Float64,
    "n": pl.Int64,
}


def _is_label(values: Iterable[Any]) -> bool:
    """A column of plain text (no Number, no count): it names rows, it is not a quantity."""
    return all(_missing(v) or (isinstance(v, str) and not isinstance(v, Number)) for v in values)


def _number(value: Any) -> tuple[float, float, float, int | None] | None:
    if isinstance(value, Number):
        return value.estimate, value.ci_low, value.ci_high, value.n
    if isinstance(value, bool) or _missing(value):
        return None
    if isinstance(value, numbers.Real):
        return float(value), NAN, NAN, None
    if value == "n/a":
        return NAN, NAN, NAN, None
    return None  # a blank or a word in a number column: nothing to tidy


def tidy_frame(table: Table, name: str) -> pl.DataFrame:
    """The table's numbers in the long :data:`TIDY_SCHEMA`: one row per printed number,
    with the row's labels (model, dataset, policy, condition, the rest in ``row``)."""
    labels = [c for c in table.columns if c in table.keys or _is_label(table.column(c))]
    quantities = [c for c in table.columns if c not in labels]
    out: dict[str, list[Any]] = {column: [] for column in TIDY_SCHEMA}
    for row in table.rows:
        keys: dict[str, str | None] = dict.fromkeys(KEYS)
        other = []
        for label in labels:
            value = row.get(label)
            if _missing(value) or value == "" or label in NOT_KEYS:
                continue
            value = getattr(value, "key", value)
            if label.lower() in KEYS:
                keys[label.lower()] = value
            else:
                other.append(f"{label}={value}")
        for quantity in quantities:
            numbers = _number(row.get(quantity, MISSING))
            if numbers is None:
                continue
            estimate, low, high, n = numbers
            values = {
                "table": name,
                **keys,
                "row": "; ".join(other) or None,
                "quantity": quantity,
                "estimate": None if math.isnan(estimate) else estimate,
                "ci_low": None if math.isnan(low) else low,
                "ci_high": None if math.isnan(high) else high,
                "n": n,
            }
            for column, value in values.items():
                out[column].append(value)
    return pl.DataFrame(out, schema=TIDY_SCHEMA)


def write_table(
    table: Table, stem: str | Path, caption: str, tidy: Table | None = None
) -> list[Path]:
    """``<stem>.csv``, ``.md``, ``.tex``, ``.html`` (as printed, the note after the
    caption) and ``.tidy.csv`` (the numbers of ``tidy``, by default the table); returns the
    five paths."""
    caption = f"{caption} {table.note}" if table.note else caption
    stem = Path(stem)
    paths = [stem.with_suffix(s) for s in (".csv", ".md", ".tex", ".tidy.csv", ".html")]
    with atomic_write(paths[0]) as handle:
        handle.write(csv_text(table))
    with atomic_write(paths[1]) as handle:
        handle.write(f"{caption}\n\n{markdown_text(table)}\n")
    with atomic_write(paths[2]) as handle:
        handle.write(latex_text(table, caption))
    with atomic_write(paths[3]) as handle:
        tidy_frame(tidy or table, stem.name).write_csv(handle)
    with atomic_write(paths[4]) as handle:
        handle.write(html_text(table, caption, stem.name))
    return paths


# --- tidy CSVs the stages write (metrics, diagnostics, the audit's HwSA) -----------------


def rows_csv(path: str | Path, rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> None:
    """Rows as a CSV with ``columns`` (a row's absent column is empty), written by polars
    with floats as Python prints them (1e-05, not 0.00001) and booleans as True/False."""
    table = Table([dict(r) for r in rows], list(columns))
    with atomic_write(path) as handle:
        handle.write(csv_text(table))


def where(frame: pl.DataFrame, **equal: Any) -> pl.DataFrame:
    """The rows whose columns equal the given values."""
    if not equal:
        return frame
    return frame.filter(*(pl.col(column) == value for column, value in equal.items()))


def same_float(column: str, value: float) -> pl.Expr:
    """``column`` equals ``value`` as a float (a threshold read from a CSV)."""
    return (pl.col(column).cast(pl.Float64) - float(value)).abs() < 1e-9


def group_means(
    frame: pl.DataFrame, by: str, columns: Sequence[str]
) -> dict[Any, dict[str, float]]:
    """{value of ``by``: {column: mean}}, in ``by`` order, missing values (null, NaN) left
    out; NaN where a group has none, or the frame lacks the column (a cell without that
    condition)."""
    groups: dict[Any, dict[str, list[float]]] = {}
    for row in frame.iter_rows(named=True):
        group = groups.setdefault(row[by], {c: [] for c in columns})
        for column in columns:
            value = row.get(column)
            if value is not None and not math.isnan(value):
                group[column].append(float(value))
    return {
        key: {c: float(np.mean(v)) if v else NAN for c, v in values.items()}
        for key, values in sorted(groups.items())
    }
