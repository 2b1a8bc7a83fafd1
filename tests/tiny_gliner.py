"""A tiny GLiNER for the NER tests: a random one-layer BERT backbone with the MiniLM
vocabulary, small enough to build in a second. Its spans mean nothing; the tests check
the plumbing (offsets, label mapping, offline loading), not the tags."""

from __future__ import annotations

from pathlib import Path


def build_tiny_gliner(root: Path, encoder_dir: Path) -> tuple[Path, Path]:
    """Save the backbone (tokenizer and config) in ``root/backbone`` and the GLiNER model in
    ``root/gliner``; returns (model folder, backbone folder). Seeded, so two builds match."""
    import torch
    from gliner import GLiNER, GLiNERConfig
    from transformers import AutoTokenizer, BertConfig

    backbone = root / "backbone"
    tokenizer = AutoTokenizer.from_pretrained(str(encoder_dir), local_files_only=True)
    tokenizer.save_pretrained(backbone)
    BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
    ).save_pretrained(backbone)
    torch.manual_seed(0)
    config = GLiNERConfig(model_name=str(backbone), hidden_size=32, max_width=6, max_len=128)
    model_dir = root / "gliner"
    GLiNER.from_config(config, backbone_from_pretrained=False, load_tokenizer=True).save_pretrained(
        model_dir
    )
    return model_dir, backbone
