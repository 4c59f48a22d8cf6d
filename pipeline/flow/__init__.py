"""The Flow pipeline: WAL replay, checkpoints, stages, commands."""
