variable "project_id" {
  description = "Project the checkpoint bucket lives in."
  type        = string
}

variable "name" {
  description = "Globally unique bucket name; HANGAR_SESSION_STORE is gs://NAME/PREFIX."
  type        = string
}

variable "location" {
  description = "Bucket location: a region (same as the functions keeps checkpoints fast) or a multi-region."
  type        = string
}

variable "prefix" {
  description = "Object prefix hangar writes under inside the bucket."
  type        = string
  default     = "hangar"
}

variable "session_retention_days" {
  description = "Delete objects this many days after they were written; 0 (the default) keeps them until hangar prunes them. Never a bucket retention policy: that would block pruning."
  type        = number
  default     = 0

  validation {
    condition     = var.session_retention_days >= 0 && floor(var.session_retention_days) == var.session_retention_days
    error_message = "session_retention_days must be a whole number of days, 0 or more."
  }
}

variable "force_destroy" {
  description = "Let terraform destroy delete a bucket that still holds checkpoints."
  type        = bool
  default     = false
}

variable "control_plane_service_accounts" {
  description = "Emails of the control plane's service accounts, keyed by a name known at plan time (api, ticks); they are the only principals granted object access."
  type        = map(string)
}
