variable "project_id" {
  description = "Project the Firestore database lives in."
  type        = string
}

variable "database_name" {
  description = "Firestore database id; HANGAR_DB is firestore://PROJECT/DATABASE_NAME."
  type        = string
}

variable "location" {
  description = "Firestore location: a region (for example europe-west1) or a multi-region (nam5, eur3)."
  type        = string
}

variable "delete_protection" {
  description = "Refuse to delete the database (and every session's state with it) on terraform destroy."
  type        = bool
  default     = true
}

variable "control_plane_service_accounts" {
  description = "Emails of the control plane's service accounts, keyed by a name known at plan time (api, ticks); each gets Firestore user on this database only."
  type        = map(string)
}
