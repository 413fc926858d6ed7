"""The paper tables' specifications: rows and columns `reproduce` trains
and renders beside the papers' own numbers."""
