output "crypto_key_id" {
  description = "Key id: projects/P/locations/L/keyRings/R/cryptoKeys/K."
  value       = google_kms_crypto_key.checkpoints.id
}

output "keys_url" {
  description = "HANGAR_KEYS for the control plane: gcpkms://projects/P/locations/L/keyRings/R/cryptoKeys/K."
  value       = "gcpkms://${google_kms_crypto_key.checkpoints.id}"
}
