# GRAB-RAG: abstention under missing and misleading retrieved evidence.
# This file only validates the config and includes the stages; see README.md.

import os

from snakemake.utils import min_version

min_version("9.0")


report: "workflow/report/workflow.rst"


# config.yaml is the embedded default. A config given with --configfile replaces it
# whole instead of being merged into it, so config/paper.yaml runs only the paper's
# models and datasets.
# The path is the workflow's own: with --directory elsewhere, a relative "config.yaml"
# would be looked up there, missed, and the schema defaults run instead.
if not workflow.overwrite_configfiles:

    configfile: os.path.join(workflow.basedir, "config.yaml")


include: "rules/common.smk"
include: "rules/assets.smk"
include: "rules/data.smk"
include: "rules/retrieval.smk"
include: "rules/contexts.smk"
include: "rules/truthfulqa.smk"
include: "rules/qc.smk"
include: "rules/endpoint.smk"
include: "rules/generate.smk"
include: "rules/reask.smk"
include: "rules/policies.smk"
include: "rules/evidential.smk"
include: "rules/cdd.smk"
include: "rules/report.smk"


rule all:
    default_target: True
    input:
        RUN.targets(),


# Every rule that runs a script passes its code hash, every GPU rule writes a benchmark.
check_rules()


# profiles/default holds local defaults: one GPU job at a time (resources: gpu=1) and this
# machine's CPUs (cores: all). Snakemake loads it as the workflow profile with
# `--profile profiles/slurm` too, and a workflow profile wins key by key, so on a cluster
# they would run the GPU jobs one after another and cap every job's threads (its
# cpus_per_task) at the submitting host's CPUs. A cluster job gets its own allocation:
# there, the GPU jobs are bounded only by `jobs` and the scheduler, and the threads come
# from the rule and `set-threads`. The largest `set-threads` value (or this host's CPUs,
# if more) stays the cap, because a group job asks for the sum of a layer's threads and
# 20 one-thread policy jobs must not ask for 20 CPUs. The executor is not known yet while
# this file is read; `jobs` (workflow.nodes) is set for cluster and cloud runs only, and
# the jobs running on the cluster's nodes (remote mode) keep their own limits.
if workflow.nodes is not None and not workflow.remote_exec:
    workflow.global_resources["gpu"] = None
    _set_threads = (workflow.resource_settings.overwrite_threads or {}).values()
    workflow.global_resources["_cores"] = max(
        [workflow.cores, *(getattr(t, "value", t) for t in _set_threads)]
    )
