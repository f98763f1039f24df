output "namespace" {
  description = "Namespace of the sandboxes."
  value       = kubernetes_namespace_v1.sandboxes.metadata[0].name
}

output "role" {
  description = "Name of the Role bound to the control plane in the namespace."
  value       = kubernetes_role_v1.control_plane.metadata[0].name
}
