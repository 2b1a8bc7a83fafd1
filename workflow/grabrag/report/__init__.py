"""Stage 8, the report: the paper's tables and figures."""
