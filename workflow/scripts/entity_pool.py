"""Rule entity_pool: NER over the dataset's passages into the typed replacement pool."""

import _grabrag_path  # noqa: F401  (makes grabrag importable without an install)

from grabrag.contexts.entity_pool import NerCache, build_entity_pool, gold_passage_texts
from grabrag.contexts.ner import load_configured_ner, ner_assets
from grabrag.core.io import read_jsonl, write_json
from grabrag.core.runner import log, run_rule
from grabrag.data.assets import resolve
from grabrag.data.datasets import ADAPTERS, dataset_gold_texts


def main(smk):
    questions = read_jsonl(smk.input.questions)
    texts = gold_passage_texts(questions)
    if smk.params.pool_source == "dataset_gold":
        # Every gold passage of the source split (the paper), the sampled ones first.
        output = ADAPTERS[smk.params.adapter](resolve(smk.input.source))
        seen = set(texts)
        texts += [t for t in dataset_gold_texts(output) if t not in seen]
    elif smk.params.pool_source == "corpus":
        # More passages than the sampled questions' gold: a richer pool for small runs.
        seen = set(texts)
        texts += [t for t in (p["text"] for p in read_jsonl(smk.input.corpus)) if t not in seen]
    ner = NerCache(load_configured_ner(smk.params.ner, *ner_assets(smk)), log=log.info)
    pool = build_entity_pool(texts, ner)
    write_json(
        smk.output.pool,
        {
            "ner": smk.params.ner["backend"],
            "source": smk.params.pool_source,
            "passages": len(texts),
            **pool.as_dict(),
        },
    )
    log.info(
        "entity pool from %d passages: %s", len(texts), {k: len(v) for k, v in pool.entries.items()}
    )


run_rule(snakemake, main)  # noqa: F821
