"""The security claims registry (``claims/claims.toml``): generated claim tables in the docs and
a mutation check that every claim fails its tests when it is broken. See ``__main__``."""
