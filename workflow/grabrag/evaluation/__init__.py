"""Stage 7, evaluation: metrics per cell with bootstrap CIs, and the readers of the stages'
tidy result files."""
