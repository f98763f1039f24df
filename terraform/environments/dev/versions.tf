terraform {
  required_version = ">= 1.5"

  required_providers {
    google = {
      source  = "hashicorp/google"
      version = "~> 7.39"
    }
    kubernetes = {
      source  = "hashicorp/kubernetes"
      version = "~> 3.2"
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

# The Kubernetes objects (modules/cluster_access) are made as the person running terraform,
# with their Google token. The control plane has no public endpoint unless operator_cidrs is
# set, so run terraform from inside the VPC or from one of those networks.
data "google_client_config" "current" {}

provider "kubernetes" {
  host                   = "https://${module.gke.operator_endpoint}"
  token                  = data.google_client_config.current.access_token
  cluster_ca_certificate = module.gke.ca_certificate
}
