"""Local stand-ins for every hub asset of the shipped configs, each in the format of the
asset it replaces, and the rehearsal configs that fetch them.

A stand-in is served by tests/local_hub.py under the real repository name, so the
workflow fetches it through the real asset registry (pin, lock, export) and loads it with
the real loaders; only the bytes are small:

* the three GGUF models: micro models (tests/micro_model.py) carrying the chat templates
  of Phi-4-mini, Llama-3.1 and Qwen2.5 (tests/chat_templates.py);
* BGE-small: a sentence-transformers folder in BGE's layout (Transformer, CLS pooling,
  Normalize) around all-MiniLM-L6-v2's weights;
* the DeBERTa-v3 NLI verifier: a random two-layer DeBERTa-v2 classifier with the published
  model's ``id2label`` (entailment, neutral, contradiction);
* GLiNER medium v2.1: a random GLiNER on a one-layer DeBERTa-v2 backbone, saved as the
  published one is (no tokenizer, the backbone named microsoft/deberta-v3-base), and that
  backbone repository with the three files the config takes from it;
* the three hub datasets: rows in the hub datasets' schemas and splits
  (tests/fixtures/hub/: NQ-open-gold's ``test`` split, HotpotQA distractor's
  ``validation``, TruthfulQA's ``generation`` ``validation``, the last written from the
  questions of tests/bigbench_standins.py).

A config that declares BIG-bench's TruthfulQA file from PyPI (its container, the bigbench
1.0.0 sdist, is no longer served) gets the tiny config's stand-in of it instead.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import yaml

from .chat_templates import BY_REPO
from .micro_model import build_micro_gguf

REPO = Path(__file__).resolve().parents[1]
GONE_FROM_PYPI = "bigbench==1.0.0"
HUB_FIXTURES = REPO / "tests" / "fixtures" / "hub"
BGE = "BAAI/bge-small-en-v1.5"
NLI = "MoritzLaurer/DeBERTa-v3-large-mnli-fever-anli-ling-wanli"
GLINER = "urchade/gliner_medium-v2.1"
GLINER_BACKBONE = "microsoft/deberta-v3-base"
# The rehearsal's questions per dataset: enough for every condition (Q0's hard negatives
# come from the other questions' gold passages) and the seed-43 rebuild's own sample.
REHEARSAL_QUESTIONS = {"nq": 3, "hotpotqa": 3}
REHEARSAL_PROBE_QUESTIONS = 2  # the TruthfulQA probe's, where the config runs it


def _bge_layout(minilm: Path, target: Path) -> None:
    """BGE-small-en-v1.5's sentence-transformers layout: CLS pooling, then Normalize."""
    shutil.copytree(minilm, target)
    (target / "1_Pooling" / "config.json").write_text(
        json.dumps(
            {
                "word_embedding_dimension": 384,
                "pooling_mode_cls_token": True,
                "pooling_mode_mean_tokens": False,
                "pooling_mode_max_tokens": False,
                "pooling_mode_mean_sqrt_len_tokens": False,
            },
            indent=2,
        )
    )
    (target / "2_Normalize").mkdir()
    (target / "modules.json").write_text(
        json.dumps(
            [
                {
                    "idx": 0,
                    "name": "0",
                    "path": "",
                    "type": "sentence_transformers.models.Transformer",
                },
                {
                    "idx": 1,
                    "name": "1",
                    "path": "1_Pooling",
                    "type": "sentence_transformers.models.Pooling",
                },
                {
                    "idx": 2,
                    "name": "2",
                    "path": "2_Normalize",
                    "type": "sentence_transformers.models.Normalize",
                },
            ],
            indent=2,
        )
    )


def _gliner(work: Path, target: Path, backbone_target: Path) -> None:
    from .test_nli import _tokenizer, spm_model
    from .tiny_gliner import as_published, build_tiny_gliner

    model_dir, backbone = build_tiny_gliner(work, tokenizer=_tokenizer())
    as_published(model_dir, GLINER_BACKBONE)
    shutil.copytree(model_dir, target)
    # microsoft/deberta-v3-base's tokenizer is its SentencePiece model and a two-key
    # tokenizer_config.json (no tokenizer.json): the three files the config takes.
    backbone_target.mkdir(parents=True)
    shutil.copy(backbone / "config.json", backbone_target / "config.json")
    (backbone_target / "spm.model").write_bytes(spm_model())
    (backbone_target / "tokenizer_config.json").write_text(
        json.dumps({"do_lower_case": False, "vocab_type": "spm"})
    )
    # the real repository also holds the backbone's weights, which no asset takes
    (backbone_target / "pytorch_model.bin").write_bytes(b"not fetched: outside 'files'")


def build_upstream(root: Path, resources: Path, specs: dict[str, dict]) -> dict[str, str]:
    """Put a stand-in for every hub asset in ``specs`` under ``root/<repository>``; returns
    the sha256 of each stand-in GGUF by asset name. A hub repository without a stand-in
    here is an error, so a new shipped asset cannot go unrehearsed."""
    from grabrag.data.asset_checks import sha256_file
    from grabrag.data.assets import resolve

    from .test_nli import USUAL_ORDER, _save_classifier, _tokenizer

    smollm2 = resolve(resources / "smollm2-135m-instruct-q4_1" / "manifest.json")
    minilm = resolve(resources / "all-minilm-l6-v2" / "manifest.json")
    shas: dict[str, str] = {}
    for name, spec in specs.items():
        repo = spec.get("hub")
        if repo is None or (root / repo).exists():
            continue
        target = root / repo
        if spec.get("filename", "").endswith(".gguf"):
            built = build_micro_gguf(
                smollm2, target / spec["filename"], chat_template=BY_REPO[repo]
            )
            shas[name] = sha256_file(built)
        elif repo == BGE:
            _bge_layout(minilm, target)
        elif repo == NLI:
            _save_classifier(target, _tokenizer(), USUAL_ORDER)
        elif repo == GLINER:
            _gliner(root / ".work" / "gliner", target, root / GLINER_BACKBONE)
        elif repo == GLINER_BACKBONE:
            continue  # built with GLiNER
        elif (HUB_FIXTURES / repo).is_dir():
            shutil.copytree(HUB_FIXTURES / repo, target)
        else:
            raise AssertionError(f"no stand-in for hub asset {name!r} ({repo}): add one")
    return shas


def _tiny_standin(member: str) -> dict[str, Any]:
    """The tiny config's stand-in (a `path` asset) of a member of the bigbench sdist."""
    assert member.endswith("truthful_qa/questions.json"), member
    tiny = yaml.safe_load((REPO / "tests" / "config" / "tiny.yaml").read_text())
    return tiny["assets"]["bigbench-truthful-qa-standin"]


def rehearsal_config(
    shipped: Path,
    shas: dict[str, str],
    models: list[str] | None = None,
    datasets: list[str] | None = None,
) -> dict[str, Any]:
    """``shipped`` with its hub assets served by the stand-ins and only its multiplicity
    shrunk: a few questions per dataset (and in the TruthfulQA probe), its base seed alone
    (each further seed in ``seeds`` repeats every job on another draw; tests/test_seeds.py
    runs two seeds) and, when given, a subset of its ``models`` and ``datasets`` (the
    seed-43 rebuild moves to the first of each kept when its own cell is gone); every
    backend, adapter, condition, policy and table stays as shipped.

    Two settings follow from the stand-ins, not from the config: a GGUF's pinned sha256 is
    the stand-in's (a pin stays a pin), and each model may fall back to the CPU (its
    ``n_gpu_layers`` stays as shipped; CI has no GPU)."""
    config = yaml.safe_load(shipped.read_text())
    for name, spec in config["assets"].items():
        if "sha256" in spec and name in shas:
            spec["sha256"] = shas[name]
        if spec.get("pypi") == GONE_FROM_PYPI:
            config["assets"][name] = _tiny_standin(spec["member"])
    if models is not None:
        config["models"] = {m: config["models"][m] for m in models}
    if datasets is not None:
        config["datasets"] = {d: config["datasets"][d] for d in datasets}
    seed = config.get("seed_sensitivity")
    if seed and (
        seed["model"] not in config["models"] or seed["dataset"] not in config["datasets"]
    ):
        seed.update(model=next(iter(config["models"])), dataset=next(iter(config["datasets"])))
    config["seeds"] = None
    for model in config["models"].values():
        model["allow_cpu"] = True
    for name, dataset in config["datasets"].items():
        dataset["n_questions"] = REHEARSAL_QUESTIONS[name]
    if config.get("truthfulqa_probe"):
        config["truthfulqa_probe"]["n_questions"] = REHEARSAL_PROBE_QUESTIONS
    return config
