# The key that wraps every checkpoint's data key (envelope encryption). Destroying it makes
# every checkpoint unreadable, hence prevent_destroy.

resource "google_kms_key_ring" "hangar" {
  project  = var.project_id
  location = var.location
  name     = var.key_ring_name
}

resource "google_kms_crypto_key" "checkpoints" {
  name            = var.key_name
  key_ring        = google_kms_key_ring.hangar.id
  purpose         = "ENCRYPT_DECRYPT"
  rotation_period = var.rotation_period

  lifecycle {
    prevent_destroy = true
  }
}

resource "google_kms_crypto_key_iam_member" "encrypter_decrypter" {
  for_each = var.control_plane_service_accounts

  crypto_key_id = google_kms_crypto_key.checkpoints.id
  role          = "roles/cloudkms.cryptoKeyEncrypterDecrypter"
  member        = "serviceAccount:${each.value}"
}
