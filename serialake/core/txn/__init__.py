"""Transactions: the commit loop, the conflict rules, row-level resolution and rebases, files
written and steps after a commit.
"""
