# The cluster that runs sandbox pods: the GKE Agent Sandbox add-on (its controller and the four
# kinds hangar drives), a gVisor node pool for the sandboxes and a small ordinary pool for
# system pods (GKE Sandbox needs one pool without it), Dataplane V2 (which enforces the
# NetworkPolicies hangar writes into its SandboxTemplates), and a private control plane
# endpoint that the functions reach through Direct VPC egress.
#
# Provider facts relied on (hashicorp/google CHANGELOG and website/docs/r/container_cluster):
# - addons_config.agent_sandbox_config { enabled } is GA from 7.39.0 (#28017); 6.x has no such
#   field, hence the ~> 7.39 pin in every versions.tf.
# - node_config.sandbox_config is GA from 7.22.0 (#26247); its GA field is `type = "GVISOR"`
#   (`sandbox_type` is beta-only and deprecated).
# - datapath_provider = "ADVANCED_DATAPATH" is Dataplane V2, which enforces NetworkPolicy
#   without the Calico network_policy block.

locals {
  # europe-west1-b -> europe-west1; a region stays itself.
  region = join("-", slice(split("-", var.location), 0, 2))
  # No operator CIDRs: the control plane has no public endpoint at all.
  private_endpoint_only = length(var.operator_cidrs) == 0
}

resource "google_container_cluster" "sandboxes" {
  project             = var.project_id
  name                = var.cluster_name
  location            = var.location
  network             = var.network
  subnetwork          = var.subnetwork
  deletion_protection = var.deletion_protection

  remove_default_node_pool = true
  initial_node_count       = 1

  # VPC-native (alias IPs) is what Dataplane V2 runs on; GKE picks the ranges.
  networking_mode = "VPC_NATIVE"
  ip_allocation_policy {}

  # Dataplane V2: NetworkPolicy enforcement built in (the sandboxes' egress rules).
  datapath_provider = "ADVANCED_DATAPATH"

  addons_config {
    agent_sandbox_config {
      enabled = true
    }
  }

  # Private nodes and a private endpoint: the API server's address is internal, reached by the
  # functions through Direct VPC egress. With operator_cidrs set, a public endpoint is kept for
  # those networks only (to run terraform or kubectl from outside the VPC).
  private_cluster_config {
    enable_private_nodes    = true
    enable_private_endpoint = local.private_endpoint_only
    master_ipv4_cidr_block  = var.master_ipv4_cidr_block
  }

  dynamic "master_authorized_networks_config" {
    for_each = local.private_endpoint_only ? [] : [true]

    content {
      gcp_public_cidrs_access_enabled = false

      dynamic "cidr_blocks" {
        for_each = var.operator_cidrs

        content {
          cidr_block   = cidr_blocks.value
          display_name = "operator"
        }
      }
    }
  }

  release_channel {
    channel = var.release_channel
  }

  workload_identity_config {
    workload_pool = "${var.project_id}.svc.id.goog"
  }
}

# Private nodes have no external address: sandboxes reach the internet (model APIs, git hosts,
# public images) through Cloud NAT.
resource "google_compute_router" "nat" {
  project = var.project_id
  name    = "${var.cluster_name}-nat"
  region  = local.region
  network = var.network
}

resource "google_compute_router_nat" "nat" {
  project                            = var.project_id
  name                               = "${var.cluster_name}-nat"
  router                             = google_compute_router.nat.name
  region                             = local.region
  nat_ip_allocate_option             = "AUTO_ONLY"
  source_subnetwork_ip_ranges_to_nat = "ALL_SUBNETWORKS_ALL_IP_RANGES"

  log_config {
    enable = true
    filter = "ERRORS_ONLY"
  }
}

# Nodes run as their own account with only what nodes need (not the default compute one).
resource "google_service_account" "nodes" {
  project      = var.project_id
  account_id   = "${var.cluster_name}-nodes"
  display_name = "hangar sandbox nodes"
}

resource "google_project_iam_member" "nodes" {
  for_each = toset([
    "roles/logging.logWriter",
    "roles/monitoring.metricWriter",
  ])

  project = var.project_id
  role    = each.value
  member  = "serviceAccount:${google_service_account.nodes.email}"
}

# Image pulls: reader on the repositories that hold the environments' images, nothing wider.
resource "google_artifact_registry_repository_iam_member" "nodes" {
  for_each = { for r in var.image_repositories : "${r.project}/${r.location}/${r.repository}" => r }

  project    = each.value.project
  location   = each.value.location
  repository = each.value.repository
  role       = "roles/artifactregistry.reader"
  member     = "serviceAccount:${google_service_account.nodes.email}"
}

# System pods (kube-dns, metrics, konnectivity) cannot run on gVisor nodes: one small node.
resource "google_container_node_pool" "system" {
  project    = var.project_id
  name       = "system"
  location   = var.location
  cluster    = google_container_cluster.sandboxes.name
  node_count = var.system_nodes

  management {
    auto_repair  = true
    auto_upgrade = true
  }

  node_config {
    machine_type    = var.system_machine_type
    image_type      = "COS_CONTAINERD"
    service_account = google_service_account.nodes.email
    oauth_scopes    = ["https://www.googleapis.com/auth/cloud-platform"]

    workload_metadata_config {
      mode = "GKE_METADATA"
    }
  }
}

# The sandboxes' pool: every pod here runs under gVisor (RuntimeClass "gvisor"; GKE taints the
# nodes so only pods of that class land on them).
resource "google_container_node_pool" "sandboxes" {
  project  = var.project_id
  name     = "sandboxes"
  location = var.location
  cluster  = google_container_cluster.sandboxes.name

  autoscaling {
    min_node_count = var.sandbox_min_nodes
    max_node_count = var.sandbox_max_nodes
  }

  management {
    auto_repair  = true
    auto_upgrade = true
  }

  node_config {
    machine_type    = var.sandbox_machine_type
    image_type      = "COS_CONTAINERD"
    service_account = google_service_account.nodes.email
    disk_size_gb    = var.sandbox_disk_gb
    disk_type       = var.sandbox_disk_type
    labels          = var.sandbox_labels
    oauth_scopes    = ["https://www.googleapis.com/auth/cloud-platform"]

    sandbox_config {
      type = "GVISOR"
    }

    workload_metadata_config {
      mode = "GKE_METADATA"
    }

    # Opt-in: absent unless image_streaming is true, so existing pools see no change.
    dynamic "gcfs_config" {
      for_each = var.image_streaming ? [true] : []

      content {
        enabled = true
      }
    }
  }
}
