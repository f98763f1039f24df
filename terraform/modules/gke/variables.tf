variable "project_id" {
  description = "Project the cluster lives in."
  type        = string
}

variable "location" {
  description = "Cluster location: a region (regional cluster) or a zone (zonal, cheaper for dev)."
  type        = string
}

variable "cluster_name" {
  description = "Name of the GKE cluster that runs sandboxes (also the prefix of its node service account id, so at most 24 characters)."
  type        = string
}

variable "network" {
  description = "VPC network of the cluster."
  type        = string
  default     = "default"
}

variable "subnetwork" {
  description = "Subnetwork of the cluster; null uses the network's default for the location."
  type        = string
  default     = null
}

variable "master_ipv4_cidr_block" {
  description = "A /28 for the control plane's private addresses (clusters peered with the Google-managed VPC need one); null lets GKE choose (Private Service Connect clusters)."
  type        = string
  default     = null
}

variable "operator_cidrs" {
  description = "Networks (CIDRs) allowed to reach a public control plane endpoint, for running terraform or kubectl from outside the VPC. Empty: no public endpoint at all; the API is reachable only from the VPC (the functions, through Direct VPC egress)."
  type        = list(string)
  default     = []
}

variable "release_channel" {
  description = "GKE release channel: RAPID, REGULAR or STABLE."
  type        = string
  default     = "REGULAR"
}

variable "deletion_protection" {
  description = "Refuse to delete the cluster on terraform destroy."
  type        = bool
  default     = true
}

variable "system_machine_type" {
  description = "Machine type of the system pool's nodes (kube-dns and other system pods, which cannot run on gVisor nodes)."
  type        = string
  default     = "e2-medium"
}

variable "system_nodes" {
  description = "Nodes in the system pool (per zone of the cluster's location)."
  type        = number
  default     = 1
}

variable "image_repositories" {
  description = "Artifact Registry repositories holding the environments' images; the node service account gets roles/artifactregistry.reader on each, and nothing wider."
  type = list(object({
    project    = string
    location   = string
    repository = string
  }))
  default = []
}

variable "sandbox_machine_type" {
  description = "Machine type of the sandbox nodes."
  type        = string
  default     = "e2-standard-4"
}

variable "sandbox_min_nodes" {
  description = "Fewest sandbox nodes per zone (0 lets the pool scale to zero when no session is open)."
  type        = number
  default     = 0
}

variable "sandbox_max_nodes" {
  description = "Most sandbox nodes per zone."
  type        = number
  default     = 5
}

variable "image_streaming" {
  description = "Opt in to GKE image streaming (GCFS) on the sandbox pool: large sandbox images start before they are fully pulled. Needs images in Artifact Registry."
  type        = bool
  default     = false
}

variable "sandbox_disk_gb" {
  description = "Boot disk size of each sandbox node in GB; null keeps GKE's default (100 GB)."
  type        = number
  default     = null
}

variable "sandbox_disk_type" {
  description = "Boot disk type of each sandbox node (pd-standard, pd-balanced, pd-ssd); null keeps GKE's default. pd-balanced is the faster choice for clones and checkpoints."
  type        = string
  default     = null
}

variable "sandbox_labels" {
  description = "Kubernetes labels on the sandbox nodes, for the sandbox pods' node selector."
  type        = map(string)
  default     = { "hangar.dev/pool" = "sandboxes" }
}
