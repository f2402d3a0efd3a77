"""Maintaining a whole lake: naming the fleet of tables, reading their health cheaply and in
parallel, planning maintenance under a budget, and the maintenance history table.

This is the engine's top layer: it opens tables through the :class:`DeltaTable` facade
and imports neither Airflow nor Spark. ``docs/fleet.md`` describes the whole.
"""
