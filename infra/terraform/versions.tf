terraform {
  # OpenTofu >= 1.6 or Terraform >= 1.5: both read this configuration unchanged.
  required_version = ">= 1.5.0"

  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = "~> 5.80"
    }
  }
}
