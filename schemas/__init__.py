"""rechain's single source of truth for data layouts.

Arrow schemas of every dataset (declared in the Rust core, exported here), RocksDB column
families and meta keys, and the versions of every on-disk format rechain owns.
"""
