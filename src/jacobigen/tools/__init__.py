"""Layer *tools*: benchmarks, diagnostics, many-image jobs, the exactness harness, the plain-AR
reference and helpers of the command line. Imports from any layer below (docs/DESIGN.md §1)."""
