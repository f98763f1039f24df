# Checkpoint parts, run logs and artifacts. Everything in it is already encrypted by hangar
# (AES-256-GCM, data keys wrapped by KMS). hangar prunes checkpoints itself
# (session_keep_checkpoints), so there is no bucket retention policy and no versioning: both
# would keep pruned or deleted parts around.

resource "google_storage_bucket" "sessions" {
  project                     = var.project_id
  name                        = var.name
  location                    = var.location
  storage_class               = "STANDARD"
  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"
  force_destroy               = var.force_destroy

  versioning {
    enabled = false
  }

  # Only when session_retention_days > 0: delete objects older than that many days.
  dynamic "lifecycle_rule" {
    for_each = var.session_retention_days > 0 ? [var.session_retention_days] : []

    content {
      condition {
        age            = lifecycle_rule.value
        matches_prefix = ["${var.prefix}/"]
      }

      action {
        type = "Delete"
      }
    }
  }
}

resource "google_storage_bucket_iam_member" "object_admin" {
  for_each = var.control_plane_service_accounts

  bucket = google_storage_bucket.sessions.name
  role   = "roles/storage.objectAdmin"
  member = "serviceAccount:${each.value}"
}
