"""The Ethereum import stages, one file each (order in ``ethereum.run``)."""
