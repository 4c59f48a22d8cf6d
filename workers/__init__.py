"""Worker-side code: pure functions from a work unit to Arrow batches, run as Ray tasks.

``_native`` is the Rust core (``workers/native``), built by ``pip install -e .``.
"""
