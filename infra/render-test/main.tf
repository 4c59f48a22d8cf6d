# Renders the node bootstrap templates of infra/terraform with sample values, so that
# infra/check.sh can check the resulting scripts with `bash -n` offline (no provider needed):
#   tofu -chdir=DIR init && tofu -chdir=DIR apply -auto-approve -var templates=.../templates
# The variables passed mirror infra/terraform/compute.tf and locals.tf (bootstrap_vars);
# check_terraform.py separately checks that compute.tf passes every variable a template uses.

variable "templates" {
  description = "Absolute path of infra/terraform/templates."
  type        = string
}

locals {
  bootstrap_vars = {
    repo_url       = "https://github.com/example/rechain.git"
    repo_ref       = "main"
    repo_dir       = "/opt/rechain"
    nvme_mount     = "/mnt/nvme"
    input_mount    = "/data"
    results_bucket = "rechain-bench-results-0123"
    region         = "us-east-1"
    ray_ports = {
      gcs                  = 6379
      object_manager       = 8076
      node_manager         = 8077
      dashboard_agent_grpc = 8078
      runtime_env_agent    = 8079
      metrics_export       = 8080
      dashboard            = 8265
      client_server        = 10001
      dashboard_agent_http = 52365
      min_worker           = 10002
      max_worker           = 19999
    }
    rechain_port = 9464
  }

  head = {
    for snap in [true, false] : tostring(snap) => join("\n", [
      templatefile("${var.templates}/common.sh.tftpl", merge(local.bootstrap_vars, { role = "head" })),
      templatefile("${var.templates}/head.sh.tftpl", merge(local.bootstrap_vars, {
        data_volume_id  = "vol-0123456789abcdef0"
        has_snapshot    = snap
        subnet_cidr     = "10.42.1.0/24"
        output_data_dir = "/mnt/nvme/rechain"
      })),
    ])
  }

  worker = {
    for mode in ["nfs", "copy"] : mode => join("\n", [
      templatefile("${var.templates}/common.sh.tftpl", merge(local.bootstrap_vars, { role = "worker" })),
      templatefile("${var.templates}/worker.sh.tftpl", merge(local.bootstrap_vars, {
        head_ip    = "10.42.1.10"
        input_mode = mode
      })),
    ])
  }
}

output "scripts" {
  description = "Rendered user_data per node role and variant."
  value = {
    head_snapshot = local.head["true"]
    head_empty    = local.head["false"]
    worker_nfs    = local.worker["nfs"]
    worker_copy   = local.worker["copy"]
  }

  # EC2 accepts at most 16 KiB of user data (base64-encoded for a launch template).
  precondition {
    condition     = alltrue([for s in concat(values(local.head), values(local.worker)) : length(base64encode(s)) <= 16384])
    error_message = "A rendered bootstrap script exceeds EC2's 16 KiB user-data limit."
  }
}
