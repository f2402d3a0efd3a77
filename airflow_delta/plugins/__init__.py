"""Airflow UI plugins of the provider (registered in ``provider.py``'s ``plugins``)."""
