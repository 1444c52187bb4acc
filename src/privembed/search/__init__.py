"""Search over released vectors: projection releases (:mod:`.projection`), re-rank depth
planning (:mod:`.rerank`) and the geometry they share (:mod:`.geometry`); and search with no
vector released at all: the sealed mode's exact client-side index (:mod:`.sealed`). Above
:mod:`privembed.mechanisms`, below the release's users.
"""
