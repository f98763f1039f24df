# The two Cloud Run functions (v2) and their identities. Both are the control plane: they share
# the backend settings and differ in who may call them. The api is public on the network and
# authenticates requests itself (bearer tokens); the ticks function is private and only the
# tasks service account (the identity Cloud Tasks signs its OIDC tokens as) may invoke it.

resource "google_service_account" "api" {
  project      = var.project_id
  account_id   = "${var.name_prefix}-api"
  display_name = "hangar api function"
}

resource "google_service_account" "ticks" {
  project      = var.project_id
  account_id   = "${var.name_prefix}-ticks"
  display_name = "hangar ticks function"
}

# Signed URLs. A sandbox that checkpoints straight to the bucket gets V4 signed URLs, one per
# object, signed with the function's own account: Cloud Run holds no private key, so the
# function signs through the IAM Credentials API's signBlob (HANGAR_SIGNING_SERVICE_ACCOUNT).
# That needs iam.serviceAccounts.signBlob on the account, and nothing more: a custom role with
# that one permission (roles/iam.serviceAccountTokenCreator would add access tokens, ID tokens
# and JWTs), granted to each function's account on itself only, never project-wide.
resource "google_project_iam_custom_role" "sign_blob" {
  project     = var.project_id
  role_id     = "${replace(var.name_prefix, "-", "_")}_signBlob"
  title       = "hangar: sign blobs as itself"
  description = "iam.serviceAccounts.signBlob only: signs the URLs of direct checkpoints."
  permissions = ["iam.serviceAccounts.signBlob"]
}

resource "google_service_account_iam_member" "api_signs_as_itself" {
  service_account_id = google_service_account.api.name
  role               = google_project_iam_custom_role.sign_blob.name
  member             = "serviceAccount:${google_service_account.api.email}"
}

resource "google_service_account_iam_member" "ticks_signs_as_itself" {
  service_account_id = google_service_account.ticks.name
  role               = google_project_iam_custom_role.sign_blob.name
  member             = "serviceAccount:${google_service_account.ticks.email}"
}

locals {
  # HANGAR_TASKS_INVOKER: Cloud Tasks signs every tick as this identity (an OIDC token for
  # the ticks function). FUNCTION_USE_ASGI: both entry points are ASGI; functions-framework
  # reads it as its --asgi flag.
  backend_env = {
    HANGAR_DB            = var.db_url
    HANGAR_SESSION_STORE = var.session_store_url
    HANGAR_KEYS          = var.keys_url
    HANGAR_TICKS         = var.ticks_url
    HANGAR_TASKS_INVOKER = var.tasks_service_account_email
    FUNCTION_USE_ASGI    = "true"
  }

  # HANGAR_GKE_CA takes the cluster's CA as PEM text (public: no secret holds it).
  gke_env = {
    for k, v in {
      HANGAR_GKE_ENDPOINT = var.gke_endpoint
      HANGAR_GKE_CA       = var.gke_ca_certificate
    } : k => v if var.gke_access
  }
  sandboxes_env = {
    for k, v in { HANGAR_SANDBOXES = var.sandboxes_url } : k => v if var.sandboxes_url != null
  }
  common_env = merge(var.extra_env, local.backend_env, local.gke_env, local.sandboxes_env)
}

resource "google_cloudfunctions2_function" "ticks" {
  project     = var.project_id
  location    = var.region
  name        = "${var.name_prefix}-ticks"
  description = "hangar tick handler: idle, checkpoint interval, turn watch, reap. Private."

  build_config {
    runtime     = var.runtime
    entry_point = var.ticks_entry_point

    source {
      storage_source {
        bucket = var.source_bucket
        object = var.ticks_source_object
      }
    }
  }

  service_config {
    service_account_email          = google_service_account.ticks.email
    available_memory               = var.ticks_memory
    timeout_seconds                = var.timeout_seconds
    max_instance_count             = var.ticks_max_instances
    ingress_settings               = "ALLOW_ALL"
    all_traffic_on_latest_revision = true
    environment_variables = merge(local.common_env, {
      HANGAR_SIGNING_SERVICE_ACCOUNT = google_service_account.ticks.email
    })

    # Direct VPC egress, private ranges only: the cluster's private endpoint is reached through
    # the VPC; Google APIs and everything else keep the default path.
    dynamic "direct_vpc_network_interface" {
      for_each = var.vpc_network == null ? [] : [true]

      content {
        network    = var.vpc_network
        subnetwork = var.vpc_subnetwork
      }
    }
    direct_vpc_egress = var.vpc_network == null ? null : "VPC_EGRESS_PRIVATE_RANGES_ONLY"

  }
}

resource "google_cloudfunctions2_function" "api" {
  project     = var.project_id
  location    = var.region
  name        = "${var.name_prefix}-api"
  description = "hangar REST API and MCP endpoint. Public; hangar checks bearer tokens itself."

  build_config {
    runtime     = var.runtime
    entry_point = var.api_entry_point

    source {
      storage_source {
        bucket = var.source_bucket
        object = var.api_source_object
      }
    }
  }

  service_config {
    service_account_email          = google_service_account.api.email
    available_memory               = var.api_memory
    timeout_seconds                = var.timeout_seconds
    max_instance_count             = var.api_max_instances
    ingress_settings               = "ALLOW_ALL"
    all_traffic_on_latest_revision = true
    environment_variables = merge(local.common_env, {
      # Cloud Tasks posts every tick to this URL, signed as the tasks service account.
      HANGAR_TICKS_URL = google_cloudfunctions2_function.ticks.service_config[0].uri

      # Signed URLs for direct checkpoints, signed by signBlob as this function's own account.
      HANGAR_SIGNING_SERVICE_ACCOUNT = google_service_account.api.email
    })

    dynamic "direct_vpc_network_interface" {
      for_each = var.vpc_network == null ? [] : [true]

      content {
        network    = var.vpc_network
        subnetwork = var.vpc_subnetwork
      }
    }
    direct_vpc_egress = var.vpc_network == null ? null : "VPC_EGRESS_PRIVATE_RANGES_ONLY"

  }
}

# Public on the network: app auth (hangar's bearer tokens) is the gate.
resource "google_cloud_run_v2_service_iam_member" "api_public" {
  project  = var.project_id
  location = var.region
  name     = google_cloudfunctions2_function.api.service_config[0].service
  role     = "roles/run.invoker"
  member   = "allUsers"
}

# Private: only Cloud Tasks, signing as the tasks service account, may call the ticks function.
resource "google_cloud_run_v2_service_iam_member" "ticks_invoker" {
  project  = var.project_id
  location = var.region
  name     = google_cloudfunctions2_function.ticks.service_config[0].service
  role     = "roles/run.invoker"
  member   = "serviceAccount:${var.tasks_service_account_email}"
}
