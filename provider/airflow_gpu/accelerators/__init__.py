"""The accelerator model: spec, catalog and translations. Pure: no Airflow, no cloud SDK."""
