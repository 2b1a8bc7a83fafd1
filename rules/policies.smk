# Stage 6: abstention policies. Each reads what its registry entry (grabrag.core.registry)
# declares: P0-P2 their own generation cell, P3 P1 + CB, P4 adds the NLI verdicts. No
# policy job loads a language model.


rule nli:
    input:
        contexts="results/contexts/{dataset}/{condition}.jsonl",
        cb=closed_book_cell,
        verifier=verifier_asset,
    output:
        nli="results/nli/{model}/{dataset}/{condition}.jsonl",
    log:
        "results/logs/nli/{model}/{dataset}/{condition}.log",
    benchmark:
        "results/benchmarks/nli/{model}/{dataset}/{condition}.tsv"
    conda:
        GRABRAG_ENV
    threads: verifier_threads
    resources:
        gpu=verifier_gpus,
    params:
        nli=stable(config["nli"]),
        model=model_settings,
        cutoff=config["policies"]["confidence_cutoff"],
        seed=config["generation"]["seed"],
        code=script_code("nli.py"),
    script:
        "../workflow/scripts/nli.py"


rule policy:
    input:
        unpack(policy_inputs),
    output:
        decisions="results/policies/{model}/{dataset}/{condition}/{policy}.jsonl",
    log:
        "results/logs/policy/{model}/{dataset}/{condition}/{policy}.log",
    conda:
        GRABRAG_ENV
    params:
        settings=policy_settings,
        policy_code=policy_code,
        code=script_code("policy.py"),
    script:
        "../workflow/scripts/policy.py"


rule p3_sweep:
    input:
        unpack(p3_sweep_qc_input),
        p1_q100="results/generation/{model}/{dataset}/Q100/P1.jsonl",
        cb="results/generation/{model}/{dataset}/Qclosed/CB.jsonl",
        p1_decisions="results/policies/{model}/{dataset}/Q100/P1.jsonl",
        q100="results/contexts/{dataset}/Q100.jsonl",
    output:
        sweep="results/policies/{model}/{dataset}/P3_sweep.csv",
    log:
        "results/logs/p3_sweep/{model}/{dataset}.log",
    conda:
        GRABRAG_ENV
    params:
        grid=p3_sweep_grid(
            config["policies"]["f1_threshold"], config["policies"]["confidence_cutoff"]
        ),
        code=script_code("p3_sweep.py"),
    script:
        "../workflow/scripts/p3_sweep.py"
