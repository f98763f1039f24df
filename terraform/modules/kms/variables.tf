variable "project_id" {
  description = "Project the key ring lives in."
  type        = string
}

variable "location" {
  description = "KMS location of the key ring (a region, or global)."
  type        = string
}

variable "key_ring_name" {
  description = "Name of the key ring. Key rings cannot be deleted, so pick one per environment and keep it."
  type        = string
}

variable "key_name" {
  description = "Name of the key that wraps the checkpoints' data keys."
  type        = string
  default     = "checkpoints"
}

variable "rotation_period" {
  description = "Rotation period of the key (seconds with an s suffix); old versions stay able to unwrap."
  type        = string
  default     = "7776000s"
}

variable "control_plane_service_accounts" {
  description = "Emails of the control plane's service accounts, keyed by a name known at plan time (api, ticks); each may wrap and unwrap with this key only."
  type        = map(string)
}
