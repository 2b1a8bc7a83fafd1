"""Stage 5, generation: the paper's prompts and grammar, greedy grammar decoding and batched
decoding on llama.cpp."""
