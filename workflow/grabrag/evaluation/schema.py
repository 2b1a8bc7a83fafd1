"""The names the tidy metric table is written in: its columns, the pseudo-conditions and
pseudo-policy it adds to the real ones, which policies also get EvidentialRAG's answer ECE
and route shares, and the reasons a metric or its CI is NaN.

They live apart from the code that computes the rows so that a reader (and a table or
figure that reads the metrics) finds every label of the table in one place; the metrics
themselves are described in :mod:`grabrag.evaluation.evaluate`.
"""

from __future__ import annotations

COLUMNS = (
    "model",
    "dataset",
    "policy",
    "condition",
    "metric",
    "value",
    "ci_low",
    "ci_high",
    "n",
    "reason",
)
# The metric files (results/metrics/<build>.csv) add the construction seed of the build
# their rows come from, so that every build's files load together and stay apart (empty
# in results/metrics/across_seeds/: pooled over the seeds).
SEED = "seed"
FILE_COLUMNS = (*COLUMNS, SEED)
# The paper's four conditions (conditions.PAPER): ``all`` (Table 10's pooled AURC/ECE)
# pools these only, so adding QX leaves the paper's tables as they were.
ALL = "all"
POOLED = "pooled"
DIFF = "QC-Q0"
DIFF_QX = "QX-QC"
MEAN_POLICY = "mean"
DEFAULT_ECE_BINS = (10, 15)
# EvidentialRAG's ECE (Eqs. 26-27), for the policies whose registry entry asks for it
# (``answer_ece``: EVID, EVID_CB, P0 as the paper's naive RAG and P1 beside them).
ANSWER_ECE_BINS = 15
ANSWER_ECE = "ece_answer_15"

NO_ROWS = "no rows in this cell"
NO_SCORED = "no evaluated rows (every row unparseable or without a confidence)"
NO_P1 = "no P1 Q100 cell for this model and dataset: the capability set is undefined"
EMPTY_CAP = "empty capability set: the model answers no question correctly (EM) at Q100 under P1"
NO_PAIR = "no QC-eligible question with rows at both Q0 and QC"
NO_PAIR_QX = "no question with rows at both QC and QX"
NO_ANSWERED = "no answered QC rows"
NO_QC = "no QC rows (no QC-eligible questions)"
NO_NORMALISE = "no QC rows, or the Q100 answer rate is 0 (nothing to normalise by)"
NO_ELIGIBLE = "no QC-eligible question in the Q100 cell"
NO_EXCLUDED = "no question excluded from QC in the Q100 cell"
CI_UNDEFINED = "CI undefined: the statistic is undefined in most resamples"


def ece_metric(n_bins: int) -> str:
    return "ece" if n_bins == 10 else f"ece_{n_bins}"
