data "aws_ec2_instance_type" "head" {
  instance_type = var.head_instance_type
}

data "aws_ec2_instance_type" "worker" {
  instance_type = var.worker_instance_type
}

# Canonical's Ubuntu 22.04 images: python3.11 is an apt package there, as `make setup` needs.
data "aws_ssm_parameter" "ubuntu_ami" {
  for_each = toset(distinct(values(local.node_arch)))

  name = "/aws/service/canonical/ubuntu/server/22.04/stable/current/${each.key}/hvm/ebs-gp2/ami-id"
}

data "aws_iam_policy_document" "assume_ec2" {
  statement {
    actions = ["sts:AssumeRole"]

    principals {
      type        = "Service"
      identifiers = ["ec2.amazonaws.com"]
    }
  }
}
