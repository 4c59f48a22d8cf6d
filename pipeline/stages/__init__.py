"""Pipelines as lists of stages (``engine``): ``bitcoin`` (a reindex) and ``flow`` (a replay).

One module per stage; each pipeline's package says which stages it runs, in which order.
"""
