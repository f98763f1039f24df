terraform {
  required_version = ">= 1.5"

  required_providers {
    google = {
      source  = "hashicorp/google"
      version = "~> 6.0"
    }
  }

  # State is local by default; for a shared environment keep it in a bucket:
  # backend "gcs" {
  #   bucket = "my-terraform-state"
  #   prefix = "hangar/dev"
  # }
}

provider "google" {
  project = var.project_id
  region  = var.region
}
