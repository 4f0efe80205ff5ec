"""Predicates and values: the expression tree, data skipping (per file and vectorized), exact
evaluation on a file's rows, SET/VALUES expressions.
"""
