"""Layer *parts*: drafters, verifiers, SJD-PAC's proactive tree and the relaxed (lossy) acceptance
rules; each registers itself by name. Imports only from :mod:`jacobigen.core` (docs/DESIGN.md §1)."""
