output "cluster_name" {
  description = "Name of the sandbox cluster."
  value       = google_container_cluster.sandboxes.name
}

output "cluster_endpoint" {
  description = "Endpoint of the sandbox cluster's API server."
  value       = google_container_cluster.sandboxes.endpoint
  sensitive   = true
}

output "node_pool_name" {
  description = "Name of the sandbox node pool."
  value       = google_container_node_pool.sandboxes.name
}
