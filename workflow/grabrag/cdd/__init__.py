"""Stage 6c, Context-Driven Decomposition (CDD): the method, its contradiction gate and
baselines, and its runs and diagnostics in the workflow."""
