"""Pluggable named-entity recognisers for the QC swap pipeline (GRAB-RAG Appendix C).

Every backend returns, per text, a list of :class:`Span` (surface text, character
offsets, internal type). The internal types are the paper's swap-pool types::

    PERSON, ORG, GPE, NORP, LOC, EVENT, WORK_OF_ART

* :class:`GlinerNer` is the paper's recogniser: GLiNER prompted with the eight labels of
  Table 4 at threshold 0.5. Table 4 maps eight labels to the types above; the caption
  says "six internal types" but the table lists seven (NORP included), and the pipeline
  text uses NORP, so we keep all seven.
* :class:`SpacyNer` is the embedded default (no GLiNER weights exist offline): spaCy's
  OntoNotes labels with the same names map 1:1; every other label (DATE, CARDINAL, ...)
  is ignored.

Both load from local folders only; nothing is fetched from a hub (a GLiNER folder without
its backbone's tokenizer needs the tokenizer asset of ``ner.tokenizer``).
"""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from grabrag.core.errors import AssetError

INTERNAL_TYPES = ("PERSON", "ORG", "GPE", "NORP", "LOC", "EVENT", "WORK_OF_ART")

# Table 4: GLiNER prompting label -> internal type (eight labels, seven types).
GLINER_LABELS: dict[str, str] = {
    "person": "PERSON",
    "organization": "ORG",
    "country": "GPE",
    "city": "GPE",
    "nationality or group": "NORP",
    "location": "LOC",
    "event": "EVENT",
    "work of art": "WORK_OF_ART",
}

# spaCy's OntoNotes labels that are internal types (same names); the rest are ignored.
SPACY_LABELS: dict[str, str] = {label: label for label in INTERNAL_TYPES}


@dataclass(frozen=True)
class Span:
    """One recognised entity: ``text == source[start:end]``."""

    text: str
    start: int
    end: int
    type: str

    def as_dict(self) -> dict[str, object]:
        return {"text": self.text, "start": self.start, "end": self.end, "type": self.type}


@runtime_checkable
class NerBackend(Protocol):
    """What the swap pipeline needs from a recogniser."""

    name: str

    def predict(self, texts: Sequence[str]) -> list[list[Span]]:
        """Entities of every text (in order), typed with the internal types."""
        ...


def _spans_sorted(spans: list[Span]) -> list[Span]:
    return sorted(set(spans), key=lambda s: (s.start, -s.end, s.type))


class SpacyNer:
    """spaCy pipeline loaded from a model folder (``spacy.load(path)``).

    Only the lemmatizer is left out: the parser's sentence boundaries change a few
    entities of en_core_web_sm, so it stays for output identical to the full pipeline.
    """

    name = "spacy"

    def __init__(self, model_dir: str | Path, batch_size: int = 64) -> None:
        import spacy

        path = Path(model_dir)
        if not path.exists():
            raise AssetError(f"spaCy model folder {path} does not exist")
        try:
            self.nlp = spacy.load(path, exclude=["lemmatizer"])
        except OSError as error:
            raise AssetError(f"could not load a spaCy model from {path}: {error}") from None
        if "ner" not in self.nlp.pipe_names:
            raise AssetError(f"spaCy model at {path} has no 'ner' component")
        self.batch_size = batch_size

    def predict(self, texts: Sequence[str]) -> list[list[Span]]:
        out: list[list[Span]] = []
        for doc in self.nlp.pipe(list(texts), batch_size=self.batch_size):
            spans = [
                Span(ent.text, ent.start_char, ent.end_char, SPACY_LABELS[ent.label_])
                for ent in doc.ents
                if ent.label_ in SPACY_LABELS
            ]
            out.append(_spans_sorted(spans))
        return out


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def chunk_text(text: str, max_words: int) -> list[tuple[int, str]]:
    """Split ``text`` into (offset, piece) windows of at most ``max_words`` words.

    GLiNER truncates inputs longer than its ``max_len`` words silently (a warning), which
    would lose every entity past the cut. Windows end at sentence ends when possible; a
    sentence longer than the window is split at word boundaries.
    """
    sentences: list[tuple[int, int]] = []
    start = 0
    for match in _SENTENCE_END.finditer(text):
        sentences.append((start, match.start()))
        start = match.end()
    sentences.append((start, len(text)))

    pieces: list[tuple[int, int]] = []
    for s_start, s_end in sentences:
        words = list(re.finditer(r"\S+", text[s_start:s_end]))
        for k in range(0, len(words), max_words):
            group = words[k : k + max_words]
            if group:
                pieces.append((s_start + group[0].start(), s_start + group[-1].end()))
    chunks: list[tuple[int, int, int]] = []  # start, end, words
    for p_start, p_end in pieces:
        n = len(text[p_start:p_end].split())
        if chunks and chunks[-1][2] + n <= max_words:
            chunks[-1] = (chunks[-1][0], p_end, chunks[-1][2] + n)
        else:
            chunks.append((p_start, p_end, n))
    return [(c_start, text[c_start:c_end]) for c_start, c_end, _ in chunks] or [(0, text)]


class GlinerNer:
    """GLiNER from a local model folder, prompted with the eight labels of Table 4.

    A GLiNER folder may lack its backbone's tokenizer (and, in older saves, the backbone's
    config): GLiNER then fetches them from the hub under the backbone's name
    (``model_name`` in gliner_config.json). Here that is never allowed: such a model
    needs ``tokenizer_dir``, a local folder with the backbone's tokenizer files and
    config.json, and is loaded from a view of its folder whose config names that folder
    as the backbone.
    """

    name = "gliner"

    def __init__(
        self,
        model_dir: str | Path,
        threshold: float = 0.5,
        batch_size: int = 8,
        max_words: int | None = None,
        map_location: str = "cpu",
        tokenizer_dir: str | Path | None = None,
        asset: str | None = None,
        tokenizer_asset: str | None = None,
    ) -> None:
        try:
            from gliner import GLiNER
        except ImportError:
            raise AssetError(
                "the 'gliner' package is not installed; install gliner==0.2.29 "
                "(pip install --no-deps gliner==0.2.29 sentencepiece) or use ner.backend: spacy"
            ) from None
        path = Path(model_dir)
        if not path.exists():
            raise AssetError(f"GLiNER model folder {path} does not exist")
        config_file = path / "gliner_config.json"
        if not config_file.is_file():
            raise AssetError(f"GLiNER model folder {path} has no gliner_config.json")
        config = json.loads(config_file.read_text(encoding="utf-8"))
        backbone = config.get("model_name")
        needs = []
        if not (path / "tokenizer_config.json").is_file():
            needs.append("tokenizer")
        if config.get("encoder_config") is None:
            needs.append("config.json")
        model = f"asset '{asset}'" if asset else str(path)
        with tempfile.TemporaryDirectory(prefix="gliner-") as view:
            if needs:
                if tokenizer_dir is None:
                    raise AssetError(
                        f"GLiNER model {model} has no backbone {' and '.join(needs)} in {path}: "
                        f"GLiNER would download them from '{backbone}' on the Hugging Face "
                        "hub, which no asset declares. Declare that repository as an asset "
                        f"(hub: {backbone}, revision: <commit>, files: [config.json, "
                        "tokenizer_config.json and the tokenizer's vocabulary files]) and "
                        "name it in ner.tokenizer"
                    )
                source = self._backbone_view(
                    path, config, Path(tokenizer_dir), Path(view), tokenizer_asset, model
                )
            else:
                source = path
            self.model = GLiNER.from_pretrained(
                str(source), local_files_only=True, map_location=map_location
            )
        self.model.eval()
        self.threshold = threshold
        self.batch_size = batch_size
        # Leave headroom under the model's word limit for the label prompt.
        limit = int(getattr(self.model.config, "max_len", 384) or 384)
        self.max_words = max_words or max(16, min(200, limit - 32))

    @staticmethod
    def _backbone_view(
        path: Path,
        config: dict[str, object],
        tokenizer_dir: Path,
        view: Path,
        tokenizer_asset: str | None,
        model: str,
    ) -> Path:
        """A folder of links to the model's files whose gliner_config.json names the local
        backbone folder instead of the hub repository."""
        where = f"asset '{tokenizer_asset}' ({tokenizer_dir})" if tokenizer_asset else tokenizer_dir
        missing = [
            name
            for name in ("tokenizer_config.json", "config.json")
            if not (tokenizer_dir / name).is_file()
        ]
        if missing:
            raise AssetError(
                f"ner.tokenizer {where} lacks {', '.join(missing)}: it must hold the "
                f"tokenizer files and config.json of the backbone "
                f"'{config.get('model_name')}' of GLiNER model {model}; add them to that "
                "asset's 'files'"
            )
        for item in path.iterdir():
            if item.name != "gliner_config.json":
                (view / item.name).symlink_to(item.resolve())
        staged = dict(config, model_name=str(tokenizer_dir.resolve()))
        (view / "gliner_config.json").write_text(json.dumps(staged), encoding="utf-8")
        return view

    def predict(self, texts: Sequence[str]) -> list[list[Span]]:
        labels = list(GLINER_LABELS)
        pieces: list[tuple[int, int, str]] = []  # text index, offset, piece
        for i, text in enumerate(texts):
            if text.strip():
                pieces.extend((i, off, piece) for off, piece in chunk_text(text, self.max_words))
        out: list[list[Span]] = [[] for _ in texts]
        if not pieces:
            return out
        import torch

        with torch.no_grad():
            predictions = self.model.inference(
                [p for _, _, p in pieces],
                labels,
                flat_ner=True,
                threshold=self.threshold,
                batch_size=self.batch_size,
            )
        for (i, offset, _), entities in zip(pieces, predictions, strict=True):
            for entity in entities:
                kind = GLINER_LABELS.get(str(entity["label"]).lower())
                if kind is None or float(entity.get("score", 1.0)) < self.threshold:
                    continue
                start, end = offset + int(entity["start"]), offset + int(entity["end"])
                out[i].append(Span(texts[i][start:end], start, end, kind))
        return [_spans_sorted(spans) for spans in out]


BACKENDS = ("spacy", "gliner")


def load_ner(backend: str, path: str | Path, **kwargs: object) -> NerBackend:
    """The recogniser named by ``ner.backend`` over a local model folder."""
    if backend == "spacy":
        return SpacyNer(path, **kwargs)  # type: ignore[arg-type]
    if backend == "gliner":
        return GlinerNer(path, **kwargs)  # type: ignore[arg-type]
    raise ValueError(f"unknown NER backend {backend!r}; known: {', '.join(BACKENDS)}")


def load_configured_ner(
    settings: dict[str, object], path: str | Path, tokenizer: str | Path | None = None
) -> NerBackend:
    """The recogniser of the config's ``ner`` section (GLiNER takes its threshold and the
    backbone tokenizer folder of ``ner.tokenizer``)."""
    backend = str(settings["backend"])
    kwargs: dict[str, object] = {}
    if backend == "gliner":
        kwargs = {
            "threshold": settings["threshold"],
            "tokenizer_dir": tokenizer,
            "asset": settings.get("asset"),
            "tokenizer_asset": settings.get("tokenizer"),
        }
    return load_ner(backend, path, **kwargs)


def ner_assets(smk: object) -> tuple[Path, Path | None]:
    """A NER rule's model folder and, when the rule has one, the backbone tokenizer folder
    (inputs ``ner`` and ``ner_tokenizer``)."""
    from grabrag.data.assets import resolve

    inputs = smk.input  # type: ignore[attr-defined]
    tokenizer = getattr(inputs, "ner_tokenizer", None)
    return resolve(inputs.ner), resolve(tokenizer) if tokenizer else None
