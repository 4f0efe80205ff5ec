"""The table model, the bottom layer: log actions and their validation, schema and types, protocol
features, properties, partition values, column mapping, identity, clustering, constraints,
UniForm rules, paths; the Arrow memory pool of log state and parsed stats (``arrow_memory``).
"""
