"""The two decisions a model or a policy makes on a question, named once: every generation
row, every CDD step that decides and every decision row holds one of them (or None, when
the output could not be parsed)."""

ANSWER, ABSTAIN = "answer", "abstain"
DECISIONS = (ANSWER, ABSTAIN)
