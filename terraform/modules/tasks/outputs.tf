output "queue_id" {
  description = "Full queue id: projects/P/locations/L/queues/Q."
  value       = google_cloud_tasks_queue.ticks.id
}

output "ticks_url" {
  description = "HANGAR_TICKS for the control plane: cloudtasks://projects/P/locations/L/queues/Q."
  value       = "cloudtasks://projects/${var.project_id}/locations/${var.region}/queues/${google_cloud_tasks_queue.ticks.name}"
}

output "service_account_email" {
  description = "Email of the tasks service account (the only invoker of the ticks function)."
  value       = google_service_account.tasks.email
}
