"""Rule truthfulqa_contexts: the probe's paired contexts (clean, misconception injected,
closed book) for its questions."""

import _grabrag_path  # noqa: F401  (makes grabrag importable without an install)

from grabrag.contexts.paired import load_token_counter
from grabrag.contexts.truthfulqa import TRUTHFULQA_CONTEXTS, truthfulqa_contexts
from grabrag.core.io import read_jsonl, write_jsonl
from grabrag.core.runner import log, run_rule
from grabrag.data.assets import resolve


def main(smk):
    questions = read_jsonl(smk.input.questions)
    counter = load_token_counter(str(resolve(smk.input.tokenizer)))
    rows = truthfulqa_contexts(questions, smk.params.seed, counter, smk.params.max_tokens)
    for condition in TRUTHFULQA_CONTEXTS:
        write_jsonl(smk.output[condition], rows[condition])
    log.info("TruthfulQA probe: %d questions in every context", len(questions))


run_rule(snakemake, main)  # noqa: F821
