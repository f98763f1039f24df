output "database_name" {
  description = "Firestore database id."
  value       = google_firestore_database.hangar.name
}

output "db_url" {
  description = "HANGAR_DB for the control plane: firestore://PROJECT/DATABASE."
  value       = "firestore://${var.project_id}/${google_firestore_database.hangar.name}"
}
