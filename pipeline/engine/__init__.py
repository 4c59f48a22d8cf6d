"""The stage engine: stages, their checkpoints and the driver that runs a pipeline."""
