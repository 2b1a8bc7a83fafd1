# Stage 7-8: metrics with paired bootstrap CIs, the paper's tables and figures.
# Editing `bootstrap:` reruns metrics, tables and figures only; plotting code, figures only.

# The tables this config produces; each caption is workflow/report/tables/<name>.rst.
TABLE_NAMES = [
    "table1_hwsa",
    "table2_policies",
    "table3_qc_sources",
    "table7_hwsa_ci",
    "table8_fac_ci",
    "table9_qc_sources",
    "table10_aurc",
    "table11_ece",
    "table12_p3_sweep",
    "normalised_hwsa",
    "selection_bias",
    "parse_failures",
    # The paper's other outputs: Tables 4 and 5 (NER labels, swap examples), the
    # confidence-cutoff sweep and the closed-book pass (Appendix F), section 6's aggregates.
    "table4_ner_labels",
    "table5_swap_examples",
    "table12b_cutoff_sweep",
    "closed_book",
    "section6_aggregates",
]
if "QX" in GENERATION_CONDITIONS:
    TABLE_NAMES.append("hwsa_conditions")
if EVID_POLICIES:
    TABLE_NAMES += [
        # 15-bin ECE: EvidentialRAG's calibration measure, for comparing EVID with P0-P4.
        "table11b_ece15",
        "evid_results",
        "evid_efficiency",
        "evid_lambda_sweep",
        "evid_tau_sweep",
        "evid_ablation",
        "evid_evaluator",
    ]
# CDD, CDD-alpha and the baselines (rules/cdd.smk, included before this file).
TABLE_NAMES += CDD_TABLE_NAMES
if AUDITED_DATASETS:
    TABLE_NAMES += ["table6_audit", "audit_quality"]
if SEED_VARIANTS:
    TABLE_NAMES.append("table13_seed_sensitivity")
TABLES = {name: table_caption(name) for name in TABLE_NAMES}


rule audit_hwsa:
    input:
        audit=lambda wildcards: config["qc"]["audit_filled"][wildcards.dataset],
        qc_contexts=f"{RESULTS}/contexts/{{dataset}}/QC.jsonl",
        decisions=lambda wildcards: files(DECISION_FILE, audit_decision_cells(wildcards)),
    output:
        table=f"{RESULTS}/qc/{{dataset}}/audit_hwsa.csv",
    log:
        f"{RESULTS}/logs/audit_hwsa/{{dataset}}.log",
    conda:
        GRABRAG_ENV
    params:
        code=library_code("metrics.py", "tables.py", "swaps.py"),
        decision_cells=audit_decision_cells,
    script:
        "../workflow/scripts/audit_hwsa.py"


rule metrics:
    input:
        decisions=lambda wildcards: files(DECISION_FILE, metric_decision_cells(wildcards.dataset)),
        contexts=lambda wildcards: files(CONTEXT_FILE, metric_context_cells(wildcards.dataset)),
    output:
        metrics=f"{RESULTS}/metrics/{{dataset}}.csv",
    log:
        f"{RESULTS}/logs/metrics/{{dataset}}.log",
    conda:
        GRABRAG_ENV
    params:
        code=library_code("metrics.py", "evaluate.py", "bootstrap.py"),
        bootstrap=stable(config["bootstrap"]),
        seed=config["seed"],
        decision_cells=lambda wildcards: metric_decision_cells(wildcards.dataset),
        context_cells=lambda wildcards: metric_context_cells(wildcards.dataset),
    script:
        "../workflow/scripts/metrics.py"


rule abstention_over_datasets:
    input:
        decisions=files(DECISION_FILE, ALL_DECISION_CELLS),
        contexts=files(CONTEXT_FILE, ALL_CONTEXT_CELLS),
    output:
        metrics=f"{RESULTS}/metrics/abstention_over_datasets.csv",
    log:
        f"{RESULTS}/logs/metrics/abstention_over_datasets.log",
    conda:
        GRABRAG_ENV
    params:
        code=library_code("metrics.py", "evaluate.py", "bootstrap.py"),
        bootstrap=stable(config["bootstrap"]),
        seed=config["seed"],
        decision_cells=ALL_DECISION_CELLS,
        context_cells=ALL_CONTEXT_CELLS,
    script:
        "../workflow/scripts/abstention_over_datasets.py"


# What each per-cell input file of the tables rule is about (as `cells`), by input name.
TABLE_CELLS = {
    "sweeps": cells(model=MODELS, dataset=DATASETS),
    "seed_metrics": cells(dataset=list(SEED_VARIANTS)),
    "swaps": cells(dataset=DATASETS),
    "closed_book": cells(model=MODELS, dataset=DATASETS),
    "evid_sweeps": cells(model=MODELS, dataset=EVID_DATASETS),
}


rule tables:
    input:
        metrics=expand(f"{RESULTS}/metrics/{{dataset}}.csv", dataset=DATASETS),
        sweeps=files(
            f"{RESULTS}/policies/{{model}}/{{dataset}}/P3_sweep.csv", TABLE_CELLS["sweeps"]
        ),
        reports=expand(
            f"{RESULTS}/generation/{{model}}/{{dataset}}/report.json",
            model=MODELS,
            dataset=DATASETS,
        ),
        seed_metrics=files(f"{RESULTS}/metrics/{{dataset}}.csv", TABLE_CELLS["seed_metrics"]),
        audits=expand(f"{RESULTS}/qc/{{dataset}}/audit_hwsa.csv", dataset=AUDITED_DATASETS),
        audit_ratings=[config["qc"]["audit_filled"][d] for d in AUDITED_DATASETS],
        swaps=files(f"{RESULTS}/qc/{{dataset}}/swaps.jsonl", TABLE_CELLS["swaps"]),
        closed_book=files(
            f"{RESULTS}/generation/{{model}}/{{dataset}}/Qclosed/{CLOSED_BOOK_PROMPT}.jsonl",
            TABLE_CELLS["closed_book"],
        ),
        evid_sweeps=files(
            f"{RESULTS}/evidential/{{model}}/{{dataset}}/sweep.csv", TABLE_CELLS["evid_sweeps"]
        ),
        evid_efficiency=expand(
            f"{RESULTS}/evidential/{{model}}/{{dataset}}/efficiency.json",
            model=MODELS,
            dataset=EVID_DATASETS,
        ),
        evid_evaluate_reports=expand(
            f"{RESULTS}/evidential/{{model}}/{{dataset}}/{{condition}}/evaluate_report.json",
            model=MODELS,
            dataset=EVID_DATASETS,
            condition=GENERATION_CONDITIONS,
        ),
        cdd_diagnostics=expand(
            f"{RESULTS}/cdd/{{model}}/{{dataset}}/diagnostics.csv",
            model=MODELS,
            dataset=CDD_DATASETS,
        ),
    output:
        **{
            name: report(
                f"{RESULTS}/tables/{name}.csv",
                caption=f"../workflow/report/tables/{name}.rst",
                category="Tables",
                labels={"table": name},
            )
            for name in TABLES
        },
        other=[f"{RESULTS}/tables/{name}.{suffix}" for name in TABLES for suffix in ("md", "tex")],
    log:
        f"{RESULTS}/logs/tables.log",
    conda:
        GRABRAG_ENV
    params:
        captions=TABLES,
        cells=TABLE_CELLS,
        seed_sensitivity=stable(
            {name: {**spec, "base_seed": config["seed"]} for name, spec in SEED_VARIANTS.items()}
        ),
        fusion=fusion_settings(),
        paper_outputs=stable(
            {
                "ner_backend": config["ner"]["backend"],
                "audited": AUDITED_DATASETS,
                "confidence_cutoff": config["policies"]["confidence_cutoff"],
                "f1_threshold": config["policies"]["f1_threshold"],
                "bootstrap": config["bootstrap"],
                "seed": config["seed"],
            }
        ),
        code=library_code("tables.py"),
    script:
        "../workflow/scripts/tables.py"


rule figure:
    input:
        unpack(figure_inputs),
    output:
        pdf=f"{RESULTS}/figures/{{figure}}.pdf",
        png=report(
            f"{RESULTS}/figures/{{figure}}.png",
            caption="../workflow/report/figure.rst",
            category="Figures",
            labels={"figure": "{figure}"},
        ),
    log:
        f"{RESULTS}/logs/figure/{{figure}}.log",
    conda:
        GRABRAG_ENV
    params:
        fusion=lambda wildcards: fusion_settings() if wildcards.figure == "lambda_sweep" else {},
        cells=figure_cells,
        code=library_code("figures.py"),
    script:
        "../workflow/scripts/figure.py"
