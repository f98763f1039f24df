output "name" {
  description = "Name of the checkpoint bucket."
  value       = google_storage_bucket.sessions.name
}

output "session_store_url" {
  description = "HANGAR_SESSION_STORE for the control plane: gs://BUCKET/PREFIX."
  value       = "gs://${google_storage_bucket.sessions.name}/${var.prefix}"
}
