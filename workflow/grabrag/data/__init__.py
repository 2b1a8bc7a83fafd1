"""Stages 1-2, data and retrieval: the asset registry (models, encoders, datasets), the dataset
adapters and the hybrid BM25 + dense retrieval with hard negatives."""
