output "api_url" {
  description = "URL of the api function: point HANGAR_URL at it."
  value       = module.functions.api_url
}

output "ticks_url" {
  description = "URL of the ticks function (private; Cloud Tasks posts ticks to it)."
  value       = module.functions.ticks_url
}

output "session_bucket" {
  description = "Name of the checkpoint bucket."
  value       = module.bucket.name
}

output "settings" {
  description = "The backend settings the functions run with."
  value = {
    HANGAR_DB            = module.firestore.db_url
    HANGAR_SESSION_STORE = module.bucket.session_store_url
    HANGAR_KEYS          = module.kms.keys_url
    HANGAR_TICKS         = module.tasks.ticks_url
    HANGAR_TICKS_URL     = module.functions.ticks_url
    HANGAR_SANDBOXES     = local.sandboxes_url
    HANGAR_GKE_ENDPOINT  = module.gke.endpoint
    HANGAR_GKE_CA        = module.gke.ca_certificate
  }
}

output "gke_cluster" {
  description = "Name of the sandbox cluster."
  value       = module.gke.cluster_name
}

output "gke_endpoint" {
  description = "HANGAR_GKE_ENDPOINT: the sandbox cluster's private API endpoint, as the functions get it."
  value       = module.gke.endpoint
}

output "gke_ca" {
  description = "HANGAR_GKE_CA: the PEM of the sandbox cluster's CA, as the functions get it (text)."
  value       = module.gke.ca_certificate
}

output "sandbox_namespace" {
  description = "Namespace of the sandboxes."
  value       = module.cluster_access.namespace
}
