"""The Flow replay stages, one file each (order in ``flow.run``)."""
