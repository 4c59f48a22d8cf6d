resource "aws_security_group" "cluster" {
  name        = "${var.name}-cluster"
  description = "Ray head and workers of ${var.name}"
  vpc_id      = aws_vpc.this.id

  tags = { Name = "${var.name}-cluster" }
}

locals {
  # Ports the nodes open to each other: Ray (fixed in the bootstrap scripts), rechain's metrics
  # endpoint, Prometheus and the NFS export of the input volume.
  intra_cluster_ports = {
    ray-gcs                  = { from = local.ray_ports.gcs, to = local.ray_ports.gcs }
    ray-object-manager       = { from = local.ray_ports.object_manager, to = local.ray_ports.object_manager }
    ray-node-manager         = { from = local.ray_ports.node_manager, to = local.ray_ports.node_manager }
    ray-dashboard-agent-grpc = { from = local.ray_ports.dashboard_agent_grpc, to = local.ray_ports.dashboard_agent_grpc }
    ray-runtime-env-agent    = { from = local.ray_ports.runtime_env_agent, to = local.ray_ports.runtime_env_agent }
    ray-metrics-export       = { from = local.ray_ports.metrics_export, to = local.ray_ports.metrics_export }
    ray-dashboard            = { from = local.ray_ports.dashboard, to = local.ray_ports.dashboard }
    ray-client-server        = { from = local.ray_ports.client_server, to = local.ray_ports.client_server }
    ray-dashboard-agent-http = { from = local.ray_ports.dashboard_agent_http, to = local.ray_ports.dashboard_agent_http }
    ray-workers              = { from = local.ray_ports.min_worker, to = local.ray_ports.max_worker }
    rechain-metrics          = { from = var.rechain_metrics_port, to = var.rechain_metrics_port }
    prometheus               = { from = 9090, to = 9090 }
    nfs                      = { from = 2049, to = 2049 }
  }

  # Ports the operator reaches from admin_cidr_blocks.
  admin_ports = {
    ssh                = 22
    ray-dashboard      = local.ray_ports.dashboard
    prometheus         = 9090
    rechain-metrics    = var.rechain_metrics_port
    ray-metrics-export = local.ray_ports.metrics_export
  }

  admin_rules = {
    for pair in setproduct(keys(local.admin_ports), var.admin_cidr_blocks) :
    "${pair[0]}-${pair[1]}" => { port = local.admin_ports[pair[0]], service = pair[0], cidr = pair[1] }
  }
}

resource "aws_vpc_security_group_ingress_rule" "intra_cluster" {
  for_each = local.intra_cluster_ports

  security_group_id            = aws_security_group.cluster.id
  referenced_security_group_id = aws_security_group.cluster.id
  ip_protocol                  = "tcp"
  from_port                    = each.value.from
  to_port                      = each.value.to
  description                  = "${each.key} between cluster nodes"
}

resource "aws_vpc_security_group_ingress_rule" "admin" {
  for_each = local.admin_rules

  security_group_id = aws_security_group.cluster.id
  cidr_ipv4         = each.value.cidr
  ip_protocol       = "tcp"
  from_port         = each.value.port
  to_port           = each.value.port
  description       = "${each.value.service} from ${each.value.cidr}"
}

resource "aws_vpc_security_group_egress_rule" "all" {
  security_group_id = aws_security_group.cluster.id
  cidr_ipv4         = "0.0.0.0/0"
  ip_protocol       = "-1"
  description       = "Nodes pull apt, PyPI, crates.io and the repository at boot, and write to S3"
}
