"""The Bitcoin reindex stages, one file each (order in ``bitcoin.run``)."""
