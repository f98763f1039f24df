# The cluster that runs sandbox pods, with its own node pool for them. The default pool is
# removed so that sandboxes and system pods scale independently.

resource "google_container_cluster" "sandboxes" {
  project             = var.project_id
  name                = var.cluster_name
  location            = var.location
  network             = var.network
  subnetwork          = var.subnetwork
  deletion_protection = var.deletion_protection

  remove_default_node_pool = true
  initial_node_count       = 1

  release_channel {
    channel = var.release_channel
  }

  workload_identity_config {
    workload_pool = "${var.project_id}.svc.id.goog"
  }
}

# Sandbox nodes run as their own account with only what nodes need (not the default compute one).
resource "google_service_account" "nodes" {
  project      = var.project_id
  account_id   = "${var.cluster_name}-nodes"
  display_name = "hangar sandbox nodes"
}

resource "google_project_iam_member" "nodes" {
  for_each = toset([
    "roles/logging.logWriter",
    "roles/monitoring.metricWriter",
    "roles/artifactregistry.reader",
  ])

  project = var.project_id
  role    = each.value
  member  = "serviceAccount:${google_service_account.nodes.email}"
}

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
