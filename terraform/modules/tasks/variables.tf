variable "project_id" {
  description = "Project the queue and the tasks service account live in."
  type        = string
}

variable "region" {
  description = "Region of the Cloud Tasks queue."
  type        = string
}

variable "name_prefix" {
  description = "Prefix for the queue and the tasks service account names."
  type        = string
}

variable "control_plane_service_accounts" {
  description = "Emails of the control plane's service accounts, keyed by a name known at plan time (api, ticks); each may enqueue ticks signed as the tasks service account."
  type        = map(string)
}

variable "max_dispatches_per_second" {
  description = "Rate limit of tick deliveries to the ticks function."
  type        = number
  default     = 50
}

variable "max_concurrent_dispatches" {
  description = "How many ticks may be in flight at once."
  type        = number
  default     = 20
}

variable "max_attempts" {
  description = "Delivery attempts per tick; ticks are hints, so a few retries are enough."
  type        = number
  default     = 5
}
