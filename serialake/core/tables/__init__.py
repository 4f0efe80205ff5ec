"""Several tables: the name catalog, consistent cuts across tables, derived tables."""
