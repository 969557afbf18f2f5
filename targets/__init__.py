"""kipcheck targets: the clusters a conformance run is pointed at (renamed from `fixtures`).

`targets` is a generic top-level name (PyPI may hold an unrelated distribution of it);
`IS_KIPCHECK_TARGETS` lets a test prove that this project's package is the one imported.
"""

IS_KIPCHECK_TARGETS = True
