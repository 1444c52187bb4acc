"""Files (:mod:`.io`: embeddings and texts in, atomic outputs), embedding models
(:mod:`.embedders`) and bundled data (:mod:`.datasets`). Imports only :mod:`privembed.core`.
"""
