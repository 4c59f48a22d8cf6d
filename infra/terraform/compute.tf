# ---------------------------------------------------------------- Ray head

resource "aws_instance" "head" {
  ami                         = local.node_ami.head
  instance_type               = var.head_instance_type
  subnet_id                   = aws_subnet.cluster.id
  vpc_security_group_ids      = [aws_security_group.cluster.id]
  associate_public_ip_address = true
  key_name                    = var.ssh_key_name
  iam_instance_profile        = aws_iam_instance_profile.node.name
  placement_group             = aws_placement_group.cluster.name
  ebs_optimized               = true
  monitoring                  = true

  user_data = join("\n", [
    templatefile("${path.module}/templates/common.sh.tftpl", merge(local.bootstrap_vars, { role = "head" })),
    templatefile("${path.module}/templates/head.sh.tftpl", merge(local.bootstrap_vars, {
      data_volume_id  = aws_ebs_volume.data.id
      has_snapshot    = var.data_snapshot_id != null
      subnet_cidr     = local.subnet_cidr
      output_data_dir = local.output_data_dir
    })),
  ])
  user_data_replace_on_change = true

  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required"
    http_put_response_hop_limit = 1
  }

  root_block_device {
    volume_type = "gp3"
    volume_size = var.root_volume_size_gb
    encrypted   = true
  }

  tags = { Name = "${var.name}-head", Role = "ray-head" }

  lifecycle {
    precondition {
      condition     = data.aws_ec2_instance_type.head.instance_storage_supported
      error_message = "head_instance_type ${var.head_instance_type} has no local instance storage (NVMe)."
    }
  }
}

# ---------------------------------------------------------------- Ray workers

resource "aws_launch_template" "worker" {
  name_prefix   = "${var.name}-worker-"
  image_id      = local.node_ami.worker
  instance_type = var.worker_instance_type
  key_name      = var.ssh_key_name
  ebs_optimized = true

  user_data = base64encode(join("\n", [
    templatefile("${path.module}/templates/common.sh.tftpl", merge(local.bootstrap_vars, { role = "worker" })),
    templatefile("${path.module}/templates/worker.sh.tftpl", merge(local.bootstrap_vars, {
      head_ip    = aws_instance.head.private_ip
      input_mode = var.worker_input_mode
    })),
  ]))

  iam_instance_profile {
    arn = aws_iam_instance_profile.node.arn
  }

  network_interfaces {
    associate_public_ip_address = true
    security_groups             = [aws_security_group.cluster.id]
    delete_on_termination       = true
  }

  placement {
    group_name = aws_placement_group.cluster.name
  }

  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required"
    http_put_response_hop_limit = 1
  }

  monitoring {
    enabled = true
  }

  block_device_mappings {
    device_name = "/dev/sda1"

    ebs {
      volume_type           = "gp3"
      volume_size           = var.root_volume_size_gb
      encrypted             = true
      delete_on_termination = true
    }
  }

  tag_specifications {
    resource_type = "instance"
    tags          = merge(local.tags, { Name = "${var.name}-worker", Role = "ray-worker" })
  }

  tag_specifications {
    resource_type = "volume"
    tags          = merge(local.tags, { Name = "${var.name}-worker" })
  }

  lifecycle {
    precondition {
      condition     = data.aws_ec2_instance_type.worker.instance_storage_supported
      error_message = "worker_instance_type ${var.worker_instance_type} has no local instance storage (NVMe)."
    }
  }
}

resource "aws_autoscaling_group" "workers" {
  name_prefix         = "${var.name}-workers-"
  min_size            = var.worker_min
  max_size            = var.worker_max
  desired_capacity    = var.worker_count
  vpc_zone_identifier = [aws_subnet.cluster.id]
  placement_group     = aws_placement_group.cluster.name
  health_check_type   = "EC2"

  # Workers are interchangeable; a new launch template version rolls them. The subnet comes from
  # vpc_zone_identifier (an autoscaling group refuses one inside the launch template).
  launch_template {
    id      = aws_launch_template.worker.id
    version = aws_launch_template.worker.latest_version
  }

  instance_refresh {
    strategy = "Rolling"

    preferences {
      min_healthy_percentage = 0
    }
  }

  tag {
    key                 = "Cluster"
    value               = var.name
    propagate_at_launch = true
  }

  lifecycle {
    precondition {
      condition     = var.worker_min <= var.worker_count && var.worker_count <= var.worker_max
      error_message = "worker_count must lie between worker_min and worker_max."
    }
  }

  # The input must be exported by the head before workers mount it.
  depends_on = [aws_volume_attachment.data]
}
