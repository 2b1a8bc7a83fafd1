# Stage 5, before any cell of a served model: its server proves itself. The canary sends
# probes that ask for prose under a grammar in the configured constraint dialect; a server
# that ignores the constraint stops the run here, naming the model, the dialect and the
# reply. The canary file records the server's identity and context window, and every
# model job of that model reads it: a new canary (the endpoint entry changed, or
# `--forcerun endpoint_canary` after the server changed) reruns the model's cells.


rule endpoint_canary:
    output:
        canary="results/endpoint/{model}/canary.json",
    log:
        "results/logs/endpoint_canary/{model}.log",
    wildcard_constraints:
        model=SERVED_MODELS,
    conda:
        GRABRAG_ENV
    params:
        model=model_settings,
        generation=RUN.generation_settings(),
        code=script_code("endpoint_canary.py"),
    script:
        "../workflow/scripts/endpoint_canary.py"
