# Stage 7-8: metrics with paired bootstrap CIs, the paper's tables and figures.
# Editing `bootstrap:` reruns metrics, tables and figures only; plotting code, figures only.

TABLES = {
    "table1_hwsa": "Table 1: HwSA at Q0 vs QC on paired QC-eligible questions (%).",
    "table2_policies": "Table 2: policies macro-averaged over model x dataset cells (%).",
    "table3_qc_sources": "Table 3: QC answers by source, pooled over datasets and policies.",
    "table7_hwsa_ci": "Table 7: HwSA with 95% bootstrap CIs (%).",
    "table8_fac_ci": "Table 8: FAC and answer rates with 95% bootstrap CIs (%).",
    "table9_qc_sources": "Table 9: QC answer sources per cell (%).",
    "table10_aurc": "Table 10: AURC by model, dataset and policy (lower is better).",
    "table11_ece": "Table 11: ECE (10 bins) by policy and condition, mean over cells.",
    "table11b_ece15": "ECE with 15 bins (EvidentialRAG's form) by policy and condition.",
    "table12_p3_sweep": "Table 12: P3 sensitivity to the F1 threshold, confidence cutoff 50 (%).",
    "normalised_hwsa": "Normalised HwSA: HwSA@QC / Ans@Q100 (section 6) (%).",
    "selection_bias": "Q100 EM on QC-eligible vs excluded questions (section 6) (%).",
    "parse_failures": "Generation parse status per cell.",
}
if "QX" in GENERATION_CONDITIONS:
    TABLES["hwsa_conditions"] = (
        "HwSA (answer rate) at Q0, QC and QX with 95% CIs, and QX - QC on paired questions (%)."
    )
if EVID_POLICIES:
    TABLES.update(
        {
            "evid_results": (
                "EvidentialRAG beside P0-P4: HwSA at should-abstain conditions, FAC at Q100/Q50, "
                "refusal precision/recall/F1 (pooled over conditions) and 15-bin ECE."
            ),
            "evid_efficiency": (
                "EvidentialRAG efficiency vs P1: seconds per query, logical LLM decisions, "
                "executed passes, peak memory, relative cost (Table 11's form)."
            ),
            "evid_lambda_sweep": (
                "EvidentialRAG fusion rule and lambda sweep at the configured thresholds, from "
                "stored evaluations (Table 9's form) (%)."
            ),
            "evid_tau_sweep": (
                "EvidentialRAG routing-threshold sweep at the configured lambda, from stored "
                "evaluations (Table 10's form) (%)."
            ),
            "evid_ablation": (
                "EvidentialRAG ablations without fusion (averaging) and without routing, from "
                "stored evaluations (Table 12's form) (%)."
            ),
        }
    )
# CDD, CDD-alpha and the baselines (rules/cdd.smk, included before this file).
TABLES.update(CDD_TABLES)
if SEED_VARIANTS:
    TABLES["table13_seed_sensitivity"] = (
        "Table 13: seed sensitivity of HwSA (answer rate at Q0 and QC) per policy (%)."
    )


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
    params:
        code=library_code("metrics.py", "evaluate.py", "bootstrap.py"),
        bootstrap=stable(config["bootstrap"]),
        seed=config["seed"],
    log:
        f"{RESULTS}/logs/metrics/{{dataset}}.log",
    conda:
        GRABRAG_ENV
    script:
        "../workflow/scripts/metrics.py"


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
        cdd_diagnostics=expand(
            f"{RESULTS}/cdd/{{model}}/{{dataset}}/diagnostics.csv",
            model=MODELS,
            dataset=CDD_DATASETS,
        ),
    output:
        **{
            name: report(
                f"{RESULTS}/tables/{name}.csv",
                caption="../workflow/report/table.rst",
                category="Tables",
                labels={"table": name},
            )
            for name in TABLES
        },
        other=[
            f"{RESULTS}/tables/{name}.{suffix}" for name in TABLES for suffix in ("md", "tex")
        ],
    params:
        captions=TABLES,
        seed_sensitivity=stable(
            {name: {**spec, "base_seed": config["seed"]} for name, spec in SEED_VARIANTS.items()}
        ),
        fusion=fusion_settings(),
        code=library_code("tables.py"),
    log:
        f"{RESULTS}/logs/tables.log",
    conda:
        GRABRAG_ENV
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
    params:
        fusion=lambda wildcards: fusion_settings() if wildcards.figure == "lambda_sweep" else {},
        code=library_code("figures.py"),
    log:
        f"{RESULTS}/logs/figure/{{figure}}.log",
    conda:
        GRABRAG_ENV
    script:
        "../workflow/scripts/figure.py"
