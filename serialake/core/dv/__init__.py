"""Deletion vectors: the on-disk format and the policy for when changes mark rows."""
