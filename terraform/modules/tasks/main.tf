# The tick queue, and the identity Cloud Tasks signs OIDC tokens as when it calls the ticks
# function. Only that identity may invoke the ticks function (see the functions module).

resource "google_service_account" "tasks" {
  project      = var.project_id
  account_id   = "${var.name_prefix}-tasks"
  display_name = "hangar Cloud Tasks invoker"
}

resource "google_cloud_tasks_queue" "ticks" {
  project  = var.project_id
  location = var.region
  name     = "${var.name_prefix}-ticks"

  rate_limits {
    max_dispatches_per_second = var.max_dispatches_per_second
    max_concurrent_dispatches = var.max_concurrent_dispatches
  }

  retry_config {
    max_attempts  = var.max_attempts
    min_backoff   = "5s"
    max_backoff   = "300s"
    max_doublings = 4
  }
}

# The control plane enqueues ticks on this queue only.
resource "google_cloud_tasks_queue_iam_member" "enqueuer" {
  for_each = var.control_plane_service_accounts

  project  = var.project_id
  location = var.region
  name     = google_cloud_tasks_queue.ticks.name
  role     = "roles/cloudtasks.enqueuer"
  member   = "serviceAccount:${each.value}"
}

# Creating a task whose OIDC token is minted as the tasks service account requires actAs on it.
resource "google_service_account_iam_member" "act_as_tasks" {
  for_each = var.control_plane_service_accounts

  service_account_id = google_service_account.tasks.name
  role               = "roles/iam.serviceAccountUser"
  member             = "serviceAccount:${each.value}"
}
