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
        decisions=lambda wildcards: [
            f"{RESULTS}/policies/{model}/{wildcards.dataset}/{condition}/{policy}.jsonl"
            for model in MODELS
            for condition in ("Q0", "QC")
            if condition in GENERATION_CONDITIONS
            for policy in dataset_policies(wildcards.dataset)
        ],
    output:
        table=f"{RESULTS}/qc/{{dataset}}/audit_hwsa.csv",
    log:
        f"{RESULTS}/logs/audit_hwsa/{{dataset}}.log",
    conda:
        GRABRAG_ENV
    params:
        code=script_code("audit_hwsa.py"),
    script:
        "../workflow/scripts/audit_hwsa.py"


rule metrics:
    input:
        decisions=lambda wildcards: [
            f"{RESULTS}/policies/{model}/{wildcards.dataset}/{condition}/{policy}.jsonl"
            for model, condition in metric_cells(wildcards.dataset)
            for policy in metric_policies(wildcards.dataset)
        ],
        contexts=lambda wildcards: list(
            dict.fromkeys(
                f"{RESULTS}/contexts/{wildcards.dataset}/{condition}.jsonl"
                for _, condition in metric_cells(wildcards.dataset)
            )
        ),
    output:
        metrics=f"{RESULTS}/metrics/{{dataset}}.csv",
    log:
        f"{RESULTS}/logs/metrics/{{dataset}}.log",
    conda:
        GRABRAG_ENV
    params:
        code=script_code("metrics.py"),
        bootstrap=stable(config["bootstrap"]),
        seed=config["seed"],
    script:
        "../workflow/scripts/metrics.py"


rule abstention_over_datasets:
    input:
        decisions=[
            f"{RESULTS}/policies/{model}/{dataset}/{condition}/{policy}.jsonl"
            for dataset in DATASETS
            for model, condition in metric_cells(dataset)
            for policy in dataset_policies(dataset)
        ],
        contexts=[
            f"{RESULTS}/contexts/{dataset}/{condition}.jsonl"
            for dataset in DATASETS
            for condition in GENERATION_CONDITIONS
        ],
    output:
        metrics=f"{RESULTS}/metrics/abstention_over_datasets.csv",
    log:
        f"{RESULTS}/logs/metrics/abstention_over_datasets.log",
    conda:
        GRABRAG_ENV
    params:
        code=script_code("abstention_over_datasets.py"),
        bootstrap=stable(config["bootstrap"]),
        seed=config["seed"],
    script:
        "../workflow/scripts/abstention_over_datasets.py"


rule tables:
    input:
        metrics=expand(f"{RESULTS}/metrics/{{dataset}}.csv", dataset=DATASETS),
        sweeps=expand(
            f"{RESULTS}/policies/{{model}}/{{dataset}}/P3_sweep.csv",
            model=MODELS,
            dataset=DATASETS,
        ),
        reports=expand(
            f"{RESULTS}/generation/{{model}}/{{dataset}}/report.json",
            model=MODELS,
            dataset=DATASETS,
        ),
        seed_metrics=expand(f"{RESULTS}/metrics/{{dataset}}.csv", dataset=SEED_VARIANTS),
        audits=expand(f"{RESULTS}/qc/{{dataset}}/audit_hwsa.csv", dataset=AUDITED_DATASETS),
        audit_ratings=[config["qc"]["audit_filled"][d] for d in AUDITED_DATASETS],
        swaps=expand(f"{RESULTS}/qc/{{dataset}}/swaps.jsonl", dataset=DATASETS),
        closed_book=expand(
            f"{RESULTS}/generation/{{model}}/{{dataset}}/Qclosed/{CLOSED_BOOK_PROMPT}.jsonl",
            model=MODELS,
            dataset=DATASETS,
        ),
        evid_sweeps=expand(
            f"{RESULTS}/evidential/{{model}}/{{dataset}}/sweep.csv",
            model=MODELS,
            dataset=EVID_DATASETS,
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
        code=script_code("tables.py"),
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
        code=script_code("figure.py"),
    script:
        "../workflow/scripts/figure.py"
