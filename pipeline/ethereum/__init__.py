"""The Ethereum pipeline: era1/freezer import, era1 export, generator, stages."""
