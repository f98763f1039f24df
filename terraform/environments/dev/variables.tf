variable "project_id" {
  description = "GCP project to deploy into."
  type        = string
}

variable "region" {
  description = "Region of the functions, the queue, the key ring and (by default) the bucket and Firestore."
  type        = string
  default     = "europe-west1"
}

variable "name_prefix" {
  description = "Prefix of every resource name (short and lower case: service account ids take it plus -ticks)."
  type        = string
  default     = "hangar-dev"
}

variable "firestore_location" {
  description = "Firestore location; null uses region."
  type        = string
  default     = null
}

variable "firestore_delete_protection" {
  description = "Refuse to delete the Firestore database on terraform destroy."
  type        = bool
  default     = false
}

variable "session_bucket_name" {
  description = "Name of the checkpoint bucket; null uses PROJECT-NAME_PREFIX-sessions."
  type        = string
  default     = null
}

variable "session_retention_days" {
  description = "Delete checkpoint objects this many days after they were written; 0 keeps them until hangar prunes them."
  type        = number
  default     = 0
}

variable "source_bucket" {
  description = "Bucket holding the function source archives that `make package` builds and uploads."
  type        = string
}

variable "api_source_object" {
  description = "Object path of the api function's archive in source_bucket."
  type        = string
  default     = "functions/api.zip"
}

variable "ticks_source_object" {
  description = "Object path of the ticks function's archive in source_bucket."
  type        = string
  default     = "functions/ticks.zip"
}

variable "settings" {
  description = "More HANGAR_* settings for both functions, for example HANGAR_SESSION_KEEP_CHECKPOINTS."
  type        = map(string)
  default     = {}
}

variable "gke_location" {
  description = "Location of the sandbox cluster; a zone keeps dev cheap. null uses the first zone of region (REGION-b)."
  type        = string
  default     = null
}

variable "image_streaming" {
  description = "Opt in to GKE image streaming on the sandbox node pool."
  type        = bool
  default     = false
}

variable "sandbox_disk_gb" {
  description = "Boot disk size of each sandbox node in GB; null keeps GKE's default (100 GB)."
  type        = number
  default     = null
}

variable "sandbox_disk_type" {
  description = "Boot disk type of each sandbox node; null keeps GKE's default. pd-balanced is faster for clones and checkpoints."
  type        = string
  default     = null
}

variable "sandbox_machine_type" {
  description = "Machine type of the sandbox nodes."
  type        = string
  default     = "e2-standard-4"
}

variable "sandbox_max_nodes" {
  description = "Most sandbox nodes per zone."
  type        = number
  default     = 3
}

variable "network" {
  description = "VPC network of the sandbox cluster, which the functions join through Direct VPC egress."
  type        = string
  default     = "default"
}

variable "subnetwork" {
  description = "Subnetwork, in region, of the cluster's nodes and of the functions' Direct VPC egress (the private endpoint admits the cluster subnetwork's primary range)."
  type        = string
  default     = "default"
}

variable "operator_cidrs" {
  description = "Networks allowed to reach a public control plane endpoint (to run terraform's kubernetes part and kubectl from outside the VPC); empty: no public endpoint."
  type        = list(string)
  default     = []
}

variable "image_repositories" {
  description = "Artifact Registry repositories of the environments' images (project, location, repository); the nodes may read these and no other."
  type = list(object({
    project    = string
    location   = string
    repository = string
  }))
  default = []
}

variable "sandbox_namespace" {
  description = "Kubernetes namespace of the sandboxes (the NAMESPACE of HANGAR_SANDBOXES)."
  type        = string
  default     = "hangar-sandboxes"
}

variable "sandbox_image" {
  description = "Image of environments that name none (the image= of HANGAR_SANDBOXES); null: every environment must name its image."
  type        = string
  default     = null
}
