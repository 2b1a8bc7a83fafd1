"""What a config will fetch and run, stated before anything is downloaded.

:func:`plan_text` lists every asset the config uses with its size, from the hub's own
metadata where the hub answers, else the size the config declares (``size_bytes``, the
README's figures), and the model calls each model-calling rule will make: upper bounds
from the design, with every sampled question kept and QC-eligible (the paper keeps 202
of 500 NQ and 330 of 500 HotpotQA questions in QC, so QC and QX cost less than shown).
``snakemake --configfile CONFIG plan`` writes it to ``results/plan.md``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from grabrag.core import registry
from grabrag.core.conditions import (
    CLOSED_BOOK,
    SEED_COMPARED,
    TRUTHFULQA,
    TRUTHFULQA_CONDITIONS,
)
from grabrag.core.plugins import config_modules, load_modules
from grabrag.data.asset_checks import human_bytes
from grabrag.data.asset_hub import asset_bytes
from grabrag.data.truthfulqa import QUESTIONS_IN
from grabrag.pipeline.scope import method_datasets, policies_reading, scoped_policies


def used_assets(config: Mapping[str, Any]) -> list[str]:
    """The assets the config's models, datasets, encoder, tokenizers and verifier name,
    in that order, each once."""
    names = [m["asset"] for m in config["models"].values() if "asset" in m]
    names += [d["asset"] for d in config["datasets"].values()]
    names += [
        config["retrieval"]["encoder"],
        config["contexts"].get("tokenizer"),
        config["ner"]["asset"],
        config["ner"].get("tokenizer"),
    ]
    if policies_reading(config["policies"]["names"], registry.NLI):
        names.append(config["nli"].get("asset"))
    if config.get("truthfulqa_probe"):
        names.append(config["truthfulqa_probe"]["asset"])
    return list(dict.fromkeys(n for n in names if n))


def _scoped(config: Mapping[str, Any], section: str) -> tuple[list[str], list[str]]:
    """(the configured policies a method section scopes, the datasets it runs on)."""
    load_modules(config_modules(config), config)
    policies = scoped_policies(config, section)
    return policies, method_datasets(config, section) if policies else []


def _nli_row(
    config: Mapping[str, Any], m: int, n_by_dataset: Mapping[str, int], conditions: list[str]
) -> dict[str, Any]:
    """P4's verifier: at most one pair per passage of each question and condition."""
    backend = config["nli"]["backend"]
    questions = sum(n_by_dataset.values())
    k = config["contexts"]["n_passages"]
    return {
        "rule": "nli",
        "llm": backend == "llm",
        "jobs": m * len(n_by_dataset) * len(conditions),
        "calls": m * questions * len(conditions) * k,
        "how": f"{backend} verifier: at most one premise-hypothesis pair per passage "
        "where the CB answer is confident",
    }


def _method_questions(
    config: Mapping[str, Any], section: str, n_by_dataset: Mapping[str, int], datasets: list[str]
) -> int:
    """The questions a method runs on over its datasets: each dataset's, or its first
    ``<section>.n_questions``."""
    limit = config[section].get("n_questions")
    return sum(n_by_dataset[d] if limit is None else min(limit, n_by_dataset[d]) for d in datasets)


def _on_first(config: Mapping[str, Any], section: str) -> str:
    """What a method's plan rows add to their "how" when it runs on the first questions."""
    limit = config[section].get("n_questions")
    plural = "s" * (limit != 1)
    return "" if limit is None else f", on each dataset's first {limit} question{plural}"


def _evidential_rows(
    config: Mapping[str, Any], m: int, n_by_dataset: Mapping[str, int], conditions: list[str]
) -> list[dict[str, Any]]:
    """EvidentialRAG's evaluator calls (one per passage) and generator calls (one per
    question and policy), on the datasets its section scopes; none without its policies."""
    evid, evid_datasets = _scoped(config, "evidential")
    if not evid:
        return []
    k = config["contexts"]["n_passages"]
    n = _method_questions(config, "evidential", n_by_dataset, evid_datasets)
    return [
        {
            "rule": "evidential_evaluate",
            "jobs": m * len(evid_datasets) * len(conditions),
            "calls": m * n * len(conditions) * k,
            "how": f"one evaluator call per passage ({k}){_on_first(config, 'evidential')}",
        },
        {
            "rule": "evidential_generate",
            "jobs": m * len(evid_datasets) * len(conditions),
            "calls": m * n * len(conditions) * len(evid),
            "how": f"one generator call per question for each of {', '.join(evid)}"
            + _on_first(config, "evidential"),
        },
    ]


def _cdd_rows(
    config: Mapping[str, Any], m: int, n_by_dataset: Mapping[str, int], conditions: list[str]
) -> list[dict[str, Any]]:
    """The CDD family's calls: the traces (CDD, CDD_ALPHA: steps 1-5 and what the settings
    add) and one call per question for each baseline, on the datasets its section scopes."""
    cdd, cdd_datasets = _scoped(config, "cdd")
    if not cdd:
        return []
    rows = []
    n = _method_questions(config, "cdd", n_by_dataset, cdd_datasets)
    settings = config["cdd"]
    traces = policies_reading(cdd, registry.CDD_TRACES)
    baselines = [p for p in cdd if p not in traces]
    if traces:
        per = 4 + 5 * bool(settings["diagnostics"])
        per += settings["parametric"] == "in_context"
        per += settings["gate"] == "model" and "CDD_ALPHA" in traces
        rows.append(
            {
                "rule": "cdd_generate",
                "jobs": m * len(cdd_datasets) * len(conditions),
                "calls": m * n * len(conditions) * per,
                "how": f"at most {per} calls per question and condition (steps 1-5"
                + (", the diagnostics' reruns" if settings["diagnostics"] else "")
                + (", step 2 in context" if settings["parametric"] == "in_context" else "")
                + (", the model gate" if settings["gate"] == "model" else "")
                + ")"
                + _on_first(config, "cdd"),
            }
        )
    if baselines:
        rows.append(
            {
                "rule": "baselines_generate",
                "jobs": m * len(cdd_datasets) * len(conditions),
                "calls": m * n * len(conditions) * len(baselines),
                "how": f"one call per question for each of {', '.join(baselines)}"
                + _on_first(config, "cdd"),
            }
        )
    return rows


def _seed_sensitivity_rows(
    config: Mapping[str, Any], n_by_dataset: Mapping[str, int], conditions: list[str]
) -> list[dict[str, Any]]:
    """The seed-sensitivity rebuild's P0-P2 calls at the compared conditions, if any."""
    sensitivity = config.get("seed_sensitivity")
    if not sensitivity:
        return []
    compared = [c for c in SEED_COMPARED if c in conditions]
    return [
        {
            "rule": "generate_context_prompts (seed sensitivity)",
            "jobs": len(compared),
            "calls": n_by_dataset[sensitivity["dataset"]] * len(compared) * 3,
            "how": f"{sensitivity['model']} x {sensitivity['dataset']} rebuilt with seed "
            f"{sensitivity['seed']}: P0-P2 at {', '.join(compared)}",
        }
    ]


def _truthfulqa_rows(config: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The TruthfulQA probe's calls: every model-calling rule above, on the probe's dataset
    (one passage per context) at its two conditions, with every configured policy."""
    probe = config.get("truthfulqa_probe")
    if not probe:
        return []
    n = probe["n_questions"] or QUESTIONS_IN[probe["format"]]
    on_probe = {
        **config,
        "datasets": {TRUTHFULQA: {"n_questions": n}},
        "generation": {**config["generation"], "conditions": list(TRUTHFULQA_CONDITIONS)},
        "contexts": {**config["contexts"], "n_passages": 1},
        # the probe's size is its own: a method's n_questions limits the datasets only
        "evidential": {**config["evidential"], "datasets": None, "n_questions": None},
        "cdd": {**config["cdd"], "datasets": None, "n_questions": None},
        "seed_sensitivity": None,
        "seeds": None,  # the probe is one draw: its questions are the file's
        "truthfulqa_probe": None,
    }
    return [{**row, "rule": f"{row['rule']} (TruthfulQA probe)"} for row in model_calls(on_probe)]


def _extra_seed_rows(config: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each further construction seed (seeds) rebuilds every dataset and makes every call
    of the rules above again, on questions of its own."""
    extra = [s for s in config.get("seeds") or () if s != config["seed"]]
    if not extra:
        return []
    once = model_calls(
        {**config, "seeds": None, "seed_sensitivity": None, "truthfulqa_probe": None}
    )
    listed = ", ".join(map(str, extra))
    return [
        {
            **row,
            "rule": f"{row['rule']} (seeds {listed})",
            "jobs": row["jobs"] * len(extra),
            "calls": row["calls"] * len(extra),
            "how": f"as above, for each of the {len(extra)} further seeds",
        }
        for row in once
    ]


def model_calls(config: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per model-calling rule: its jobs and its model calls at most (every question kept
    and QC-eligible), with how the number is made."""
    models = list(config["models"])
    n_by_dataset = {d: spec["n_questions"] for d, spec in config["datasets"].items()}
    conditions = [c for c in config["generation"]["conditions"] if c != CLOSED_BOOK]
    m = len(models)
    questions = sum(n_by_dataset.values())
    rows = [
        {
            "rule": "generate_context_prompts",
            "jobs": m * len(n_by_dataset) * len(conditions),
            "calls": m * questions * len(conditions) * 3,
            "how": f"P0, P1, P2 per question and condition ({', '.join(conditions)})",
        },
        {
            "rule": "generate_closed_book",
            "jobs": m * len(n_by_dataset),
            "calls": m * questions,
            "how": "one closed-book (CB) call per question",
        },
    ]
    if policies_reading(config["policies"]["names"], registry.NLI):
        rows.append(_nli_row(config, m, n_by_dataset, conditions))
    rows += _evidential_rows(config, m, n_by_dataset, conditions)
    rows += _cdd_rows(config, m, n_by_dataset, conditions)
    rows += _seed_sensitivity_rows(config, n_by_dataset, conditions)
    rows += _extra_seed_rows(config)
    rows += _truthfulqa_rows(config)
    return rows


def plan_text(
    config: Mapping[str, Any],
    lookup_hub: bool = True,
    sizes: Mapping[str, tuple[int | None, str]] | None = None,
) -> str:
    """The plan as Markdown: the assets with their sizes and sources, their total, and
    the model calls per rule with their total."""
    assets = config["assets"]
    names = used_assets(config)
    sizes = dict(sizes or {})
    for name in names:
        if name not in sizes:
            sizes[name] = asset_bytes(assets[name], lookup_hub)
    lines = ["# What this config fetches and runs", "", "## Assets", ""]
    lines += ["| asset | source | size | size from |", "|---|---|---|---|"]
    for name in names:
        spec = assets[name]
        source = (
            f"hub {spec['hub']}"
            if "hub" in spec
            else "pypi " + spec["pypi"]
            if "pypi" in spec
            else f"path {spec['path']}"
        )
        size, basis = sizes[name]
        lines.append(f"| {name} | {source} | {human_bytes(size)} | {basis} |")
    known = [s for s, _ in sizes.values() if s is not None]
    unknown = [n for n in names if sizes[n][0] is None]
    total = f"{human_bytes(sum(known))}" + (
        f" plus {len(unknown)} of unknown size ({', '.join(unknown)})" if unknown else ""
    )
    lines += ["", f"In all: {total}. A path asset is read in place, not copied.", ""]
    lines += ["## Model calls (at most: every question kept and QC-eligible)", ""]
    lines += ["| rule | jobs | calls | how |", "|---|---|---|---|"]
    calls = model_calls(config)
    for row in calls:
        lines.append(f"| {row['rule']} | {row['jobs']:,} | {row['calls']:,} | {row['how']} |")
    llm = sum(r["calls"] for r in calls if r.get("llm", True))
    total = sum(r["calls"] for r in calls)
    summary = f"In all: {total:,} model calls"
    if llm != total:
        summary += f", {llm:,} of them LLM calls (the rest: the NLI verifier's pairs)"
    lines += ["", summary + ".", ""]
    return "\n".join(lines)
