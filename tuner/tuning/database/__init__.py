"""The tuning-log folder: the JSON records, their checks, and the curated schedules/ library (warm start)."""
