variable "region" {
  description = "AWS region of the benchmark cluster."
  type        = string
  default     = "us-east-1"

  validation {
    condition     = can(regex("^[a-z]{2}(-gov)?-[a-z]+-[0-9]$", var.region))
    error_message = "region must look like us-east-1."
  }
}

variable "availability_zone" {
  description = "Availability zone for every node and the input volume (they must share one); null means the region's \"a\" zone. Pick one that offers both instance types."
  type        = string
  default     = null
}

variable "name" {
  description = "Name prefix of every resource; also the cluster tag."
  type        = string
  default     = "rechain-bench"

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,30}[a-z0-9]$", var.name))
    error_message = "name must be 3-32 lower-case letters, digits or dashes, starting with a letter."
  }
}

variable "vpc_cidr" {
  description = "CIDR block of the cluster's VPC; the subnet is its x.x.1.0/24."
  type        = string
  default     = "10.42.0.0/16"

  validation {
    condition     = can(cidrhost(var.vpc_cidr, 0)) && tonumber(split("/", var.vpc_cidr)[1]) <= 22
    error_message = "vpc_cidr must be a valid IPv4 CIDR block of /22 or larger."
  }
}

variable "admin_cidr_blocks" {
  description = "CIDR blocks allowed to reach SSH, the Ray dashboard, Prometheus and the metrics ports (e.g. [\"203.0.113.7/32\"])."
  type        = list(string)

  validation {
    condition     = length(var.admin_cidr_blocks) > 0 && alltrue([for c in var.admin_cidr_blocks : can(cidrhost(c, 0))])
    error_message = "admin_cidr_blocks must hold at least one valid CIDR block."
  }

  validation {
    condition     = !contains(var.admin_cidr_blocks, "0.0.0.0/0")
    error_message = "admin_cidr_blocks must not open the cluster to the whole internet (0.0.0.0/0)."
  }
}

variable "ssh_key_name" {
  description = "Name of an existing EC2 key pair for SSH as ubuntu; null for none (use SSM Session Manager)."
  type        = string
  default     = null
}

variable "repo_url" {
  description = "Git URL of the rechain repository that every node clones and installs with `make setup`."
  type        = string

  validation {
    condition     = can(regex("^(https://|git@|ssh://)", var.repo_url))
    error_message = "repo_url must be an https://, ssh:// or git@ URL."
  }
}

variable "repo_ref" {
  description = "Branch, tag or commit of repo_url to check out on every node."
  type        = string
  default     = "main"

  validation {
    condition     = can(regex("^[A-Za-z0-9._/-]+$", var.repo_ref))
    error_message = "repo_ref may hold only letters, digits, '.', '_', '/' and '-'."
  }
}

variable "ami_id" {
  description = "AMI for every node; null uses Canonical's current Ubuntu 22.04 for each node's architecture."
  type        = string
  default     = null

  validation {
    condition     = var.ami_id == null || can(regex("^ami-[0-9a-f]{8,17}$", var.ami_id))
    error_message = "ami_id must look like ami-0123456789abcdef0."
  }
}

variable "head_instance_type" {
  description = "Instance type of the Ray head (coordinator, committer, NFS for the input, Prometheus); an NVMe instance-store type."
  type        = string
  default     = "i4i.2xlarge"

  validation {
    condition     = can(regex("^(i[3-8][a-z]*|im4gn|is4gen|[cmrxz][5-8][a-z]*d[a-z]*)\\.(large|[0-9]*xlarge|metal(-[0-9]+xl)?)$", var.head_instance_type))
    error_message = "head_instance_type must be an instance type with local NVMe storage (i3, i3en, i4i, i4g, im4gn, is4gen, or a 'd' type such as c6id, m6id, r6id, c7gd)."
  }
}

variable "worker_instance_type" {
  description = "Instance type of the Ray workers; an NVMe instance-store type."
  type        = string
  default     = "c6id.4xlarge"

  validation {
    condition     = can(regex("^(i[3-8][a-z]*|im4gn|is4gen|[cmrxz][5-8][a-z]*d[a-z]*)\\.(large|[0-9]*xlarge|metal(-[0-9]+xl)?)$", var.worker_instance_type))
    error_message = "worker_instance_type must be an instance type with local NVMe storage (i3, i3en, i4i, i4g, im4gn, is4gen, or a 'd' type such as c6id, m6id, r6id, c7gd)."
  }
}

variable "worker_count" {
  description = "Desired number of Ray worker instances (the autoscaling group's desired capacity)."
  type        = number
  default     = 2

  validation {
    condition     = var.worker_count >= 0 && var.worker_count <= 64 && floor(var.worker_count) == var.worker_count
    error_message = "worker_count must be a whole number from 0 to 64."
  }
}

variable "worker_min" {
  description = "Minimum size of the worker autoscaling group."
  type        = number
  default     = 0

  validation {
    condition     = var.worker_min >= 0 && floor(var.worker_min) == var.worker_min
    error_message = "worker_min must be a whole number >= 0."
  }
}

variable "worker_max" {
  description = "Maximum size of the worker autoscaling group."
  type        = number
  default     = 8

  validation {
    condition     = var.worker_max >= 1 && var.worker_max <= 64 && floor(var.worker_max) == var.worker_max
    error_message = "worker_max must be a whole number from 1 to 64."
  }
}

variable "root_volume_size_gb" {
  description = "Root EBS volume of every node (OS, the repository, .venv and the Rust build)."
  type        = number
  default     = 60

  validation {
    condition     = var.root_volume_size_gb >= 30 && var.root_volume_size_gb <= 1000
    error_message = "root_volume_size_gb must be between 30 and 1000."
  }
}

variable "data_snapshot_id" {
  description = "EBS snapshot holding the input (a blocks/ folder at its root); null creates an empty volume to fill by hand."
  type        = string
  default     = null

  validation {
    condition     = var.data_snapshot_id == null || can(regex("^snap-[0-9a-f]{8,17}$", var.data_snapshot_id))
    error_message = "data_snapshot_id must look like snap-0123456789abcdef0."
  }
}

variable "data_volume_size_gb" {
  description = "Size of the input EBS volume mounted on the head at /data; at least the snapshot's size when one is given (mainnet blk files are ~700 GB)."
  type        = number
  default     = 1000

  validation {
    condition     = var.data_volume_size_gb >= 10 && var.data_volume_size_gb <= 16384
    error_message = "data_volume_size_gb must be between 10 and 16384 (the gp3 limit)."
  }
}

variable "data_volume_iops" {
  description = "Provisioned IOPS of the gp3 input volume."
  type        = number
  default     = 6000

  validation {
    condition     = var.data_volume_iops >= 3000 && var.data_volume_iops <= 16000
    error_message = "data_volume_iops must be between 3000 and 16000 (gp3)."
  }
}

variable "data_volume_throughput" {
  description = "Provisioned throughput of the gp3 input volume, MiB/s."
  type        = number
  default     = 500

  validation {
    condition     = var.data_volume_throughput >= 125 && var.data_volume_throughput <= 1000
    error_message = "data_volume_throughput must be between 125 and 1000 MiB/s (gp3)."
  }
}

variable "worker_input_mode" {
  description = "How workers see the input at /data: \"nfs\" mounts the head's volume read-only, \"copy\" copies it once to the worker's local NVMe (faster reads, slower start)."
  type        = string
  default     = "nfs"

  validation {
    condition     = contains(["nfs", "copy"], var.worker_input_mode)
    error_message = "worker_input_mode must be \"nfs\" or \"copy\"."
  }
}

variable "ray_metrics_port" {
  description = "Port of Ray's Prometheus exporter on every node (ray start --metrics-export-port)."
  type        = number
  default     = 8080

  validation {
    condition     = var.ray_metrics_port >= 1024 && var.ray_metrics_port <= 65535
    error_message = "ray_metrics_port must be an unprivileged port (1024-65535)."
  }
}

variable "rechain_metrics_port" {
  description = "Port the coordinator serves rechain_* metrics on (rechain btc reindex --metrics-port)."
  type        = number
  default     = 9464

  validation {
    condition     = var.rechain_metrics_port >= 1024 && var.rechain_metrics_port <= 65535
    error_message = "rechain_metrics_port must be an unprivileged port (1024-65535)."
  }
}

variable "results_bucket_name" {
  description = "Exact name of the results bucket; null lets AWS derive a unique one from the name prefix."
  type        = string
  default     = null

  validation {
    condition     = var.results_bucket_name == null || can(regex("^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", var.results_bucket_name))
    error_message = "results_bucket_name must be a valid S3 bucket name."
  }
}

variable "results_force_destroy" {
  description = "Let `destroy` delete the results bucket even when it still holds results."
  type        = bool
  default     = false
}

variable "results_noncurrent_days" {
  description = "Days to keep overwritten (noncurrent) result versions before they expire."
  type        = number
  default     = 30

  validation {
    condition     = var.results_noncurrent_days >= 1
    error_message = "results_noncurrent_days must be at least 1."
  }
}

variable "enable_ssm" {
  description = "Attach AmazonSSMManagedInstanceCore so nodes can be reached with SSM Session Manager."
  type        = bool
  default     = true
}

variable "tags" {
  description = "Extra tags for every resource."
  type        = map(string)
  default     = {}
}
