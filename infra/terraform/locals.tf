locals {
  tags = merge(
    {
      Project   = "rechain"
      Cluster   = var.name
      ManagedBy = "terraform"
    },
    var.tags,
  )

  availability_zone = coalesce(var.availability_zone, "${var.region}a")
  subnet_cidr       = cidrsubnet(var.vpc_cidr, 8, 1)

  # Every Ray port is fixed so that the security group can name them (ray start would otherwise
  # pick random ones). The same numbers are in infra/ray/cluster.yaml.
  ray_ports = {
    gcs                  = 6379
    object_manager       = 8076
    node_manager         = 8077
    dashboard_agent_grpc = 8078
    runtime_env_agent    = 8079
    metrics_export       = var.ray_metrics_port
    dashboard            = 8265
    client_server        = 10001
    dashboard_agent_http = 52365
    min_worker           = 10002
    max_worker           = 19999
  }

  ray_address = "${aws_instance.head.private_ip}:${local.ray_ports.gcs}"

  # Paths shared by the bootstrap scripts and the outputs.
  repo_dir        = "/opt/rechain"
  input_mount     = "/data"
  nvme_mount      = "/mnt/nvme"
  output_data_dir = "/mnt/nvme/rechain"

  # Architecture of each node type decides its AMI (x86_64 -> amd64, Graviton -> arm64).
  node_arch = {
    head   = contains(data.aws_ec2_instance_type.head.supported_architectures, "x86_64") ? "amd64" : "arm64"
    worker = contains(data.aws_ec2_instance_type.worker.supported_architectures, "x86_64") ? "amd64" : "arm64"
  }
  node_ami = {
    for role, arch in local.node_arch :
    role => coalesce(var.ami_id, nonsensitive(data.aws_ssm_parameter.ubuntu_ami[arch].value))
  }

  bootstrap_vars = {
    repo_url       = var.repo_url
    repo_ref       = var.repo_ref
    repo_dir       = local.repo_dir
    nvme_mount     = local.nvme_mount
    input_mount    = local.input_mount
    results_bucket = aws_s3_bucket.results.bucket
    region         = var.region
    ray_ports      = local.ray_ports
    rechain_port   = var.rechain_metrics_port
  }
}
