"""The measures every later stage shares: answer scoring, the abstention, selection and
calibration metrics, and the paired bootstrap over questions."""
