resource "aws_vpc" "this" {
  cidr_block           = var.vpc_cidr
  enable_dns_support   = true
  enable_dns_hostnames = true

  tags = { Name = var.name }
}

# The default security group of the VPC allows nothing; nodes use aws_security_group.cluster.
resource "aws_default_security_group" "default" {
  vpc_id = aws_vpc.this.id

  tags = { Name = "${var.name}-default-deny" }
}

resource "aws_internet_gateway" "this" {
  vpc_id = aws_vpc.this.id

  tags = { Name = var.name }
}

# One public subnet in one zone: the input volume can attach only in its own zone, and the nodes
# talk to each other at full speed there. Nodes ask for public addresses themselves (they pull
# packages and the repository at boot); inbound traffic is limited by the security group.
resource "aws_subnet" "cluster" {
  vpc_id                  = aws_vpc.this.id
  cidr_block              = local.subnet_cidr
  availability_zone       = local.availability_zone
  map_public_ip_on_launch = false

  tags = { Name = "${var.name}-cluster" }
}

resource "aws_route_table" "public" {
  vpc_id = aws_vpc.this.id

  tags = { Name = "${var.name}-public" }
}

resource "aws_route" "internet" {
  route_table_id         = aws_route_table.public.id
  destination_cidr_block = "0.0.0.0/0"
  gateway_id             = aws_internet_gateway.this.id
}

resource "aws_route_table_association" "cluster" {
  subnet_id      = aws_subnet.cluster.id
  route_table_id = aws_route_table.public.id
}

# All nodes in one cluster placement group: lowest latency between the coordinator and workers.
resource "aws_placement_group" "cluster" {
  name     = var.name
  strategy = "cluster"
}
