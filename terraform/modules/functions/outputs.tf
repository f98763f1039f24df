output "api_url" {
  description = "HTTPS URL of the api function."
  value       = google_cloudfunctions2_function.api.service_config[0].uri
}

output "ticks_url" {
  description = "HTTPS URL of the ticks function (Cloud Tasks' target)."
  value       = google_cloudfunctions2_function.ticks.service_config[0].uri
}

output "control_plane_service_accounts" {
  description = "Emails of the control plane's service accounts, keyed by function (api, ticks)."
  value = {
    api   = google_service_account.api.email
    ticks = google_service_account.ticks.email
  }
}
