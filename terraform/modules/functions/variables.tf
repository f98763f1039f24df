variable "project_id" {
  description = "Project the functions and their service accounts live in."
  type        = string
}

variable "region" {
  description = "Region of both Cloud Run functions."
  type        = string
}

variable "name_prefix" {
  description = "Prefix for the function and service account names (lower case, short: service account ids are at most 30 characters)."
  type        = string
}

variable "runtime" {
  description = "Cloud Run functions runtime of both functions."
  type        = string
  default     = "python312"
}

variable "source_bucket" {
  description = "GCS bucket holding the source archives that `make package` builds."
  type        = string
}

variable "api_source_object" {
  description = "Object path, inside source_bucket, of the api function's source archive (zip)."
  type        = string
}

variable "ticks_source_object" {
  description = "Object path, inside source_bucket, of the ticks function's source archive (zip)."
  type        = string
}

variable "api_entry_point" {
  description = "Name of the callable in the api function's main.py."
  type        = string
  default     = "api"
}

variable "ticks_entry_point" {
  description = "Name of the callable in the ticks function's main.py."
  type        = string
  default     = "ticks"
}

variable "db_url" {
  description = "HANGAR_DB for both functions: firestore://PROJECT/DATABASE."
  type        = string
}

variable "session_store_url" {
  description = "HANGAR_SESSION_STORE for both functions: gs://BUCKET/PREFIX."
  type        = string
}

variable "keys_url" {
  description = "HANGAR_KEYS for both functions: gcpkms://projects/P/locations/L/keyRings/R/cryptoKeys/K."
  type        = string
}

variable "ticks_url" {
  description = "HANGAR_TICKS for both functions: cloudtasks://projects/P/locations/L/queues/Q."
  type        = string
}

variable "tasks_service_account_email" {
  description = "Service account Cloud Tasks signs its OIDC tokens as; the only identity allowed to invoke the ticks function."
  type        = string
}

variable "extra_env" {
  description = "More HANGAR_* settings for both functions (for example HANGAR_SANDBOXES or HANGAR_SESSION_KEEP_CHECKPOINTS). The backend URLs above win over same-named keys here."
  type        = map(string)
  default     = {}
}

variable "api_memory" {
  description = "Memory of each api function instance (Cloud Run notation, for example 512M)."
  type        = string
  default     = "512M"
}

variable "ticks_memory" {
  description = "Memory of each ticks function instance (Cloud Run notation, for example 512M)."
  type        = string
  default     = "512M"
}

variable "timeout_seconds" {
  description = "Request timeout of both functions. The api's wait_for_turn holds a request up to 600 s, so keep it above that."
  type        = number
  default     = 900
}

variable "api_max_instances" {
  description = "Upper bound on api function instances."
  type        = number
  default     = 20
}

variable "ticks_max_instances" {
  description = "Upper bound on ticks function instances."
  type        = number
  default     = 10
}

variable "gke_access" {
  description = "Give the functions the sandbox cluster: HANGAR_GKE_ENDPOINT and HANGAR_GKE_CA (the CA's PEM, as text). A plain bool, so it is known when planning."
  type        = bool
  default     = false
}

variable "gke_endpoint" {
  description = "HANGAR_GKE_ENDPOINT: URL of the sandbox cluster's API server (its private endpoint); used when gke_access is true."
  type        = string
  default     = null
}

variable "gke_ca_certificate" {
  description = "HANGAR_GKE_CA: PEM of the sandbox cluster's CA (public), passed as text; used when gke_access is true."
  type        = string
  default     = null
}

variable "sandboxes_url" {
  description = "HANGAR_SANDBOXES for both functions, for example gke://CLUSTER/NAMESPACE?image=REF&runtime_class=gvisor; null leaves it to extra_env. Wins over the same key in extra_env."
  type        = string
  default     = null
}

variable "vpc_network" {
  description = "VPC network the functions join through Direct VPC egress (private ranges only), to reach the cluster's private endpoint; null: no VPC egress."
  type        = string
  default     = null
}

variable "vpc_subnetwork" {
  description = "Subnetwork in the functions' region that Direct VPC egress takes addresses from; null uses the subnetwork named like vpc_network."
  type        = string
  default     = null
}
