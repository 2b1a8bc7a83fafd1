"""Stage 6, the report: the paper's tables and figures."""
