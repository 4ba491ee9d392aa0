"""``python -m airflow_gpu.testing.soak``: see ``runner``."""

from airflow_gpu.testing.soak.runner import main

raise SystemExit(main())
