"""The data folder: generations, atomic landing, RocksDB, storage errors."""
