"""The Bitcoin pipeline: blk-file plan, scan log, body and chain parts, stages, commands."""
