"""metrics.json, CSVs, report.md and plots, written atomically."""
