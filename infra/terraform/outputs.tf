# Read by the benchmark script: `tofu output -json` (or `terraform output -json`).

output "region" {
  description = "AWS region of the cluster."
  value       = var.region
}

output "head_public_ip" {
  description = "Public IP of the Ray head (SSH as ubuntu, dashboard, Prometheus)."
  value       = aws_instance.head.public_ip
}

output "head_private_ip" {
  description = "Private IP of the Ray head inside the VPC."
  value       = aws_instance.head.private_ip
}

output "ray_address" {
  description = "Value for `rechain btc reindex --ray-address` on the head or any node."
  value       = local.ray_address
}

output "ray_dashboard_url" {
  description = "Ray dashboard, reachable from admin_cidr_blocks."
  value       = "http://${aws_instance.head.public_ip}:${local.ray_ports.dashboard}"
}

output "results_bucket" {
  description = "Name of the private, versioned S3 bucket for benchmark results."
  value       = aws_s3_bucket.results.bucket
}

output "results_bucket_arn" {
  description = "ARN of the results bucket."
  value       = aws_s3_bucket.results.arn
}

output "worker_asg_name" {
  description = "Autoscaling group of the Ray workers (scale with aws autoscaling set-desired-capacity)."
  value       = aws_autoscaling_group.workers.name
}

output "input_volume_id" {
  description = "EBS volume holding the input, mounted on the head."
  value       = aws_ebs_volume.data.id
}

output "paths" {
  description = "Paths on the nodes: the repository (with .venv), the input mount, the blocks folder and the output data folder on the head's NVMe."
  value = {
    repo_dir   = local.repo_dir
    rechain    = "${local.repo_dir}/.venv/bin/rechain"
    input      = local.input_mount
    blocks     = "${local.input_mount}/blocks"
    data       = local.output_data_dir
    nvme_mount = local.nvme_mount
  }
}

output "metrics_endpoints" {
  description = "Prometheus endpoints: rechain's coordinator/committer (while a run with --metrics-port lasts), Ray's exporter on the head, and the Prometheus server on the head."
  value = {
    rechain_metrics_port = var.rechain_metrics_port
    ray_metrics_port     = local.ray_ports.metrics_export
    rechain_coordinator  = "http://${aws_instance.head.private_ip}:${var.rechain_metrics_port}/metrics"
    ray_head             = "http://${aws_instance.head.private_ip}:${local.ray_ports.metrics_export}/metrics"
    prometheus           = "http://${aws_instance.head.public_ip}:9090"
    prometheus_private   = "http://${aws_instance.head.private_ip}:9090"
  }
}
