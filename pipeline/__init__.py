"""The coordinator side of rechain: planning, ordered committing, checkpoints, CLI, metrics."""
