output "cluster_name" {
  description = "Name of the sandbox cluster."
  value       = google_container_cluster.sandboxes.name
}

output "endpoint" {
  description = "URL of the API server's private endpoint (what the functions reach through Direct VPC egress): HANGAR_GKE_ENDPOINT."
  value       = "https://${google_container_cluster.sandboxes.private_cluster_config[0].private_endpoint}"
}

output "operator_endpoint" {
  description = "Address of the API server for operators: the public endpoint when operator_cidrs is set, else the private one."
  value       = google_container_cluster.sandboxes.endpoint
}

output "ca_certificate" {
  description = "PEM of the cluster's CA (the API server's certificate chains to it): the contents of the file HANGAR_GKE_CA names."
  value       = base64decode(google_container_cluster.sandboxes.master_auth[0].cluster_ca_certificate)
}

output "runtime_class" {
  description = "RuntimeClass of the gVisor sandbox pool (GKE Sandbox names it gvisor)."
  value       = "gvisor"
}

output "node_pool_name" {
  description = "Name of the sandbox node pool."
  value       = google_container_node_pool.sandboxes.name
}

output "node_service_account" {
  description = "Email of the nodes' service account."
  value       = google_service_account.nodes.email
}
