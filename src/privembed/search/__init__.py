"""Search over released vectors: projection releases (:mod:`.projection`), re-rank depth
planning (:mod:`.rerank`) and the geometry they share (:mod:`.geometry`). Above
:mod:`privembed.mechanisms`, below the release's users.
"""
