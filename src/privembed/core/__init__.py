"""The base tier: guarantees and their accounting (:mod:`.accounting`), closed forms
(:mod:`.theory`), the randomness policy and noise sources (:mod:`.rng`, with the optional
compiled draws of :mod:`._jit`), every key-derivation label (:mod:`.labels`), input checks
(:mod:`._validation`), optional imports, cancellation points (:mod:`.cancel`) and caches.

Nothing here imports from another tier of privembed (docs/architecture.md; the import contract
in ``pyproject.toml`` checks it).
"""
