"""Where work runs: threads or Ray, ordered results, placement records."""
