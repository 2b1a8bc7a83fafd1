# Stage 7-8: metrics with paired bootstrap CIs, the paper's tables and figures.
# Each table and figure is a job of its own that reads the output kinds its spec declares
# (grabrag.report.specs); editing its module's code or its settings reruns it alone.


rule audit_hwsa:
    input:
        audit=audit_ratings,
        qc_contexts="results/contexts/{dataset}/QC.jsonl",
        decisions=lambda w: files(DECISION_FILE, audit_decision_cells(w)),
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
        decisions=lambda w: files(DECISION_FILE, metric_decision_cells(w)),
        contexts=lambda w: files(CONTEXT_FILE, metric_context_cells(w)),
    output:
        metrics="results/metrics/{dataset}.csv",
    log:
        "results/logs/metrics/{dataset}.log",
    conda:
        GRABRAG_ENV
    params:
        code=script_code("metrics.py"),
        question_limits=RUN.question_limits,
        bootstrap=stable(config["bootstrap"]),
        seed=config["seed"],
        build_seed=lambda w: RUN.construction_seed(w.dataset),
        decision_cells=lambda w: RUN.labelled(metric_decision_cells(w)),
        context_cells=lambda w: RUN.labelled(metric_context_cells(w)),
    script:
        "../workflow/scripts/metrics.py"


rule pooled_metrics:
    input:
        decisions=lambda w: files(DECISION_FILE, RUN.seeded(metric_decision_cells(w))),
        contexts=lambda w: files(CONTEXT_FILE, RUN.seeded(metric_context_cells(w))),
    output:
        metrics="results/metrics/across_seeds/{dataset}.csv",
    log:
        "results/logs/pooled_metrics/{dataset}.log",
    wildcard_constraints:
        dataset=_alternatives(RUN.datasets),
    conda:
        GRABRAG_ENV
    params:
        code=script_code("pooled_metrics.py"),
        question_limits=RUN.question_limits,
        bootstrap=stable(config["bootstrap"]),
        seed=config["seed"],
        seeds=RUN.seeds,
        decision_cells=metric_decision_cells,
        context_cells=metric_context_cells,
    script:
        "../workflow/scripts/pooled_metrics.py"


rule abstention_over_datasets:
    input:
        decisions=files(DECISION_FILE, RUN.all_decision_cells()),
        contexts=files(CONTEXT_FILE, RUN.all_context_cells()),
    output:
        metrics="results/metrics/over_datasets/abstention.csv",
    log:
        "results/logs/metrics/abstention_over_datasets.log",
    conda:
        GRABRAG_ENV
    params:
        code=script_code("abstention_over_datasets.py"),
        question_limits=RUN.question_limits,
        bootstrap=stable(config["bootstrap"]),
        seed=config["seed"],
        decision_cells=RUN.all_decision_cells(),
        context_cells=RUN.all_context_cells(),
    script:
        "../workflow/scripts/abstention_over_datasets.py"


rule table:
    input:
        unpack(report_inputs),
    output:
        csv="results/tables/{table}.csv",
        md="results/tables/{table}.md",
        tex="results/tables/{table}.tex",
        tidy="results/tables/{table}.tidy.csv",
        html="results/tables/{table}.html",
    log:
        "results/logs/table/{table}.log",
    conda:
        GRABRAG_ENV
    params:
        cells=report_cells,
        settings=report_settings,
        caption=table_caption,
        order=RUN.listed_order,
        decoding=RUN.decoding(),
        served=RUN.served_models(),
        module_code=report_code,
        code=script_code("table.py"),
    script:
        "../workflow/scripts/table.py"


rule seed_table:
    input:
        unpack(seed_report_inputs),
    output:
        csv="results/tables/seed{seed}/{table}.csv",
        md="results/tables/seed{seed}/{table}.md",
        tex="results/tables/seed{seed}/{table}.tex",
        tidy="results/tables/seed{seed}/{table}.tidy.csv",
        html="results/tables/seed{seed}/{table}.html",
    log:
        "results/logs/seed_table/{seed}/{table}.log",
    wildcard_constraints:
        table=_alternatives(RUN.seeded_tables),
    conda:
        GRABRAG_ENV
    params:
        cells=report_cells,
        settings=report_settings,
        caption=lambda wildcards: f"Construction seed {wildcards.seed}. {table_caption(wildcards)}",
        order=RUN.listed_order,
        decoding=RUN.decoding(),
        served=RUN.served_models(),
        module_code=report_code,
        code=script_code("table.py"),
    script:
        "../workflow/scripts/table.py"


rule across_seeds_table:
    input:
        tables=lambda wildcards: [
            f"results/tables/{wildcards.table}.tidy.csv",
            *(f"results/tables/seed{seed}/{wildcards.table}.tidy.csv" for seed in RUN.extra_seeds),
        ],
        # the metrics over every seed's questions pooled, for a table built from them alone
        metrics=lambda wildcards: (
            files("results/metrics/across_seeds/{dataset}.csv", RUN.output_cells("metrics"))
            if wildcards.table in RUN.pooled_tables
            else []
        ),
    output:
        csv="results/tables/across_seeds/{table}.csv",
        md="results/tables/across_seeds/{table}.md",
        tex="results/tables/across_seeds/{table}.tex",
        tidy="results/tables/across_seeds/{table}.tidy.csv",
        html="results/tables/across_seeds/{table}.html",
    log:
        "results/logs/across_seeds_table/{table}.log",
    wildcard_constraints:
        table=_alternatives(RUN.seeded_tables),
    conda:
        GRABRAG_ENV
    params:
        seeds=RUN.seeds,
        pooled=lambda wildcards: wildcards.table in RUN.pooled_tables,
        cells=RUN.report_cells(["metrics"]),
        settings=report_settings,
        caption=lambda wildcards: across_seeds_caption(wildcards.table),
        order=RUN.listed_order,
        module_code=report_code,
        code=script_code("across_seeds_table.py"),
    script:
        "../workflow/scripts/across_seeds_table.py"


rule figure:
    input:
        unpack(report_inputs),
    output:
        pdf="results/figures/{figure}.pdf",
        png=report(
            "results/figures/{figure}.png",
            caption="../workflow/report/figure.rst",
            category="Figures",
            labels=lambda wildcards: {"figure": RUN.figure_labels[wildcards.figure]},
        ),
    log:
        "results/logs/figure/{figure}.log",
    conda:
        GRABRAG_ENV
    params:
        cells=report_cells,
        settings=report_settings,
        report_caption=report_caption("figures"),
        order=RUN.listed_order,
        module_code=report_code,
        code=script_code("figure.py"),
    script:
        "../workflow/scripts/figure.py"


# The report's tables: each table's HTML page, copied in one job into the folder the report
# lists, so that the report's info panel shows the caption and not the table job's params.
rule table_pages:
    input:
        lambda w: RUN.table_page_files(w.pages),
    output:
        pages=report(
            directory("results/report/{pages}"),
            patterns=["{table}.html"],
            caption="../workflow/report/table_page.rst",
            category=lambda wildcards: TABLE_PAGES[wildcards.pages],
            labels=lambda wildcards: {"table": RUN.table_labels[wildcards.table]},
        ),
    log:
        "results/logs/table_pages/{pages}.log",
    wildcard_constraints:
        pages="|".join(TABLE_PAGES),
    conda:
        GRABRAG_ENV
    shell:
        "(mkdir -p {output.pages:q} && cp {input:q} {output.pages:q}/) > {log:q} 2>&1"


# The papers' published numbers (workflow/grabrag/report/published/) against this run's
# tables, and the papers' headline findings checked as claims.
rule reproduction:
    input:
        tables=RUN.reproduction_inputs(),
    output:
        **{
            f"{name}_{suffix}": f"results/tables/{name}.{suffix.replace('_', '.')}"
            for name in REPRODUCTION_TABLES
            for suffix in ("csv", "md", "tex", "tidy_csv", "html")
        },
    log:
        "results/logs/table/reproduction.log",
    conda:
        GRABRAG_ENV
    params:
        models=RUN.models,
        datasets=RUN.datasets,
        seed_sensitivity=config["seed_sensitivity"],
        captions={name: extra_caption(name) for name in REPRODUCTION_TABLES},
        published=PUBLISHED_NUMBERS,
        code=script_code("reproduction.py"),
    script:
        "../workflow/scripts/reproduction.py"


# What the run's model calls cost, per model and stage, beside the plan's estimate.
rule cost_ledger:
    input:
        [f["file"] for f in LEDGER_FILES],
    output:
        csv="results/tables/cost_ledger.csv",
        md="results/tables/cost_ledger.md",
        tex="results/tables/cost_ledger.tex",
        tidy="results/tables/cost_ledger.tidy.csv",
        html="results/tables/cost_ledger.html",
    log:
        "results/logs/table/cost_ledger.log",
    conda:
        GRABRAG_ENV
    params:
        files=LEDGER_FILES,
        models=RUN.models,
        planned=planned_calls(config),
        caption=extra_caption("cost_ledger"),
        code=script_code("cost_ledger.py"),
    script:
        "../workflow/scripts/cost_ledger.py"
