"""airflow-delta: an Apache Airflow provider for Delta Lake table maintenance."""

__version__ = "0.1.0.dev0"
