"""Layer *decode*: the one decode step (:mod:`.engine`), its schedules (:mod:`.chain`, :mod:`.pjd`),
the batch loop, method strings and ``generate()``. Imports from core and parts (docs/DESIGN.md §1)."""
