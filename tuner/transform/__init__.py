"""Stage 2, Relax to Relax: graph algebra, one-hot lookups, conv layouts, transpose sinking, channel padding,
precision.
"""
