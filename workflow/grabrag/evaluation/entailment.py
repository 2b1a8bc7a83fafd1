"""The TruthfulQA probe's entailment scorer over a local NLI model: P4's transformers
backend (:class:`~grabrag.policies.nli.TransformersNli`) asked for label probabilities
instead of argmax labels."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from grabrag.scoring.truthfulness import NliScorer


def label_probabilities(model: Any, pairs: Sequence[tuple[str, str]]) -> list[dict[str, float]]:
    """Per (premise, hypothesis) pair, the softmax probability of each of the model's
    labels (entailment, neutral, contradiction), in the order given."""
    out = []
    for scores in model.logits(pairs):
        top = max(scores)
        weights = [math.exp(s - top) for s in scores]
        total = sum(weights)
        out.append({model.labels[i]: w / total for i, w in enumerate(weights)})
    return out


def nli_scorer(model_dir: str | Path, *, name: str, **settings: Any) -> NliScorer:
    """The entailment scorer over the NLI model in ``model_dir`` (``settings``:
    batch_size, device, as P4's verifier takes them)."""
    from grabrag.policies.nli import TransformersNli

    model = TransformersNli(model_dir, name=name, **settings)
    return NliScorer(lambda pairs: label_probabilities(model, pairs), name)
