"""Local stand-ins for the clouds the provider drives: a Kubernetes API emulator (and, later, AWS Batch).

Part of the product: users run their GPU DAGs against these in their own CI, without a cluster
or a GPU. Nothing here is imported by ``import airflow_gpu``.
"""
