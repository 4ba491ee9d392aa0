"""``python -m airflow_gpu.testing.soak``: see ``runner``."""

from airflow_gpu.testing.soak.runner import main

if __name__ == "__main__":  # imported (a walk of the package), it runs nothing
    raise SystemExit(main())
