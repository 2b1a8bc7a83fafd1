# Stage 7-8: metrics with paired bootstrap CIs, the paper's tables and figures.
# Editing `bootstrap:` reruns metrics, tables and figures only; plotting code, figures only.


rule audit_hwsa:
    input:
        audit=audit_ratings,
        qc_contexts="results/contexts/{dataset}/QC.jsonl",
        decisions=lambda wildcards: files(DECISION_FILE, audit_decision_cells(wildcards)),
    output:
        table="results/qc/{dataset}/audit_hwsa.csv",
    log:
        "results/logs/audit_hwsa/{dataset}.log",
    conda:
        GRABRAG_ENV
    params:
        code=script_code("audit_hwsa.py"),
        decision_cells=audit_decision_cells,
    script:
        "../workflow/scripts/audit_hwsa.py"


rule metrics:
    input:
        decisions=lambda wildcards: files(DECISION_FILE, metric_decision_cells(wildcards.dataset)),
        contexts=lambda wildcards: files(CONTEXT_FILE, metric_context_cells(wildcards.dataset)),
    output:
        metrics="results/metrics/{dataset}.csv",
    log:
        "results/logs/metrics/{dataset}.log",
    conda:
        GRABRAG_ENV
    params:
        code=script_code("metrics.py"),
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
        metrics="results/metrics/abstention_over_datasets.csv",
    log:
        "results/logs/metrics/abstention_over_datasets.log",
    conda:
        GRABRAG_ENV
    params:
        code=script_code("abstention_over_datasets.py"),
        bootstrap=stable(config["bootstrap"]),
        seed=config["seed"],
        decision_cells=ALL_DECISION_CELLS,
        context_cells=ALL_CONTEXT_CELLS,
    script:
        "../workflow/scripts/abstention_over_datasets.py"


rule tables:
    input:
        metrics=expand("results/metrics/{dataset}.csv", dataset=DATASETS),
        p3_sweeps=files("results/policies/{model}/{dataset}/P3_sweep.csv", TABLE_CELLS["p3_sweeps"]),
        reports=expand(
            "results/generation/{model}/{dataset}/report.json",
            model=MODELS,
            dataset=DATASETS,
        ),
        seed_metrics=files("results/metrics/{dataset}.csv", TABLE_CELLS["seed_metrics"]),
        audits=expand("results/qc/{dataset}/audit_hwsa.csv", dataset=AUDITED_DATASETS),
        audit_ratings=[config["qc"]["audit_filled"][d] for d in AUDITED_DATASETS],
        swaps=files("results/qc/{dataset}/swaps.jsonl", TABLE_CELLS["swaps"]),
        closed_book=files(
            f"results/generation/{{model}}/{{dataset}}/Qclosed/{CLOSED_BOOK_PROMPT}.jsonl",
            TABLE_CELLS["closed_book"],
        ),
        evid_sweeps=files(
            "results/evidential/{model}/{dataset}/sweep.csv", TABLE_CELLS["evid_sweeps"]
        ),
        evid_efficiency=expand(
            "results/evidential/{model}/{dataset}/efficiency.json",
            model=MODELS,
            dataset=EVID_DATASETS,
        ),
        evid_evaluate_reports=expand(
            "results/evidential/{model}/{dataset}/{condition}/evaluate_report.json",
            model=MODELS,
            dataset=EVID_DATASETS,
            condition=GENERATION_CONDITIONS,
        ),
        cdd_diagnostics=expand(
            "results/cdd/{model}/{dataset}/diagnostics.csv",
            model=MODELS,
            dataset=CDD_DATASETS,
        ),
    output:
        **{
            name: report(
                f"results/tables/{name}.csv",
                caption=f"../workflow/report/tables/{name}.rst",
                category="Tables",
                labels={"table": name},
            )
            for name in TABLES
        },
        other=[
            f"results/tables/{name}.{suffix}"
            for name in TABLES
            for suffix in ("md", "tex", "tidy.csv")
        ],
    log:
        "results/logs/tables.log",
    conda:
        GRABRAG_ENV
    params:
        captions=TABLES,
        cells=TABLE_CELLS,
        seed_sensitivity=stable(
            {name: {**spec, "base_seed": config["seed"]} for name, spec in SEED_VARIANTS.items()}
        ),
        fusion=fusion_settings(),
        order=LISTED_ORDER,
        decoding={model: config["models"][model]["batch"] for model in MODELS},
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
        pdf="results/figures/{figure}.pdf",
        png=report(
            "results/figures/{figure}.png",
            caption="../workflow/report/figure.rst",
            category="Figures",
            labels={"figure": "{figure}"},
        ),
    log:
        "results/logs/figure/{figure}.log",
    conda:
        GRABRAG_ENV
    params:
        settings=figure_settings,
        order=LISTED_ORDER,
        code=script_code("figure.py"),
        cells=figure_cells,
    script:
        "../workflow/scripts/figure.py"
