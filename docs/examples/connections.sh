# Kubernetes, for GPUKubernetesOperator and AccelerateTrainOperator(target="kubernetes"):
# their kubernetes_conn_id (default "kubernetes_default"). Here: the workers run in the cluster,
# and pods go to the gpu-tasks namespace, the one docs/permissions/kubernetes-tasks.yaml binds,
# unless a task names its own namespace.
export AIRFLOW_CONN_KUBERNETES_DEFAULT='{"conn_type": "kubernetes", "extra": {"in_cluster": true, "namespace": "gpu-tasks"}}'

# AWS, for GPUBatchOperator and AccelerateTrainOperator(target="batch"): their aws_conn_id
# (default "aws_default"). No keys here: boto3 finds the worker's role (IRSA, instance profile).
export AIRFLOW_CONN_AWS_DEFAULT='{"conn_type": "aws", "extra": {"region_name": "us-east-1"}}'
