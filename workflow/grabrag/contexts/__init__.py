"""Stages 3-4, contexts and QC swaps: the paired conditions Q100/Q50/Q0 and the QC entity swaps
(NER, the entity pool, the swap tiers, the swapped contexts and their audit)."""
