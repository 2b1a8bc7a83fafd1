"""What runs the pipeline itself: the config check, the run model (what a config runs and
which files each job reads), the plan before downloads and the code hash that reruns a job
when its library code changes. The stages are numbered as in the rules and the README:
1 data, 2 retrieval, 3 contexts, 4 QC swaps, 5 generation, 6 policies (6b EvidentialRAG,
6c CDD), 7 metrics, 8 tables and figures."""
