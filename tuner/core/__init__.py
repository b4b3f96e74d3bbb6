"""Infrastructure every stage shares: errors, targets, units, statistics, IR helpers, atomic writes. Imports no
other stage.
"""
