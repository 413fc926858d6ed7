"""Models built from `transformer.layers`; each keeps its table of sizes."""
