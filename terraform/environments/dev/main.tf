# The dev environment: every module wired together. The control plane's identities come from
# the functions module; every other module grants them exactly what they need on its own
# resources and nothing project-wide (Firestore user is conditioned on the one database).

locals {
  firestore_location  = coalesce(var.firestore_location, var.region)
  session_bucket_name = coalesce(var.session_bucket_name, "${var.project_id}-${var.name_prefix}-sessions")
  gke_location        = coalesce(var.gke_location, "${var.region}-b")
  control_plane       = module.functions.control_plane_service_accounts
  cluster_name        = "${var.name_prefix}-sandboxes"

  # HANGAR_SANDBOXES: with HANGAR_GKE_ENDPOINT set the URL's context is not read, so it names
  # the cluster for people. The gVisor RuntimeClass is GKE Sandbox's; the image is the default
  # of environments that name none.
  sandbox_options = concat(
    var.sandbox_image == null ? [] : ["image=${urlencode(var.sandbox_image)}"],
    ["runtime_class=gvisor"],
  )
  sandboxes_url = "gke://${local.cluster_name}/${var.sandbox_namespace}?${join("&", local.sandbox_options)}"
}

resource "google_project_service" "apis" {
  for_each = toset([
    "cloudbuild.googleapis.com",
    "cloudfunctions.googleapis.com",
    "cloudkms.googleapis.com",
    "cloudtasks.googleapis.com",
    "container.googleapis.com",
    "firestore.googleapis.com",
    "iam.googleapis.com",
    "iamcredentials.googleapis.com",
    "compute.googleapis.com",
    "run.googleapis.com",
    "storage.googleapis.com",
  ])

  project            = var.project_id
  service            = each.value
  disable_on_destroy = false
}

module "firestore" {
  source = "../../modules/firestore"

  project_id                     = var.project_id
  database_name                  = var.name_prefix
  location                       = local.firestore_location
  delete_protection              = var.firestore_delete_protection
  control_plane_service_accounts = local.control_plane

  depends_on = [google_project_service.apis]
}

module "bucket" {
  source = "../../modules/bucket"

  project_id                     = var.project_id
  name                           = local.session_bucket_name
  location                       = var.region
  session_retention_days         = var.session_retention_days
  control_plane_service_accounts = local.control_plane
}

module "kms" {
  source = "../../modules/kms"

  project_id                     = var.project_id
  location                       = var.region
  key_ring_name                  = var.name_prefix
  control_plane_service_accounts = local.control_plane

  depends_on = [google_project_service.apis]
}

module "tasks" {
  source = "../../modules/tasks"

  project_id                     = var.project_id
  region                         = var.region
  name_prefix                    = var.name_prefix
  control_plane_service_accounts = local.control_plane

  depends_on = [google_project_service.apis]
}

module "functions" {
  source = "../../modules/functions"

  project_id                  = var.project_id
  region                      = var.region
  name_prefix                 = var.name_prefix
  source_bucket               = var.source_bucket
  api_source_object           = var.api_source_object
  ticks_source_object         = var.ticks_source_object
  db_url                      = module.firestore.db_url
  session_store_url           = module.bucket.session_store_url
  keys_url                    = module.kms.keys_url
  ticks_url                   = module.tasks.ticks_url
  tasks_service_account_email = module.tasks.service_account_email
  extra_env                   = var.settings

  # The sandbox cluster: its private endpoint through Direct VPC egress in the cluster's own
  # subnetwork (whose primary range the private endpoint admits), and its CA.
  gke_access         = true
  gke_endpoint       = module.gke.endpoint
  gke_ca_certificate = module.gke.ca_certificate
  sandboxes_url      = local.sandboxes_url
  vpc_network        = var.network
  vpc_subnetwork     = var.subnetwork

  depends_on = [google_project_service.apis]
}

module "gke" {
  source = "../../modules/gke"

  project_id           = var.project_id
  location             = local.gke_location
  cluster_name         = local.cluster_name
  network              = var.network
  subnetwork           = var.subnetwork
  operator_cidrs       = var.operator_cidrs
  image_repositories   = var.image_repositories
  deletion_protection  = false
  image_streaming      = var.image_streaming
  sandbox_disk_gb      = var.sandbox_disk_gb
  sandbox_disk_type    = var.sandbox_disk_type
  sandbox_machine_type = var.sandbox_machine_type
  sandbox_max_nodes    = var.sandbox_max_nodes

  depends_on = [google_project_service.apis]
}

# The namespace, the control plane's Role in it and the namespace's baseline NetworkPolicy,
# applied through the kubernetes provider (versions.tf) as the person running terraform.
module "cluster_access" {
  source = "../../modules/cluster_access"

  project_id                     = var.project_id
  namespace                      = var.sandbox_namespace
  control_plane_service_accounts = local.control_plane
}
