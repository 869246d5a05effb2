"""Layer *serve*: ``jacobigen serve``, an HTTP image server over the decoders (docs/serving.md).

One decode thread owns the model and batches requests continuously (:mod:`.scheduler`, on
:func:`jacobigen.decode.batching.run`, the loop every ``generate`` runs), so a served image equals
``jacobigen generate``'s for the same prompt, seed, method and window. The web layer (:mod:`.app`)
only parses, queues and streams; FastAPI, uvicorn and Ray are imported by the modules that need them
(the ``serve`` extra).
"""
