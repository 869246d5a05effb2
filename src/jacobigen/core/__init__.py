"""Layer *core*: the target distribution, keyed randomness, modified rejection sampling, the KV cache,
masks, token layouts, counters, the model interface, input checks and the registry of parts by name.
Imports nothing else from jacobigen (docs/DESIGN.md §1; ``tests/core/test_layers.py`` checks it)."""
