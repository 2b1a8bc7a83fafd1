"""The run's file patterns and the names of its tables outside the registry, from the
output declarations (:mod:`grabrag.core.outputs`); the run model and the rules use them."""

from __future__ import annotations

from grabrag.core import outputs

# The per-cell files other stages read, from their declarations. The rule that writes one
# spells its path out in its output (Snakemake's guidelines: literal results/ paths there).
CONTEXT_FILE = outputs.output(outputs.CONTEXT_ROWS).pattern
# A method run on each dataset's first N questions only (evidential.n_questions,
# cdd.n_questions) reads a condition's rows among them (rule method_contexts).
METHOD_CONTEXT_FILE = "results/contexts/{dataset}/{condition}.first{questions}.jsonl"
GENERATION_FILE = outputs.output(outputs.GENERATION_ROWS).pattern
CLOSED_BOOK_FILE = outputs.output(outputs.CLOSED_BOOK_ROWS).pattern
NLI_FILE = outputs.output(outputs.NLI_LABELS).pattern
DECISION_FILE = outputs.output(outputs.DECISION_ROWS).pattern
EVIDENTIAL_FILE = outputs.output(outputs.EVIDENTIAL_ROWS).pattern
EVALUATIONS_FILE = outputs.output(outputs.EVIDENTIAL_EVALUATIONS).pattern
CDD_TRACE_FILE = outputs.output(outputs.CDD_TRACE_ROWS).pattern
CDD_CELL_FILE = outputs.output(outputs.CDD_BASELINE_ROWS).pattern
P3_SWEEP_FILE = outputs.output(outputs.P3_SWEEPS).pattern
EVID_SWEEP_FILE = outputs.output(outputs.EVID_SWEEPS).pattern
EVID_EFFICIENCY_FILE = outputs.output(outputs.EVID_EFFICIENCY).pattern
CDD_DIAGNOSTICS_FILE = outputs.output(outputs.CDD_DIAGNOSTICS_TABLE).pattern
GENERATION_REPORT_FILE = outputs.output(outputs.GENERATION_REPORTS).pattern
TABLE_FILE = "results/tables/{table}.csv"
TABLE_PAGE_FILE = "results/tables/{table}.html"
# The re-ask audit: each generation cell's re-asked calls, and the table over them.
REASK_FILE = "results/reask/{model}/{dataset}/{condition}.jsonl"
REASK_TABLE = "reask_agreement"
# The reproduction report: the papers' published numbers against this run's, and their
# headline findings as claims.
REPRODUCTION_TABLES = ("reproduction", "reproduction_claims")
# The outputs every construction seed's build of a dataset has, per dataset: a table built
# from these alone gets a copy per seed and a companion across the seeds.
PER_BUILD = frozenset({outputs.METRICS, outputs.EVID_SWEEPS, outputs.CDD_DIAGNOSTICS_TABLE})
# seeds_redraw: each further seed draws its own questions (ours), or keeps the base seed's
# and redraws only the construction (EvidentialRAG's fixed evaluation instances).
FIXED_QUESTIONS = "construction"
# What the run's model calls cost (rule cost_ledger).
LEDGER_TABLE = "cost_ledger"
# The tables outside the registry (each with its own rule and caption file), in the order
# the report lists them after the papers' tables.
EXTRA_TABLES = (*REPRODUCTION_TABLES, LEDGER_TABLE, REASK_TABLE)
FIGURE_FILE = "results/figures/{figure}.pdf"

# The report's two folders of table pages (rule table_pages) and their category there.
TABLE_PAGES = {"tables": "Tables", "tables_across_seeds": "Tables across seeds"}
