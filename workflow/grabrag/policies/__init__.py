"""Stage 6, GRAB-RAG's abstention policies P0-P4 and the NLI verifier behind P4."""
