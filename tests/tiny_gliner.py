"""A tiny GLiNER for the NER tests: a random one-layer backbone, small enough to build in
a second. Its spans mean nothing; the tests check the plumbing (offsets, label mapping,
offline loading, the workflow's swap pool), not the tags."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any


def build_tiny_gliner(
    root: Path, encoder_dir: Path | None = None, tokenizer: Any = None
) -> tuple[Path, Path]:
    """Save the backbone (tokenizer and config) in ``root/backbone`` and the GLiNER model in
    ``root/gliner``; returns (model folder, backbone folder). The backbone is a BERT with
    the vocabulary of the encoder in ``encoder_dir``, or, given a DeBERTa-v2 ``tokenizer``
    (SentencePiece, as microsoft/deberta-v3-base ships), a DeBERTa-v2 as GLiNER medium
    v2.1's. Seeded, so two builds match."""
    import torch
    from gliner import GLiNER, GLiNERConfig
    from transformers import AutoTokenizer, BertConfig, DebertaV2Config

    backbone = root / "backbone"
    shape = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)
    if tokenizer is None:
        tokenizer = AutoTokenizer.from_pretrained(str(encoder_dir), local_files_only=True)
        config = BertConfig(vocab_size=tokenizer.vocab_size, **shape)
    else:
        config = DebertaV2Config(  # DeBERTa-v3's attention: relative, disentangled
            vocab_size=len(tokenizer),
            max_position_embeddings=512,
            pad_token_id=tokenizer.pad_token_id,
            relative_attention=True,
            pos_att_type=["p2c", "c2p"],
            position_biased_input=False,
            position_buckets=256,
            norm_rel_ebd="layer_norm",
            share_att_key=True,
            **shape,
        )
    tokenizer.save_pretrained(backbone)
    config.save_pretrained(backbone)
    torch.manual_seed(0)
    gliner_config = GLiNERConfig(model_name=str(backbone), hidden_size=32, max_width=6, max_len=128)
    model_dir = root / "gliner"
    GLiNER.from_config(
        gliner_config, backbone_from_pretrained=False, load_tokenizer=True
    ).save_pretrained(model_dir)
    return model_dir, backbone


def as_published(model_dir: Path, backbone_name: str = "microsoft/deberta-v3-base") -> None:
    """Make ``model_dir`` look as urchade/gliner_medium-v2.1 does on the hub: the backbone
    named by its hub name, no tokenizer and no encoder config beside the weights."""
    saved = json.loads((model_dir / "gliner_config.json").read_text())
    saved.update(model_name=backbone_name, encoder_config=None, class_token_index=-1, vocab_size=-1)
    (model_dir / "gliner_config.json").write_text(json.dumps(saved))
    for path in model_dir.iterdir():
        if path.name != "gliner_config.json" and not path.name.startswith(("model", "pytorch")):
            shutil.rmtree(path) if path.is_dir() else path.unlink()
