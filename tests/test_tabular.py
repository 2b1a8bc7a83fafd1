"""Tables written as CSV, Markdown, LaTeX and a tidy numeric CSV."""

from __future__ import annotations

import math
from pathlib import Path

import polars as pl
import pytest

from grabrag.core.outputs import read_csvs
from grabrag.report.table_cells import NOT_AVAILABLE, pct, pct_ci
from grabrag.report.tabular import (
    TIDY_SCHEMA,
    Label,
    Table,
    csv_text,
    html_text,
    latex_escape,
    latex_text,
    markdown_text,
    rows_csv,
    tidy_frame,
    write_table,
)


def test_number_is_its_text_and_keeps_its_numbers() -> None:
    cell = pct_ci(0.125, 0.05, 0.2, n=40)
    assert cell == "12.5 [5.0, 20.0]" and isinstance(cell, str)
    assert (cell.estimate, cell.ci_low, cell.ci_high, cell.n) == (0.125, 0.05, 0.2, 40)
    missing = pct(float("nan"))
    assert missing == "n/a" and math.isnan(missing.estimate)


def test_printed_forms_follow_the_column_kind() -> None:
    # ints stay ints; a float column prints Python's shortest float (1e-05, 3.0 for an
    # int among floats); a missing number is empty in CSV, "nan" in Markdown and "NaN"
    # in LaTeX; text is escaped for LaTeX only.
    table = Table(
        [
            {"name": "a_b & 50%", "n": 3, "x": 1e-05, "flag": True},
            {"name": "c", "n": 4, "x": 3, "flag": None},
            {"name": "", "n": 5, "x": float("nan")},
        ]
    )
    assert csv_text(table) == (
        "name,n,x,flag\na_b & 50%,3,1e-05,True\nc,4,3.0,\n,5,,\n"
    )  # an absent column is an empty field, like a missing number
    markdown = markdown_text(table)
    assert markdown.splitlines()[2] == "| a_b & 50% | 3   | 1e-05 | True   |"
    assert markdown.splitlines()[4] == "|           | 5   | nan   | nan    |"
    latex = latex_text(table, "Caption.")
    assert "\\begin{tabular}{lrrl}" in latex
    assert "a\\_b \\& 50\\% & 3 & 0.000010 & True \\\\" in latex
    assert " & 5 & NaN & NaN \\\\" in latex
    assert latex.startswith("\\begin{table}\n\\caption{Caption.}\n")
    assert latex.endswith("\\bottomrule\n\\end{tabular}\n\\end{table}\n")


def test_latex_escape_handles_every_special_character() -> None:
    assert latex_escape("\\ a~b^c {x} #1 $2") == (
        "\\textbackslash \\space a\\textasciitilde b\\textasciicircum c \\{x\\} \\#1 \\$2"
    )


def test_an_empty_table_says_so() -> None:
    table = Table([], ["model", "value"])
    assert markdown_text(table) == "(no rows)"
    assert csv_text(table) == "model,value\n"


def test_the_html_page_prints_the_caption_above_the_cells_as_the_csv_prints_them() -> None:
    table = Table(
        [
            {"policy": "P1 <IDK>", "HwSA": pct(0.125), "n": 8, "note": None},
            {"policy": "P2", "HwSA": NOT_AVAILABLE, "n": 4, "note": "a & b"},
        ]
    )
    page = html_text(table, "Table 1: HwSA <%>.", "table1_hwsa")
    assert page.startswith("<!DOCTYPE html>")
    assert "<title>table1_hwsa</title>" in page
    assert "<caption>Table 1: HwSA &lt;%&gt;.</caption>" in page
    assert "<thead><tr><th>policy</th><th>HwSA</th><th>n</th><th>note</th></tr></thead>" in page
    # numbers right-aligned, text escaped, a missing value an empty cell
    assert (
        '<tr><td>P1 &lt;IDK&gt;</td><td class="number">12.5</td><td class="number">8</td>'
        "<td></td></tr>" in page
    )
    assert '<td class="number">n/a</td><td class="number">4</td><td>a &amp; b</td>' in page
    assert page.index("<caption>") < page.index("<thead>")


def test_an_empty_table_page_says_so() -> None:
    page = html_text(Table([], ["model", "value"]), "Caption.", "t")
    assert '<tr><td colspan="2">(no rows)</td></tr>' in page


def test_write_table_writes_the_page_with_the_note_after_the_caption(tmp_path: Path) -> None:
    table = Table([{"policy": "P1"}], note="n = 5.")
    paths = write_table(table, tmp_path / "t", "Table 1: x.")
    assert [p.name for p in paths] == ["t.csv", "t.md", "t.tex", "t.tidy.csv", "t.html"]
    assert "<caption>Table 1: x. n = 5.</caption>" in paths[4].read_text()


def test_tidy_rows_name_their_cell_and_keep_the_numbers() -> None:
    table = Table(
        [
            {
                "model": "m",
                "Dataset": "nq",
                "Policy": Label("P1 (IDK)", "P1"),
                "rule": "dempster",
                "note": "a remark, not a key",
                "F1": 0.8,
                "n": 12,
                "HwSA [95% CI]": pct_ci(0.5, 0.25, 0.75, n=12),
                "Acc": NOT_AVAILABLE,
                "blank": "",
            }
        ],
        keys=("F1",),
    )
    tidy = tidy_frame(table, "t")
    assert tidy.schema == pl.Schema(TIDY_SCHEMA)
    assert tidy["quantity"].to_list() == ["n", "HwSA [95% CI]", "Acc"]
    first, hwsa, acc = tidy.rows(named=True)
    assert (hwsa["model"], hwsa["dataset"], hwsa["policy"], hwsa["condition"]) == (
        "m",
        "nq",
        "P1",
        None,
    )
    assert hwsa["row"] == "rule=dempster; F1=0.8"
    assert (hwsa["estimate"], hwsa["ci_low"], hwsa["ci_high"], hwsa["n"]) == (0.5, 0.25, 0.75, 12)
    assert (first["estimate"], first["n"]) == (12.0, None)
    assert acc["estimate"] is None  # "n/a": the number does not exist


def test_every_tidy_file_loads_with_one_call(tmp_path: Path) -> None:
    one = Table([{"model": "m", "policy": "P1", "HwSA": pct(0.25, n=4)}])
    two = Table([{"Section": "quality tier", "n": 3, "%": pct(0.5)}])
    write_table(one, tmp_path / "one", "One.")
    write_table(two, tmp_path / "two", "Two.")
    both = pl.read_csv(tmp_path / "*.tidy.csv", schema=TIDY_SCHEMA)
    assert both["table"].to_list() == ["one", "two", "two"]
    assert both.filter(pl.col("policy") == "P1")["estimate"].to_list() == [0.25]


def test_rows_csv_and_read_csvs_round_trip(tmp_path: Path) -> None:
    rows = [
        {"model": "m", "value": 0.1, "n": 3, "reason": None},
        {"model": "m", "value": float("nan"), "n": 4, "reason": "too few"},
    ]
    rows_csv(tmp_path / "a.csv", rows, ("model", "value", "n", "reason"))
    assert (tmp_path / "a.csv").read_text() == "model,value,n,reason\nm,0.1,3,\nm,,4,too few\n"
    (tmp_path / "b.csv").write_text("model,value,extra\nq,nan,1\n")
    frame = read_csvs(
        [tmp_path / "a.csv", tmp_path / "b.csv"],
        strings=("model", "reason"),
        integers=("n",),
        labels=[{"dataset": "nq"}, {"dataset": "hp"}],
    )
    assert frame["dataset"].to_list() == ["nq", "nq", "hp"]
    assert frame["n"].to_list() == [3, 4, None]  # b.csv has no n
    assert frame["value"][0] == pytest.approx(0.1) and frame["value"][1] is None
    assert math.isnan(frame["value"][2])  # "nan" as a sweep writes it
